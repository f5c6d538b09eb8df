#pragma once
// The CUDA engine (see dsp/engine.hpp for the contract). This header is plain
// C++ so that daemon/ can include it without CUDA headers.

#include <memory>
#include <string>
#include <vector>

#include "dsp/engine.hpp"

namespace tapstream {

// True when a CUDA device can be used; otherwise false and `reason` says why
// (no driver, no device, ...). Never throws.
bool cuda_device_available(std::string* reason);

// Throws std::runtime_error naming the failing CUDA call and its error string
// when the device cannot be used or runs out of memory.
std::unique_ptr<Engine> make_cuda_engine(const FilterBank& bank, const EngineOptions& options);

// Names accepted by EngineOptions::kernel for the direct-form path, "auto" first.
std::vector<std::string> cuda_kernel_variants();

}  // namespace tapstream

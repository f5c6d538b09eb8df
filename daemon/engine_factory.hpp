#pragma once
// Chooses and builds an Engine for a backend name. The one place where daemon/
// meets both dsp/ and kernels/.

#include <memory>
#include <string>

#include "dsp/engine.hpp"

namespace tapstream {

enum class Backend { cpu, cuda, automatic };

// "cpu", "cuda" or "auto"; throws std::invalid_argument naming the value otherwise.
Backend parse_backend(const std::string& name);

// cuda: throws if no usable GPU (or CUDA not built in). automatic: the CUDA
// engine when a GPU works, otherwise the CPU engine, logging the fallback once
// with its reason.
std::unique_ptr<Engine> make_engine(Backend backend, const FilterBank& bank,
                                    const EngineOptions& options);

}  // namespace tapstream

#pragma once
// Chooses and builds an Engine for a backend name. The one place where daemon/
// meets both dsp/ and kernels/: the CUDA engine lives in a module loaded only
// when a job asks for it (daemon/cuda_module), so that a run on the CPU engine
// starts without loading the CUDA libraries or creating a CUDA context.

#include <memory>
#include <string>

#include "daemon/pipeline/block_memory.hpp"
#include "dsp/engine.hpp"

namespace tapstream {

enum class Backend { cpu, cuda, automatic };

// "cpu", "cuda" or "auto"; throws std::invalid_argument naming the value otherwise.
Backend parse_backend(const std::string& name);

// cuda: throws if no usable GPU (or CUDA not built in). automatic: the CUDA
// engine when a GPU works, otherwise the CPU engine, logging the fallback once
// with its reason. The CUDA start-up (loading, device, engine) is logged at
// debug level with its time.
std::unique_ptr<Engine> make_engine(Backend backend, const FilterBank& bank,
                                    const EngineOptions& options);

// Memory for blocks to and from `engine`: page-locked for a CUDA engine (its
// copies then run straight from and to it, asynchronously), else ordinary.
BlockAllocator block_allocator(const Engine& engine);

}  // namespace tapstream

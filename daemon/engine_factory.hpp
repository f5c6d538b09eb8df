#pragma once
// Chooses and builds an Engine for a backend name. The one place where daemon/
// meets both dsp/ and kernels/: the CUDA engine lives in a module loaded only
// when a job asks for it (daemon/cuda_module), so that a run on the CPU engine
// starts without loading the CUDA libraries or creating a CUDA context.

#include <memory>
#include <span>
#include <string>

#include "daemon/pipeline/block_memory.hpp"
#include "dsp/engine.hpp"
#include "dsp/matrix_engine.hpp"

namespace tapstream {

enum class Backend { cpu, cuda, automatic };

// "cpu", "cuda" or "auto"; throws std::invalid_argument naming the value otherwise.
Backend parse_backend(const std::string& name);

// cuda: throws if no usable GPU (or CUDA not built in). automatic: the CUDA
// engine when a GPU works, otherwise the CPU engine, logging the fallback once
// with its reason. The CUDA start-up (loading, device, engine) is logged at
// debug level with its time. With options.max_block_frames 0 the factory picks
// the block for offline work on the engine it makes (offline_block_frames);
// the engine's max_block_frames() then says which.
std::unique_ptr<Engine> make_engine(Backend backend, const FilterBank& bank,
                                    const EngineOptions& options);

// The same for a routing matrix: the CUDA matrix engine
// (kernels/matrix/cuda_matrix_engine) or the CPU's native one
// (dsp/cpu_matrix_engine). The block is chosen for the larger of the matrix's
// input and output counts.
std::unique_ptr<MatrixEngine> make_matrix_engine(Backend backend, const RoutingMatrix& matrix,
                                                 const EngineOptions& options);

// Frames per offline block for an engine (cpu or cuda) and channel count:
// large enough that the per-call cost vanishes, small enough that six blocks
// in flight keep a modest footprint. Measured: the CPU engine is fastest at
// 16384 frames of stereo (60 s at 65536 taps: 0.13 s CPU, 0.17 s at 65536
// frames); the CUDA engine takes long filters in one partition only when the
// block is at least as long as the filter.
std::size_t offline_block_frames(const std::string& engine, std::size_t channels);

// Memory for blocks to and from `engine`: page-locked for a CUDA engine (its
// copies then run straight from and to it, asynchronously), else ordinary.
BlockAllocator block_allocator(const Engine& engine);

// A CUDA engine's own page-locked staging buffers (channels x max_block_frames
// floats each): calls whose `in` and `out` are these copy nothing on the host,
// and small ones go zero-copy. Empty for other engines.
struct EngineStaging {
  std::span<float> input;
  std::span<float> output;
};
EngineStaging engine_staging(Engine& engine);

// The CPU-side part of a CUDA engine's last process() call in microseconds
// (host copies, launches, enqueueing; the rest is the device's work and the
// wait for it); NaN for other engines.
double engine_call_host_us(const Engine& engine);

}  // namespace tapstream

#pragma once
// Chooses and builds an Engine for a backend name. The one place where daemon/
// meets both dsp/ and kernels/: the CUDA engine lives in a module loaded only
// when a job asks for it (daemon/cuda_module), so that a run on the CPU engine
// starts without loading the CUDA libraries or creating a CUDA context.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "daemon/device_list.hpp"
#include "daemon/pipeline/block_memory.hpp"
#include "dsp/model/engine.hpp"
#include "dsp/model/matrix_engine.hpp"

namespace tapstream {

enum class Backend { cpu, cuda, automatic };

// "cpu", "cuda" or "auto"; throws std::invalid_argument naming the value otherwise.
Backend parse_backend(const std::string& name);

// The engine for `matrix` on `backend`: a diagonal matrix (a filter per
// channel) runs on the per-channel engines (dsp/cpu/cpu_engine, the CUDA engine)
// through DiagonalEngine, any other on the native matrix engines
// (dsp/cpu/cpu_matrix_engine, kernels/matrix/cuda_matrix_engine).
// cuda: throws if no usable GPU (or CUDA not built in). automatic: the CUDA
// engine when a GPU works, otherwise the CPU engine, logging the fallback once
// with its reason. The CUDA start-up (loading, device, engine) is logged at
// debug level with its time. With options.max_block_frames 0 the factory picks
// the block for offline work on the engine it makes (offline_block_frames,
// for the larger of the matrix's input and output counts); the engine's
// max_block_frames() then says which.
//
// options.devices (resolved by engine_devices): one GPU is options.device;
// more shard the matrix's outputs over them, one CUDA engine each
// (dsp/model/sharded_engine), each with the block and filter room of the
// whole matrix. The CPU engine (backend cpu, auto's fallback) ignores them.
std::unique_ptr<MatrixEngine> make_engine(Backend backend, const RoutingMatrix& matrix,
                                          const EngineOptions& options);

// The GPU ordinals `list` names ("all" or empty: every visible GPU) where
// `backend` runs the CUDA engine; empty where it runs the CPU engine (cpu;
// auto without a usable GPU). Throws std::invalid_argument naming the
// list's culprit (a GPU that is not there), std::runtime_error for cuda
// without a usable GPU (its reason, as make_engine says it).
std::vector<int> engine_devices(Backend backend, const DeviceList& list);

// Begins the CUDA start-up (loading the module and its libraries, the
// driver, the device's context) on a thread of its own, once per process, so
// that it overlaps what the caller does before make_engine (reading headers
// and filters); make_engine waits for it. Does nothing without CUDA.
void start_cuda_in_background();

// A file job of `frames` frames of `channels` channels (the larger of a
// matrix's inputs and outputs) under `requested`: automatic becomes the CPU
// engine for jobs of at most kCpuJobSamples samples, where the CUDA engine
// cannot win. Measured file to file on the H100 host (16 cores,
// docs/performance.md, "File to file"): the GPU's start-up costs about
// 0.3 s, a job of 32 ch x 60 s (92 M samples) at 2048 or 65536 taps
// took 0.54-0.73 s on the CPU engine and 0.79-0.90 s on the CUDA engine, a
// job of 256 ch x 60 s (737 M samples) 5.7 s and 4.0 s. Any other request,
// and a job of unknown length (frames < 0), is returned as it is.
inline constexpr std::size_t kCpuJobSamples = std::size_t(1) << 27;
Backend backend_for_job(Backend requested, std::size_t channels, std::int64_t frames);

// Frames per offline block for an engine (cpu or cuda), channel count and
// longest filter (`taps`, delay included; 0: unknown): large enough that the
// per-call cost vanishes, small enough that six blocks in flight keep a
// modest footprint. Measured: the CPU engine is fastest at 16384 frames of
// stereo (60 s at 65536 taps: 0.13 s CPU, 0.17 s at 65536 frames); the CUDA
// engine takes long filters in one partition only when the block is at least
// as long as the filter. A gain (1 tap) on the CPU costs a multiply a
// sample, so its blocks are sized to the cache instead: kGainBlockSamples
// (1024 to 16384 frames), which a block keeps from its read through the
// multiply to its write, in fewer fresh pages (32 ch x 30 s identity on the
// 2-core development VM: 1.0-1.4 s at 2048 frames, 2.0-2.3 s at 16384).
inline constexpr std::size_t kGainBlockSamples = std::size_t(1) << 16;  // 256 KiB of floats
std::size_t offline_block_frames(const std::string& engine, std::size_t channels,
                                 std::size_t taps = 0);

// Memory for blocks to and from `engine`: its pinned_memory() when it has
// one (a CUDA engine: its copies then run straight from and to it,
// asynchronously), else ordinary.
BlockAllocator block_allocator(const MatrixEngine& engine);

}  // namespace tapstream

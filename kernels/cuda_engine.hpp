#pragma once
// The CUDA engine (see dsp/model/engine.hpp for the contract). This header is plain
// C++ so that daemon/ and bench/ can include it without CUDA headers.
//
// Two ways in:
// - Engine::process(): host memory in, host memory out, synchronous. Calls are
//   split into chunks pipelined over EngineOptions::streams CUDA streams (copy-in
//   of chunk i+1 overlaps the filtering of chunk i and the copy-out of chunk i-1);
//   (de)interleaving happens on the device. Passing pinned_input()/pinned_output()
//   as `in`/`out` skips the host-side copy into and out of the pinned staging.
// - CudaEngine::process_device(): planar device memory in and out, asynchronous
//   (ordered on stream()); call synchronize() before reading the output on the host.
// Both ways share the filter state (halo), so they may be mixed in one stream.

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dsp/model/engine.hpp"

// The CUDA runtime's stream type (cudaStream_t is CUstream_st*), declared here so
// that this header needs no CUDA headers.
struct CUstream_st;

namespace tapstream {

// True when a CUDA device can be used; otherwise false and `reason` is one
// plain sentence saying why: no driver, a driver too old, no GPU, a GPU too
// old for the build's architectures. Never throws.
bool cuda_device_available(std::string* reason);

// How many CUDA devices the process sees (CUDA_VISIBLE_DEVICES applied); 0
// when none or the query fails. Never throws.
int cuda_device_count();

// The sentence for a CUDA engine that failed to start on an available device
// (`what`: the exception's text): out of memory, or the error as it came.
std::string cuda_failure_sentence(const std::string& what);

// Names accepted by EngineOptions::kernel for the direct-form path, "auto" first:
// "auto" (= "tuned"), "naive", "constant", "shared_tile", "cached_tile", "tuned"; besides
// these, "partitioned" forces the non-uniformly partitioned streaming path
// (kernels/convolvers/partitioned_convolver.hpp) whatever the cost model says.
std::vector<std::string> cuda_kernel_variants();

class CudaEngine : public Engine {
 public:
  // Filters `frames` (1..max_block_frames()) new frames of every channel: channel
  // c's input at d_in + c * channel_stride, its output at d_out + c * channel_stride
  // (device memory, planar). Enqueued on stream() without waiting for the device;
  // d_in must stay unchanged and d_out unread until the work is done (synchronize(),
  // or an event recorded on stream()). No allocation, no host synchronisation.
  virtual void process_device(const float* d_in, float* d_out, std::size_t frames,
                              std::size_t channel_stride) = 0;
  // process_device() for a caller with a stream of its own: ordered after the
  // work enqueued on `after` (a cudaStream_t; null: the legacy default
  // stream), complete on return, so that d_out may be read at once (the
  // Python module's CUDA arrays).
  virtual void process_device_after(const float* d_in, float* d_out, std::size_t frames,
                                    std::size_t channel_stride, CUstream_st* after) = 0;
  // Waits for all work this engine enqueued; throws (naming the call) on a device error.
  virtual void synchronize() = 0;
  // The stream that process_device() work is ordered on (a cudaStream_t).
  virtual CUstream_st* stream() const = 0;

  // The calling thread's time in the last process() before it waited for the
  // device: host copies, launches and enqueueing (the call's CPU-side cost;
  // the rest of the call is the device's work and the wait for it).
  virtual double last_call_host_us() const = 0;

  // The engine's pinned host staging, channels() * max_block_frames() floats each.
  virtual std::span<float> pinned_input() = 0;
  virtual std::span<float> pinned_output() = 0;

  // What was chosen: Algorithm::direct or Algorithm::fft (never automatic), the
  // direct-form kernel variant ("tuned", ...; empty for fft), and where the taps
  // live ("constant", "global" or "fft").
  virtual Algorithm algorithm() const = 0;
  virtual std::string kernel() const = 0;
  virtual std::string taps_memory() const = 0;
};

// Throws std::invalid_argument for bad options (unknown kernel name, streams < 1,
// max_block_frames 0, max_taps below the bank's) and std::runtime_error naming the
// failing CUDA call when the device cannot be used or runs out of memory.
std::unique_ptr<CudaEngine> make_cuda_device_engine(const FilterBank& bank,
                                                    const EngineOptions& options);

// The same engine behind the plain Engine interface.
std::unique_ptr<Engine> make_cuda_engine(const FilterBank& bank, const EngineOptions& options);

}  // namespace tapstream

#pragma once
// A MatrixEngine runs a RoutingMatrix on a stream: inputs() channels in,
// outputs() channels out, each output the sum of its paths. It is the one
// engine interface the live and offline pipelines, the swapper, the control
// plane and status see; a filter per channel is the diagonal matrix. The same
// contract as Engine (dsp/model/engine.hpp): any call size 1..max_block_frames,
// output exactly the causal convolution of the whole stream (no added
// latency, independent of how the stream is cut), swaps at a block boundary
// with a one-block crossfade, one thread at a time, no allocation in
// process().
//
// Implementations (the engine factory, daemon/engine_factory, picks one):
// - DiagonalEngine (dsp/model/diagonal_engine): a diagonal matrix on a per-channel
//   Engine (the CPU engines, the CUDA engine), their fast paths untouched.
// - The native matrix engines: the CPU's (dsp/cpu/cpu_matrix_engine: one
//   frequency-domain delay line per input, one inverse transform per output,
//   BruteFIR's model) and the CUDA one (kernels/matrix/cuda_matrix_engine).
// - MatrixFilter (dsp/model/matrix_filter: any Engine with one channel per path),
//   a reference for tests and benchmarks.
// - ShardedEngine (dsp/model/sharded_engine): the outputs split over one of
//   the above per GPU.
//
// What only some engines offer is asked for through accessors with neutral
// defaults (realtime(), the CUDA transport's staging and page-locked memory,
// calls in two halves, the host-side call time), never by name or dynamic_cast.

#include <time.h>

#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>

#include "dsp/model/engine.hpp"
#include "dsp/model/routing_matrix.hpp"

namespace tapstream {

class RealtimeMatrixEngine;

// Page-locked host memory for blocks to and from an engine (a CUDA engine's
// copies then run straight from and to it, asynchronously); null functions:
// ordinary memory will do.
struct PinnedMemory {
  float* (*allocate)(std::size_t floats) = nullptr;  // zero-filled; throws on failure
  void (*free)(float* p) = nullptr;
};

// Memory on an engine's GPU (a CUDA engine's), for callers that keep
// filters or blocks there (set_paths_device, process_device) without a GPU
// library of their own (the benchmarks); empty functions: the engine has none.
struct DeviceMemory {
  std::function<float*(std::size_t floats)> allocate;  // throws on failure
  std::function<void(float* p)> free;
  std::function<void(float* device, const float* host, std::size_t floats)> copy_from_host;
};

class MatrixEngine {
 public:
  virtual ~MatrixEngine() = default;

  // `in` holds inputs() channels, `out` outputs() channels, `frames` frames
  // each, both in `layout`; they must not overlap.
  virtual void process(std::span<const float> in, std::span<float> out, std::size_t frames,
                       Layout layout) = 0;
  // Swaps in a matrix with the same paths (same input -> output pairs in the
  // same order; new filters, gains, delays or polarities) at the next block
  // boundary. Throws std::invalid_argument naming the first path that
  // differs, and keeps the running matrix.
  virtual void set_matrix(const RoutingMatrix& matrix, bool crossfade) = 0;
  // New taps for some paths, at the next block boundary, as set_matrix would
  // install the matrix with those paths' taps replaced (the same crossfade
  // over one call; gains, delays, polarities and every other path stay). The
  // native engines transform only the named paths' partitions, so many paths
  // may change at every block. Throws std::invalid_argument naming the path
  // (an index out of range, a path named twice, no taps, more than
  // max_taps() (delay included where the engine folds delays), a NaN or an
  // infinity) and keeps what runs. A second call before the next block adds
  // to the first (a path named in both takes the later taps).
  // The default refuses: every engine the factory makes implements it.
  virtual void set_paths(std::span<const PathTaps> paths, bool crossfade);
  // set_paths with the taps in device memory on the engine's GPU (a CUDA
  // engine's; the others return false and do nothing): transformed there,
  // with no copy through the host, after what was enqueued on `stream` (a
  // cudaStream_t; null: the legacy default stream) before the call. Throws
  // std::invalid_argument for taps that are not device memory.
  virtual bool set_paths_device(std::span<const PathTaps> /*paths*/, bool /*crossfade*/,
                                void* /*stream*/) {
    return false;
  }
  virtual void reset() = 0;

  virtual std::size_t inputs() const = 0;
  virtual std::size_t outputs() const = 0;
  virtual std::size_t max_block_frames() const = 0;
  virtual std::size_t max_taps() const = 0;
  // The longest delay a path may have without counting against max_taps():
  // an engine that delays natively (reads its inputs' delay line at an
  // offset) says how far back its delay line reaches; 0 (the default): the
  // engine folds a path's delay into its taps (delay_frames zeros), so
  // max_taps() bounds delay + taps.
  virtual std::size_t max_delay_frames() const { return 0; }
  // Short name ("cpu", "cuda") and a one-line description of the chosen
  // algorithm (for logs and status).
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;

  // --- capabilities: neutral unless the engine has them -----------------
  // The engine's face for running inside an audio callback, or null.
  virtual RealtimeMatrixEngine* realtime() { return nullptr; }
  // The engine's own page-locked staging (inputs() x max_block_frames() and
  // outputs() x max_block_frames() floats): calls whose `in` and `out` are
  // these copy nothing on the host, and small ones go zero-copy. Empty: none.
  virtual std::span<float> staging_input() { return {}; }
  virtual std::span<float> staging_output() { return {}; }
  // Memory to hand blocks to process() in (see PinnedMemory).
  virtual PinnedMemory pinned_memory() const { return {}; }
  // Memory on the engine's GPU (see DeviceMemory).
  virtual DeviceMemory device_memory() const { return {}; }
  // Device memory in and out (a CUDA engine's; the others return false and
  // do nothing): `frames` (1..max_block_frames()) frames of inputs()
  // channels, channel c at in + c * in_stride, into outputs() channels at
  // out + c * out_stride, planar, on the engine's GPU. The work follows what
  // was enqueued on `stream` (a cudaStream_t; null: the legacy default
  // stream) before the call and is complete on return; the stream, halo and
  // swaps are those of process(), so both may be mixed. Throws
  // std::invalid_argument for memory that is not on the device.
  virtual bool process_device(const float* /*in*/, std::size_t /*in_stride*/, float* /*out*/,
                              std::size_t /*out_stride*/, std::size_t /*frames*/,
                              void* /*stream*/) {
    return false;
  }
  // A call in two halves, as Engine::start_process and finish_process say
  // (neutral by default: start_process() is the whole process() call).
  virtual void start_process(std::span<const float> in, std::span<float> out, std::size_t frames,
                             Layout layout) {
    process(in, out, frames, layout);
  }
  virtual void finish_process() {}
  // The CPU-side part of the last process() call in microseconds (host
  // copies, launches, enqueueing; the rest is the device's work and the wait
  // for it); NaN when the engine does not tell.
  virtual double last_call_host_us() const { return std::numeric_limits<double>::quiet_NaN(); }
};

// What a MatrixEngine offers to be run inside an audio callback: the
// RealtimeEngine contract (dsp/model/engine.hpp) for a whole matrix. process_by()
// on the audio thread (the engine's one caller), post_matrix() on one other
// thread (the pipeline's swap thread) at the same time; any thread may call
// preparing_matrix().
class RealtimeMatrixEngine {
 public:
  virtual ~RealtimeMatrixEngine() = default;
  // MatrixEngine::process for the audio thread, within `deadline`
  // (CLOCK_MONOTONIC, absolute): see RealtimeEngine::process_by.
  virtual bool process_by(std::span<const float> in, std::span<float> out, std::size_t frames,
                          Layout layout, const timespec& deadline) noexcept = 0;
  // MatrixEngine::set_matrix off the audio thread, while process_by() runs:
  // checks the matrix (throws std::invalid_argument naming the problem and
  // keeps the running one), then has it prepared off the audio thread.
  virtual void post_matrix(const RoutingMatrix& matrix, bool crossfade) = 0;
  // MatrixEngine::set_paths off the audio thread, while process_by() runs:
  // checks the paths (throws std::invalid_argument naming the path), then
  // has them prepared off the audio thread, like post_matrix.
  virtual void post_paths(std::span<const PathTaps> paths, bool crossfade) = 0;
  // True while a posted matrix is still being prepared (tests wait on it).
  virtual bool preparing_matrix() const = 0;
};

// Throws std::invalid_argument unless `next` can replace `running` in place
// (same channel counts, same paths in the same order, each path within an
// engine's max_taps and max_delay_frames, as MatrixEngine says them: with
// max_delay_frames 0 delay + taps within max_taps, else taps within max_taps
// and delay within max_delay_frames). The message names the first path over.
void check_matrix_swap(const RoutingMatrix& running, const RoutingMatrix& next,
                       std::size_t max_taps, std::size_t max_delay_frames = 0);

// set_paths' check of host taps against the running matrix: throws
// std::invalid_argument naming the path (its index and input -> output
// pair) unless every index is one of the `running` paths, named once, with 1..
// max_taps taps (delay + taps when max_delay_frames is 0, as in
// check_matrix_swap), all finite. `finite`: false skips the scan of the
// values (device taps, checked where they are).
void check_path_taps(std::span<const MatrixPath> running, std::span<const PathTaps> paths,
                     std::size_t max_taps, std::size_t max_delay_frames = 0, bool finite = true);

// `running` with the named paths' taps replaced (checked by check_path_taps),
// their source set to `source`.
RoutingMatrix with_path_taps(const RoutingMatrix& running, std::span<const PathTaps> paths,
                             std::size_t max_taps, std::size_t max_delay_frames = 0,
                             const std::string& source = "set_paths");

}  // namespace tapstream

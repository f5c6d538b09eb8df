#pragma once
// The Engine interface: one streaming multi-channel FIR filter, implemented on
// the CPU (dsp/cpu/cpu_engine) and on CUDA GPUs (kernels/cuda_engine).
//
// Contract, common to every implementation:
// - Built for a FilterBank and a maximum block size; process() is then called
//   over and over on consecutive blocks of any size from 1 to max_block_frames.
// - Each call's output is exactly the matching part of the causal convolution
//   of the whole stream with each channel's filter: the engine carries the
//   halo (the last max_taps - 1 input samples of each channel) from block to
//   block. No latency is added: output block k depends only on input blocks 0..k.
// - set_filters() replaces the filters at the next block boundary. With
//   crossfade, the first block after the swap fades linearly from the old
//   filters' output to the new filters' output, so a swap makes no click; the
//   input history is kept, so no sample is lost or repeated.
// - An Engine is used by one thread at a time; it is not internally locked.

#include <time.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsp/model/filter_bank.hpp"

namespace tapstream {

// How the samples of a block are laid out in memory.
enum class Layout {
  interleaved,  // frame-major: sample (frame f, channel c) at f * channels + c
  planar,       // channel-major: sample (frame f, channel c) at c * frames + f
};

// Which algorithm an engine uses; automatic chooses by a cost model.
enum class Algorithm { automatic, direct, fft };

// The CPU engines' tuning (dsp/cpu/cpu_engine, dsp/cpu/cpu_nonuniform_engine).
struct CpuEngineOptions {
  // Threads one call may spread its channels over; 0 = every hardware thread
  // for the uniform engine's large blocks, the caller alone for the
  // non-uniform engine's in-call head (dsp/cpu/cpu_nonuniform_engine.cpp says why).
  std::size_t threads = 0;
  // The CPU matrix engine's partition in frames (a power of two in
  // 16..65536, checked where the engine is built); 0 = by the cost model.
  // For measuring the plans the model did not choose.
  std::size_t matrix_partition = 0;
};

// How the CUDA engine's small calls (zero-copy, direct form) reach the device
// and are waited for; automatic is the measured best (persistent; docs/performance.md,
// "Small calls").
enum class CudaSmallCalls {
  automatic,
  persistent,  // a kernel launched once serves every call (kernels/persistent_direct)
  spin,        // a launch per call, the host polls its event
  event,       // a launch per call, cudaEventSynchronize
};

// The routing matrix's spectral multiply-accumulate on the GPU; automatic is
// the measured best (tiled; docs/performance.md, "Routing matrix").
enum class CudaMatrixKernel { automatic, tiled, cublas };

// The CUDA engines' tuning. The defaults are the measured best; the other
// values exist so that a benchmark can time the alternatives in one run and a
// test can reach every path. Checked where the engine is built.
struct CudaEngineOptions {
  CudaSmallCalls small_calls = CudaSmallCalls::automatic;
  // The persistent kernel returns after this long without a call, so that a
  // device-wide synchronisation elsewhere in the process never waits longer.
  std::chrono::milliseconds persistent_idle{200};
  // How long a call waits for the persistent kernel's answer before a fresh
  // launch serves it: far above a call's few microseconds, short enough that
  // a live period survives the one time it happens.
  std::chrono::microseconds persistent_answer{50'000};
  // Record the persistent kernel's per-call times (bench/run-small-calls-gpu.sh).
  bool persistent_trace = false;
  // The persistent kernel's staging loads: 2 plain, 0 ld.cv, 1 ld.relaxed.sys.
  int persistent_loads = 2;
  // Whether the cost model may choose the non-uniformly partitioned path.
  bool partitioned = true;
  // Calls of at most this many samples (channels x frames) skip the copies:
  // the kernel reads and writes the pinned staging through mapped memory. Past
  // about a thousand samples its reads over the bus cost more than the two
  // copies save (docs/performance.md, "Zero-copy threshold").
  std::size_t zero_copy_samples = 1024;
  // Whether short filters over long planar blocks may use the cp.async
  // streaming tile kernel.
  bool stream_tiles = true;
  // The FFT path's partition in frames (a power of two in 64..32768); 0 = by
  // the cost model.
  std::size_t fft_partition = 0;
  // Whether the FFT path may run whole segments through its shared-memory
  // kernels (fused overlap-save, multi-partition) instead of cuFFT passes.
  bool fft_fused = true;
  CudaMatrixKernel matrix_kernel = CudaMatrixKernel::automatic;
  // Whether a routing matrix's block runs as one CUDA graph.
  bool matrix_graphs = true;
};

struct EngineOptions {
  std::size_t max_block_frames = 8192;
  // Longest filter the engine must be able to take in a later set_filters();
  // 0 means the initial bank's max_taps().
  std::size_t max_taps = 0;
  // Matrix engines that delay natively (MatrixEngine::max_delay_frames): the
  // longest path delay a later set_matrix() may bring. The delay line reaches
  // at least max(this, the initial matrix's longest delay), and 65536 frames
  // on the CUDA matrix engine; the CPU one no further than that (or a
  // partition): a longer line is cold memory its calls step through.
  std::size_t max_delay_frames = 0;
  Algorithm algorithm = Algorithm::automatic;
  // CUDA engine only: concurrent streams, kernel variant ("auto" or a name
  // from kernels/), device ordinal.
  int streams = 2;
  std::string kernel = "auto";
  int device = 0;
  // CUDA engines only, read by the engine factory: more than one GPU ordinal
  // shards the matrix's outputs over these GPUs, one engine each (`device`
  // set to each; dsp/model/sharded_engine); one ordinal is `device`; empty:
  // `device` alone. Resolved and checked by the factory's engine_devices().
  std::vector<int> devices;
  // The engine will be called inside an audio callback (same-period live
  // mode): the CPU engine then always takes its non-uniform form, which offers
  // RealtimeEngine (head in the call, tails and swaps on its own threads);
  // the CPU matrix engine offers RealtimeMatrixEngine where its cost model
  // says a call fits the callback (dsp/cpu/cpu_matrix_engine.cpp).
  bool realtime_calls = false;
  // The stream's sample rate, for realtime_calls: what a call of
  // max_block_frames lasts, against which the CPU matrix engine weighs its
  // worst call; 0: 48000.
  int sample_rate = 0;
  CpuEngineOptions cpu;
  CudaEngineOptions cuda;
};

// New taps for one path of a running matrix (MatrixEngine::set_paths,
// post_paths), or for one channel of a per-channel engine
// (Engine::set_channel_filters: `path` is the channel, since a per-channel
// engine runs the diagonal matrix, path c being channel c): the path's index
// and its new taps. The taps are read during the call only; the caller keeps
// them.
struct PathTaps {
  std::size_t path = 0;
  std::span<const float> taps;
};

class RealtimeEngine;

class Engine {
 public:
  virtual ~Engine() = default;

  // Filters one block of `frames` frames of every channel. `in` and `out` each
  // hold channels() * frames samples in `layout`; they must not overlap.
  virtual void process(std::span<const float> in, std::span<float> out, std::size_t frames,
                       Layout layout) = 0;

  // Replaces the filter bank from the next process() call on. The new bank
  // must have the same channel count and at most max_taps() taps per channel.
  virtual void set_filters(const FilterBank& bank, bool crossfade) = 0;

  // New taps for some channels (`path` of each entry is its channel), at the
  // next block boundary, as set_filters() would install the running bank
  // with those channels' filters replaced, with one difference: only the
  // named channels cost work (their transforms, and with crossfade their
  // old filters' output over the one call that fades), so that many
  // channels may change at every block. The other channels play on,
  // untouched, bit for bit. A second call before the next block adds to the
  // first (a channel named in both takes the later taps; the crossfade is
  // asked for when either asks). Throws std::invalid_argument naming the
  // channel (no such channel, named twice, no taps, more than max_taps(), a
  // NaN or an infinity: check_channel_taps) and keeps what runs and what is
  // pending. Returns false, having done nothing, where the engine cannot
  // (the caller then hands over a whole bank): by default, and where an
  // engine's running filters are one shared filter.
  virtual bool set_channel_filters(std::span<const PathTaps> /*channels*/, bool /*crossfade*/) {
    return false;
  }

  // Forgets the input history (as if the stream started again).
  virtual void reset() = 0;

  virtual std::size_t channels() const = 0;
  virtual std::size_t max_block_frames() const = 0;
  // The longest filter this engine was built to hold.
  virtual std::size_t max_taps() const = 0;
  // Short name ("cpu", "cuda") and a one-line description of the chosen
  // algorithm (for logs and status), e.g. "cpu: partitioned FFT, 1024-point, 17 partitions".
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  // The engine's real-time face (see RealtimeEngine), or null when it has
  // none (the CUDA engine, the CPU engine's uniform form).
  virtual RealtimeEngine* realtime() { return nullptr; }

  // A call in two halves (a capability, neutral by default): start_process()
  // does what process() does up to the wait for the engine's device and
  // returns; finish_process() waits and completes `out`, which must stay
  // valid (and `in` unchanged) until then. Between the two the caller may
  // start other engines' calls (a matrix sharded over GPUs starts every
  // device's call, then finishes each: dsp/model/sharded_engine), but makes
  // no other call on this engine. By default start_process() is the whole
  // call and finish_process() does nothing.
  virtual void start_process(std::span<const float> in, std::span<float> out, std::size_t frames,
                             Layout layout) {
    process(in, out, frames, layout);
  }
  virtual void finish_process() {}
};

// Engine::process's argument check, shared by the CPU engines: throws
// std::invalid_argument naming `engine` and what is wrong.
inline void check_process_call(const char* engine, std::span<const float> in, std::span<float> out,
                               std::size_t frames, std::size_t channels, std::size_t max_block) {
  if (frames == 0 || frames > max_block) {
    throw std::invalid_argument(std::string(engine) + ": block of " + std::to_string(frames) +
                                " frames, expected 1.." + std::to_string(max_block));
  }
  const std::size_t samples = frames * channels;
  if (in.size() < samples || out.size() < samples) {
    throw std::invalid_argument(std::string(engine) + ": buffer holds fewer than " +
                                std::to_string(samples) + " samples (" + std::to_string(frames) +
                                " frames x " + std::to_string(channels) + " channels)");
  }
}

// set_channel_filters' check: throws std::invalid_argument naming `engine`
// and the channel unless every entry names one of `channels` channels, once,
// with 1..max_taps taps, all finite.
inline void check_channel_taps(const char* engine, std::span<const PathTaps> updates,
                               std::size_t channels, std::size_t max_taps) {
  std::vector<bool> named(channels, false);
  for (const PathTaps& update : updates) {
    const std::string name = std::string(engine) + ": channel " + std::to_string(update.path);
    if (update.path >= channels)
      throw std::invalid_argument(name + ": no such channel (the engine has " +
                                  std::to_string(channels) + ")");
    if (named[update.path]) throw std::invalid_argument(name + ": named twice in one update");
    named[update.path] = true;
    if (update.taps.empty()) throw std::invalid_argument(name + ": no taps");
    if (update.taps.size() > max_taps)
      throw std::invalid_argument(name + ": " + std::to_string(update.taps.size()) +
                                  " taps; the engine holds at most " + std::to_string(max_taps));
    if (const std::size_t t = first_non_finite(update.taps); t != update.taps.size())
      throw std::invalid_argument(name + ": tap " + std::to_string(t) + " is not a finite number");
  }
}

// What an engine offers to be run inside an audio callback (the CPU engine's
// non-uniform form; see Engine::realtime()). Threads: process_by() on the
// audio thread (the Engine's one caller), post_filters() on one other thread
// (the pipeline's swap thread) at the same time; any thread may call
// preparing_filters(). Each implementation says why its orderings suffice.
class RealtimeEngine {
 public:
  virtual ~RealtimeEngine() = default;
  // Engine::process for the audio thread: never locks, allocates, frees or
  // logs, and waits for background work (a tail partition) only until
  // `deadline` (CLOCK_MONOTONIC, absolute). Returns false when some of the
  // call's output was not ready by then: `out` then holds silence, the
  // stream still advances by `frames`, and the late work is finished in the
  // background, so later calls stay exact (unless the engine fell so far
  // behind that its buffers overflowed: it then plays silence until its state
  // is whole again, returning false for each such call). Sizes must be valid
  // (1..max_block_frames, buffers large enough); invalid ones return false
  // with `out` untouched.
  virtual bool process_by(std::span<const float> in, std::span<float> out, std::size_t frames,
                          Layout layout, const timespec& deadline) noexcept = 0;
  // Engine::set_filters off the audio thread, while process_by() runs: checks
  // the bank (throws std::invalid_argument naming the problem), then prepares
  // it on the engine's own low-priority thread; process_by() takes it at a
  // call boundary without allocating, crossfading over one call.
  virtual void post_filters(const FilterBank& bank, bool crossfade) = 0;
  // Engine::set_channel_filters off the audio thread, while process_by()
  // runs: checks the channels (throws std::invalid_argument naming the
  // channel), then has only those prepared off the audio thread; false,
  // having done nothing, where the engine cannot (then post_filters()).
  virtual bool post_channel_filters(std::span<const PathTaps> /*channels*/, bool /*crossfade*/) {
    return false;
  }
  // True while a posted bank is still being prepared (tests wait on it).
  virtual bool preparing_filters() const = 0;
};

}  // namespace tapstream

#pragma once
// The Engine interface: one streaming multi-channel FIR filter, implemented on
// the CPU (dsp/cpu_engine) and on CUDA GPUs (kernels/cuda_engine).
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

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "dsp/filter_bank.hpp"

namespace tapstream {

// How the samples of a block are laid out in memory.
enum class Layout {
  interleaved,  // frame-major: sample (frame f, channel c) at f * channels + c
  planar,       // channel-major: sample (frame f, channel c) at c * frames + f
};

// Which algorithm an engine uses; automatic chooses by a cost model.
enum class Algorithm { automatic, direct, fft };

struct EngineOptions {
  std::size_t max_block_frames = 8192;
  // Longest filter the engine must be able to take in a later set_filters();
  // 0 means the initial bank's max_taps().
  std::size_t max_taps = 0;
  Algorithm algorithm = Algorithm::automatic;
  // CUDA engine only: concurrent streams, kernel variant ("auto" or a name
  // from kernels/), device ordinal.
  int streams = 2;
  std::string kernel = "auto";
  int device = 0;
};

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
};

}  // namespace tapstream

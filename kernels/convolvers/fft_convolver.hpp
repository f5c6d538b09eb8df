#pragma once
// The CUDA engine's frequency-domain path for long filters: uniformly
// partitioned overlap-save with a frequency-domain delay line (cuFFT), all
// channels batched, the complex multiply-accumulate fused in one kernel.
// Zero added latency: any number of frames per call; calls are split
// internally at partition boundaries.
//
// A DeviceConvolver (device_convolver.hpp): input and output are planar
// device buffers owned by the caller, and every operation is enqueued on the
// caller's stream without host synchronisation, so the engine can order it
// against its copies with events. Calls must be issued in stream order (block
// k's process before block k+1's).

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "dsp/model/filter_bank.hpp"
#include "kernels/convolvers/device_convolver.hpp"

namespace tapstream::cuda {

class FftConvolver final : public DeviceConvolver {
 public:
  // Holds filters of up to max_taps taps (bank.max_taps() <= max_taps) for
  // bank.channels() channels; partition_frames is a power of two (0: choose
  // from max_block_frames and max_taps). With fused_callbacks, runs of whole
  // segments go through cuFFT callbacks (kernels/device/fft_callbacks.hpp) where the
  // device and the library allow it, else through separate kernels (fused()
  // and description() say which). Off by default: the callback plans ran
  // slower than the separate kernels (cuFFT switches to a complex-to-complex
  // transform with extra pre/post passes) and take seconds to JIT-link
  // (docs/history.md, "cuFFT callbacks").
  // With use_fused_kernel,
  // a filter that fits one partition runs whole segments through one kernel
  // (kernels/device/fused_overlap_save.hpp) instead of the cuFFT passes, and the
  // partition chosen (partition_frames == 0) is the filter's length rounded up
  // to a power of two when the blocks are at least that long. Likewise a filter
  // of K > 1 partitions of 256..16384 frames (K up to 16, or 32) runs whole
  // segments through three kernels (kernels/device/multi_partition_overlap_save.hpp:
  // shared-memory FFTs and a MAC sliding along the segments), and the partition
  // chosen for filters longer than 16384 taps is then the smallest of at least
  // 4096 frames with such a K, when the blocks are at least that long. Partial
  // segments and crossfades keep the cuFFT passes in both cases.
  // An explicit partition_frames replaces that choice (the CUDA engine passes
  // EngineOptions::cuda.fft_partition, so that one benchmark run can time each
  // candidate).
  FftConvolver(const FilterBank& bank, std::size_t max_taps, std::size_t max_block_frames,
               std::size_t partition_frames = 0, bool fused_callbacks = false,
               bool use_fused_kernel = true);
  ~FftConvolver() override;
  FftConvolver(const FftConvolver&) = delete;
  FftConvolver& operator=(const FftConvolver&) = delete;

  // Planar device memory only: block.in.frame_stride and
  // block.out_frame_stride must be 1 (the engine stages other layouts).
  bool takes_any_view() const override { return false; }

  // Filters block.frames (1..max_block_frames) new frames of every channel:
  // channel c's input at block.in.data + c * block.in.channel_stride, its
  // output at block.out + c * block.out_channel_stride. A crossfade after a
  // swap spans this call (block.call_offset and call_frames are not read).
  void process(const DeviceBlock& block, cudaStream_t stream) override;

  // Transforms the new filters (may allocate and synchronise: call it off the
  // per-block path); they take effect at the next process(). With crossfade,
  // that call's output fades linearly from the old filters' to the new's.
  void set_filters(const FilterBank& bank, bool crossfade) override;

  // Clears the delay line (as if the stream started again), on `stream`.
  void reset(cudaStream_t stream) override;

  Algorithm algorithm() const override { return Algorithm::fft; }

  std::size_t partition_frames() const;
  // Filter partitions of partition_frames() taps (the delay line's length).
  std::size_t partitions() const;
  // True when whole segments use the fused cuFFT-callback path.
  bool fused() const;
  // True when whole segments use the fused overlap-save kernel (K == 1).
  bool fused_kernel() const;
  // True when whole segments use the multi-partition kernels (K > 1).
  bool segment_kernels() const;
  std::string description() const override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tapstream::cuda

#pragma once
// Single-partition overlap-save in one kernel: for filters of at most P taps
// (one partition), each thread block takes one 2P-sample window of one
// channel straight from the input into shared memory, transforms it (a
// P-point complex FFT of the even/odd sample pairs plus the real-FFT split),
// multiplies by the filter spectrum, transforms back and stores only the P
// valid outputs. Input and output cross device memory once (the windows
// overlap by half, which the L2 absorbs), instead of the five passes of the
// cuFFT path (windows, R2C, multiply, C2R, copy-out: ~77 bytes per output).

#include <cuda_runtime.h>

#include <cstddef>

namespace tapstream::cuda {

struct FusedOverlapSaveArgs {
  // Segment t of channel c (t = 0..segments-1) starts at in + c * in_stride + t * P;
  // the segment before segment 0 at history + c * history_stride.
  const float* in = nullptr;
  std::size_t in_stride = 0;
  const float* history = nullptr;
  std::size_t history_stride = 0;
  // Filter spectrum of the 2P-point real transform, P + 1 bins per filter,
  // the inverse transform's 1/(2P) folded in: channel c's at
  // filter + c * filter_channel_stride (0 for one shared filter).
  const float2* filter = nullptr;
  std::size_t filter_channel_stride = 0;
  // Output segment t of channel c at out + c * out_stride + t * P.
  float* out = nullptr;
  std::size_t out_stride = 0;
  std::size_t channels = 0;
  std::size_t partition = 0;  // P
  std::size_t segments = 0;
};

// Whether the kernel is built for this partition (256..16384, powers of two).
bool fused_overlap_save_supports(std::size_t partition);

// Makes the kernel for `partition` ready to launch on the current device
// (raises its dynamic shared-memory limit where it needs more than 48 KiB).
// Call once, off the per-block path; throws when the device cannot run it.
void prepare_fused_overlap_save(std::size_t partition);

void launch_fused_overlap_save(const FusedOverlapSaveArgs& args, cudaStream_t stream);

}  // namespace tapstream::cuda

#pragma once
// The time-domain side of partitioned overlap-save on the device: filling the
// 2P-sample input windows that the forward FFT reads, carrying the previous
// segment from call to call, and taking the valid half of each inverse FFT out
// (with the swap crossfade). All buffers are planar per channel; a window is
// [previous segment | current segment].
//
// The stage is one window per channel, [channels][2P]: its first half holds the
// last completed segment, its second half the frames of the current segment
// received so far, zeros after them (the future is zero in a causal window).

#include <cuda_runtime.h>

#include <cstddef>

namespace tapstream::cuda {

// stage[c][P + offset + i] = in[c * in_stride + i] for i < frames.
void launch_write_stage(float* stage, const float* in, std::size_t in_stride, std::size_t channels,
                        std::size_t partition, std::size_t offset, std::size_t frames,
                        cudaStream_t stream);

// At a segment boundary: the current segment becomes the previous one, and the
// new current segment starts empty (zeros).
void launch_advance_stage(float* stage, std::size_t channels, std::size_t partition,
                          cudaStream_t stream);

// Windows for `segments` whole segments of new input starting at a segment
// boundary: windows[t][c] = [segment t - 1 | segment t], where segment -1 is
// the stage's previous segment. Then (a second launch, after the windows have
// read it) the stage keeps the last new segment as its previous one.
void launch_build_windows(float* windows, const float* in, std::size_t in_stride,
                          const float* stage, std::size_t channels, std::size_t partition,
                          std::size_t segments, cudaStream_t stream);
void launch_keep_last_segment(float* stage, const float* in, std::size_t in_stride,
                              std::size_t channels, std::size_t partition, std::size_t segments,
                              cudaStream_t stream);

struct EmitArgs {
  const float* filtered = nullptr;      // inverse FFTs, [segments][channels][2P]
  const float* filtered_old = nullptr;  // the old filters' during a crossfade, else null
  float* out = nullptr;                 // out[c * out_stride + t * P + i]
  std::size_t out_stride = 0;
  std::size_t channels = 0;
  std::size_t partition = 0;
  std::size_t segments = 0;
  std::size_t first = 0;   // position of the first new frame within its segment
  std::size_t frames = 0;  // frames per segment to emit (partition for whole segments)
  // Crossfade weight of frame i of the call: (call_offset + i + 1) / call_frames.
  std::size_t call_offset = 0;
  std::size_t call_frames = 1;
};

// out = second half of each window's inverse FFT (the valid overlap-save
// outputs), faded from filtered_old to filtered when filtered_old is set.
void launch_emit(const EmitArgs& args, cudaStream_t stream);

}  // namespace tapstream::cuda

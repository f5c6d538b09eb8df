#pragma once
// The time-domain side of the CUDA routing matrix, one chunk (the part of a
// call inside one segment of P frames) at a time. Every kernel here reads the
// chunk's position from device memory (a MatrixChunk the call uploads with its
// input), so that a call's launch sequence depends only on its shape (call
// size, layout, chunk count) and can be captured once as a CUDA graph and
// replayed whatever the stream position.

#include <cuda_runtime.h>

#include <cstddef>

namespace tapstream::cuda {

struct MatrixChunk {
  int first = 0;   // position of the chunk's first frame within its segment
  int frames = 0;  // frames in the chunk (first + frames <= P)
  int done = 0;    // frames of the call before the chunk
  int slot = 0;    // delay-line slot of the chunk's segment (0..slots-1)
};

// Samples (c, f) at data[c * channel_stride + f * frame_stride].
struct Samples {
  float* data = nullptr;
  long long channel_stride = 0;
  long long frame_stride = 1;
};

// stage[c][P + first + i] = in(c, done + i) for the chunk's frames; the
// stage is [channels][2P], [previous segment | current segment, zeros after].
// max_frames bounds the chunk's frames (the grid's width).
void launch_stage_input(float* stage, Samples in, const MatrixChunk* chunk, int channels,
                        int partition, int max_frames, cudaStream_t stream);

// After the forward transform of the stage: the current spectra
// ([channels][bins]) go to both copies of the chunk's slot in the mirrored
// delay line ([2 * slots][channels][bins], slot s at s and s + slots), so that
// the partitions j = slots-1 .. 0 always lie contiguous at positions
// slot+1 .. slot+slots. If `window_pointers` is set, window_pointers[b] is
// bin b of that window (cuBLAS's per-bin A). At a segment boundary (the chunk
// ends the segment) the stage moves on: the current segment becomes the
// previous one and the new current segment starts as zeros.
void launch_store_current(float2* fdl, const float2* current, const MatrixChunk* chunk,
                          int channels, int bins, int slots, float* stage, int partition,
                          float2** window_pointers, cudaStream_t stream);

// out(c, done + i) = the valid half of the chunk's inverse transforms
// ([channels][2P]), faded from `filtered_old` (when set) to `filtered` over
// the call: weight (done + i + 1) / call_frames.
void launch_emit_output(Samples out, const float* filtered, const float* filtered_old,
                        const MatrixChunk* chunk, int channels, int partition, int max_frames,
                        int call_frames, cudaStream_t stream);

// pointers[b] = base + b * stride for b < count (cuBLAS's per-bin B and C).
void launch_fill_pointers(float2** pointers, const float2* base, long long stride, int count,
                          cudaStream_t stream);

}  // namespace tapstream::cuda

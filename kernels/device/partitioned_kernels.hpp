#pragma once
// Kernels of the non-uniformly partitioned path (partitioned_convolver.hpp)
// and their typed launch wrappers. Rings are planar, one row of ring_len
// (a power of two) floats per channel; stream frame n lives at n & (ring_len-1).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/device/direct_kernels.hpp"

namespace tapstream::cuda {

// The in-call kernel: y(c, f) = sum_{k < head_taps} h_c[k] x(c, f - k) plus the
// tail's output for that frame (taken from the output ring, which it zeroes);
// x(c, f) for f >= 0 is the call's input, for f < 0 the input ring. Also
// appends the call's input to the input ring. With old_taps, the call is the
// crossfade after a swap: old (old_taps + old_tail_ring) fades into new.
struct HeadArgs {
  SampleView in;
  int channels = 0;
  int frames = 0;
  std::int64_t first_frame = 0;  // stream frame of the call's frame 0
  // Non-null: first_frame is read from here when the kernel runs (a call
  // replayed from a captured graph; launch_add_to_counter moves it on).
  const std::int64_t* first_frame_counter = nullptr;
  float* in_ring = nullptr;
  float* tail_ring = nullptr;
  std::int64_t ring_len = 0;
  const float* taps = nullptr;  // channel c's head at taps + c * taps_channel_stride
  std::int64_t taps_channel_stride = 0;
  int head_taps = 0;
  const float* old_taps = nullptr;  // non-null: crossfade from these
  float* old_tail_ring = nullptr;
  // With old_taps: null, every channel fades; else only the channels whose
  // flag is set (a per-channel update), the others play the new filters.
  const unsigned char* fade_channels = nullptr;
  std::int64_t blend_offset = 0;  // w = (blend_offset + f + 1) / blend_frames
  std::int64_t blend_frames = 1;
  float* out = nullptr;
  std::int64_t out_channel_stride = 0;
  std::int64_t out_frame_stride = 1;
};
void launch_partitioned_head(const HeadArgs& args, cudaStream_t stream);

// A tail step's index: `value`, or with `counter` non-null the device's
// *counter at the time the kernel runs (a captured graph then replays the
// next step each time; advance_step() moves the counter on).
struct StepIndex {
  std::int64_t value = 0;
  const std::int64_t* counter = nullptr;
};

// window[c][t] = x(c, first_frame + step * frames_per_step + t) for t <
// window_frames, from the input ring.
void launch_gather_windows(const float* in_ring, std::int64_t ring_len, std::int64_t first_frame,
                           StepIndex step, std::int64_t frames_per_step, float* window,
                           std::size_t window_frames, std::size_t channels, cudaStream_t stream);

// *counter += 1 (after the graph of a step).
void launch_advance_step(std::int64_t* counter, cudaStream_t stream);

// *counter += amount, and *counter = value: a replayed call's stream position.
void launch_add_to_counter(std::int64_t* counter, std::int64_t amount, cudaStream_t stream);
void launch_set_counter(std::int64_t* counter, std::int64_t value, cudaStream_t stream);

// acc[c][bin] = sum_{i < count} X_{step - i}[c][bin] * H_i[c][bin], X_n in delay
// line slot n mod slots ([slot][channel][bin]), H_i at spectra + i *
// partition_stride + c * (bins). Parallel over bins, channels and groups of
// partitions (groups > 1 accumulate with atomics into a zeroed acc). With
// `current` non-null, X_step is read from it (the forward transform's fixed
// output) and stored into its delay-line slot.
// With `channel_list` (device memory, `rows` entries), only those channels,
// acc packed: row u holds channel channel_list[u].
struct TailMacArgs {
  float2* delay_line = nullptr;
  std::size_t slots = 0;
  StepIndex step;
  const float2* current = nullptr;
  const float2* spectra = nullptr;
  std::size_t count = 0;
  std::size_t channels = 0;
  std::size_t bins = 0;
  float2* acc = nullptr;
  const int* channel_list = nullptr;
  std::size_t rows = 0;
};
void launch_tail_mac(const TailMacArgs& args, cudaStream_t stream);

// ring[c][(f + u) & mask] += block[c * block_stride + u] for u < frames and
// f + u >= min_frame, where f = first_frame + step * frames_per_step. With
// `channel_list` (device memory, `channels` entries), block row c goes to
// ring row channel_list[c].
void launch_accumulate_tail(const float* block, std::size_t block_stride, std::size_t frames,
                            std::size_t channels, float* ring, std::int64_t ring_len,
                            std::int64_t first_frame, StepIndex step, std::int64_t frames_per_step,
                            std::int64_t min_frame, cudaStream_t stream,
                            const int* channel_list = nullptr);

// Rows of `width` floats, for per-channel updates: for plane < planes and
// u < rows, dst row (plane * dst_plane_rows + dst_row(u)) = src row (plane *
// src_plane_rows + src_row(u)), where row(u) = list[u] with a list (device
// memory), else u; a null src writes zeros.
void launch_move_rows(const float* src, std::size_t src_plane_rows, const int* src_list, float* dst,
                      std::size_t dst_plane_rows, const int* dst_list, std::size_t rows,
                      std::size_t width, std::size_t planes, cudaStream_t stream);

// flags[list[u]] = value for u < count (`list` device memory).
void launch_set_channel_flags(const int* list, std::size_t count, unsigned char* flags,
                              unsigned char value, cudaStream_t stream);

// For the filter spectra: out[(i * rows + r) * 2P + t] = scale * taps[r *
// taps_stride + first_tap + i * P + t] for t < P, zero for P <= t < 2P.
void launch_scatter_partitions(const float* taps, std::size_t taps_stride, std::size_t rows,
                               std::size_t first_tap, std::size_t partition_frames,
                               std::size_t count, float scale, float* out, cudaStream_t stream);

}  // namespace tapstream::cuda

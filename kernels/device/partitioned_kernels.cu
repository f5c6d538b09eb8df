#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "kernels/device/partitioned_kernels.hpp"

namespace tapstream::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kHeadTile = 128;   // output frames per block of the head kernel
constexpr int kHeadChunk = 512;  // taps staged in shared memory at a time

unsigned blocks_for(std::size_t n, int threads) {
  return unsigned((n + threads - 1) / threads);
}

__device__ __forceinline__ std::int64_t step_of(StepIndex s) {
  return s.counter != nullptr ? *s.counter : s.value;
}

__device__ __forceinline__ float head_input(const HeadArgs& a, int c, std::int64_t f) {
  if (f >= 0) return a.in.data[c * a.in.channel_stride + f * a.in.frame_stride];
  return a.in_ring[c * a.ring_len + ((a.first_frame + f) & (a.ring_len - 1))];
}

// One block per (tile of kHeadTile frames, channel); the taps and the input
// window they touch are staged in shared memory a chunk at a time. Blocks read
// the input ring only before the call's first frame and write it only from it
// on, so blocks of one launch never race on it.
__global__ void head_kernel(HeadArgs a) {
  if (a.first_frame_counter != nullptr) a.first_frame = *a.first_frame_counter;
  __shared__ float window[kHeadTile + kHeadChunk];
  __shared__ float h[kHeadChunk];
  const int c = blockIdx.y;
  const int f0 = blockIdx.x * kHeadTile;
  const int f = f0 + threadIdx.x;
  const bool valid = f < a.frames;
  float acc[2] = {0.0f, 0.0f};
  // Uniform over the block (one channel): the __syncthreads below stay safe.
  const bool fades =
      a.old_taps != nullptr && (a.fade_channels == nullptr || a.fade_channels[c] != 0);
  const int passes = fades ? 2 : 1;
  for (int pass = 0; pass < passes; ++pass) {
    const float* taps = (pass == 0 ? a.taps : a.old_taps) + c * a.taps_channel_stride;
    for (int k0 = 0; k0 < a.head_taps; k0 += kHeadChunk) {
      const int kn = min(kHeadChunk, a.head_taps - k0);
      const std::int64_t base = std::int64_t(f0) - k0 - kn + 1;
      __syncthreads();
      for (int i = threadIdx.x; i < kn; i += blockDim.x) h[i] = taps[k0 + i];
      for (int i = threadIdx.x; i < kHeadTile + kn - 1; i += blockDim.x) {
        const std::int64_t n = base + i;
        window[i] = n < a.frames ? head_input(a, c, n) : 0.0f;
      }
      __syncthreads();
      if (valid) {
        const float* x = window + threadIdx.x + kn - 1;
        float s = 0.0f;
#pragma unroll 8
        for (int k = 0; k < kn; ++k) s = fmaf(h[k], x[-k], s);
        acc[pass] += s;
      }
    }
  }
  if (!valid) return;
  const std::int64_t at = c * a.ring_len + ((a.first_frame + f) & (a.ring_len - 1));
  a.in_ring[at] = head_input(a, c, f);
  float y = acc[0] + a.tail_ring[at];
  a.tail_ring[at] = 0.0f;
  if (fades) {
    float old = acc[1];
    if (a.old_tail_ring != nullptr) {
      old += a.old_tail_ring[at];
      a.old_tail_ring[at] = 0.0f;
    }
    const float w = float(double(a.blend_offset + f + 1) / double(a.blend_frames));
    y = old * (1.0f - w) + y * w;
  }
  a.out[c * a.out_channel_stride + f * a.out_frame_stride] = y;
}

__global__ void gather_windows_kernel(const float* ring, std::int64_t ring_len,
                                      std::int64_t first_frame, StepIndex step,
                                      std::int64_t frames_per_step, float* window,
                                      std::size_t window_frames) {
  const std::size_t t = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (t >= window_frames) return;
  first_frame += step_of(step) * frames_per_step;
  const std::size_t c = blockIdx.y;
  window[c * window_frames + t] =
      ring[c * ring_len + ((first_frame + std::int64_t(t)) & (ring_len - 1))];
}

__device__ __forceinline__ void complex_mac(float2& acc, float2 x, float2 h) {
  acc.x = fmaf(x.x, h.x, fmaf(-x.y, h.y, acc.x));
  acc.y = fmaf(x.x, h.y, fmaf(x.y, h.x, acc.y));
}

// blockIdx.z is a group of partitions: [z * per_group, (z + 1) * per_group).
__global__ void tail_mac_kernel(TailMacArgs a, std::size_t per_group) {
  const std::size_t bin = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (bin >= a.bins) return;
  const std::size_t c =
      a.channel_list != nullptr ? std::size_t(a.channel_list[blockIdx.y]) : std::size_t(blockIdx.y);
  const std::size_t within = c * a.bins + bin;
  const std::size_t out_at = std::size_t(blockIdx.y) * a.bins + bin;
  const std::size_t per_slot = a.channels * a.bins;
  const std::size_t first = blockIdx.z * per_group;
  const std::size_t end = min(a.count, first + per_group);
  const std::int64_t step = step_of(a.step);
  float2 acc = make_float2(0.0f, 0.0f);
  for (std::size_t i = first; i < end; ++i) {
    const std::int64_t n = step - std::int64_t(i);
    const std::int64_t slot =
        ((n % std::int64_t(a.slots)) + std::int64_t(a.slots)) % std::int64_t(a.slots);
    float2 x;
    if (i == 0 && a.current != nullptr) {
      // Only group 0 holds partition 0; the other groups read older slots.
      x = a.current[within];
      a.delay_line[std::size_t(slot) * per_slot + within] = x;
    } else {
      x = a.delay_line[std::size_t(slot) * per_slot + within];
    }
    complex_mac(acc, x, a.spectra[i * per_slot + within]);
  }
  if (gridDim.z == 1) {
    a.acc[out_at] = acc;
  } else {
    atomicAdd(&a.acc[out_at].x, acc.x);
    atomicAdd(&a.acc[out_at].y, acc.y);
  }
}

__global__ void accumulate_tail_kernel(const float* block, std::size_t block_stride,
                                       std::size_t frames, float* ring, std::int64_t ring_len,
                                       std::int64_t first_frame, StepIndex step,
                                       std::int64_t frames_per_step, std::int64_t min_frame,
                                       const int* channel_list) {
  const std::size_t u = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (u >= frames) return;
  const std::int64_t frame = first_frame + step_of(step) * frames_per_step + std::int64_t(u);
  if (frame < min_frame) return;
  const std::size_t row = blockIdx.y;
  const std::size_t c = channel_list != nullptr ? std::size_t(channel_list[row]) : row;
  // Atomic: the segments' steps run on streams of their own and may add into
  // the same frames at once.
  atomicAdd(&ring[c * ring_len + (frame & (ring_len - 1))], block[row * block_stride + u]);
}

// blockIdx.y: a (plane, row) pair, strided; x: the row's floats.
__global__ void move_rows_kernel(const float* src, std::size_t src_plane_rows, const int* src_list,
                                 float* dst, std::size_t dst_plane_rows, const int* dst_list,
                                 std::size_t rows, std::size_t width, std::size_t pairs) {
  const std::size_t k = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (k >= width) return;
  for (std::size_t pair = blockIdx.y; pair < pairs; pair += gridDim.y) {
    const std::size_t plane = pair / rows, u = pair % rows;
    const std::size_t to = plane * dst_plane_rows + (dst_list ? std::size_t(dst_list[u]) : u);
    float value = 0.0f;
    if (src != nullptr) {
      const std::size_t from = plane * src_plane_rows + (src_list ? std::size_t(src_list[u]) : u);
      value = src[from * width + k];
    }
    dst[to * width + k] = value;
  }
}

__global__ void set_channel_flags_kernel(const int* list, std::size_t count, unsigned char* flags,
                                         unsigned char value) {
  const std::size_t u = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (u < count) flags[list[u]] = value;
}

__global__ void advance_step_kernel(std::int64_t* counter) {
  *counter += 1;
}

__global__ void add_to_counter_kernel(std::int64_t* counter, std::int64_t amount) {
  *counter += amount;
}

__global__ void set_counter_kernel(std::int64_t* counter, std::int64_t value) {
  *counter = value;
}

__global__ void scatter_partitions_kernel(const float* taps, std::size_t taps_stride,
                                          std::size_t rows, std::size_t first_tap, std::size_t P,
                                          std::size_t total_rows, float scale, float* out) {
  const std::size_t t = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (t >= 2 * P) return;
  for (std::size_t row = blockIdx.y; row < total_rows; row += gridDim.y) {  // i * rows + r
    const std::size_t i = row / rows, r = row % rows;
    out[row * 2 * P + t] = t < P ? scale * taps[r * taps_stride + first_tap + i * P + t] : 0.0f;
  }
}

}  // namespace

void launch_partitioned_head(const HeadArgs& args, cudaStream_t stream) {
  if (args.frames <= 0 || args.channels <= 0) return;
  head_kernel<<<dim3(blocks_for(std::size_t(args.frames), kHeadTile), unsigned(args.channels)),
                kHeadTile, 0, stream>>>(args);
  TAPSTREAM_CUDA_CHECK_LAUNCH("head_kernel");
}

void launch_gather_windows(const float* in_ring, std::int64_t ring_len, std::int64_t first_frame,
                           StepIndex step, std::int64_t frames_per_step, float* window,
                           std::size_t window_frames, std::size_t channels, cudaStream_t stream) {
  gather_windows_kernel<<<dim3(blocks_for(window_frames, kThreads), unsigned(channels)), kThreads,
                          0, stream>>>(in_ring, ring_len, first_frame, step, frames_per_step,
                                       window, window_frames);
  TAPSTREAM_CUDA_CHECK_LAUNCH("gather_windows_kernel");
}

void launch_advance_step(std::int64_t* counter, cudaStream_t stream) {
  advance_step_kernel<<<1, 1, 0, stream>>>(counter);
  TAPSTREAM_CUDA_CHECK_LAUNCH("advance_step_kernel");
}

void launch_add_to_counter(std::int64_t* counter, std::int64_t amount, cudaStream_t stream) {
  add_to_counter_kernel<<<1, 1, 0, stream>>>(counter, amount);
  TAPSTREAM_CUDA_CHECK_LAUNCH("add_to_counter_kernel");
}

void launch_set_counter(std::int64_t* counter, std::int64_t value, cudaStream_t stream) {
  set_counter_kernel<<<1, 1, 0, stream>>>(counter, value);
  TAPSTREAM_CUDA_CHECK_LAUNCH("set_counter_kernel");
}

void launch_tail_mac(const TailMacArgs& args, cudaStream_t stream) {
  // Enough (bin, channel, group) threads to fill an H100 a few times over;
  // each group walks at least 4 partitions so atomics stay a small share.
  const std::size_t rows = args.channel_list != nullptr ? args.rows : args.channels;
  if (rows == 0) return;
  const std::size_t threads = args.bins * rows;
  const std::size_t wanted = std::max<std::size_t>(1, (std::size_t(1) << 19) / threads);
  const std::size_t groups = std::min(wanted, std::max<std::size_t>(1, args.count / 4));
  const std::size_t per_group = (args.count + groups - 1) / groups;
  const std::size_t used = (args.count + per_group - 1) / per_group;
  if (used > 1)
    TAPSTREAM_CUDA_CHECK(cudaMemsetAsync(args.acc, 0, rows * args.bins * sizeof(float2), stream));
  tail_mac_kernel<<<dim3(blocks_for(args.bins, kThreads), unsigned(rows), unsigned(used)), kThreads,
                    0, stream>>>(args, per_group);
  TAPSTREAM_CUDA_CHECK_LAUNCH("tail_mac_kernel");
}

void launch_accumulate_tail(const float* block, std::size_t block_stride, std::size_t frames,
                            std::size_t channels, float* ring, std::int64_t ring_len,
                            std::int64_t first_frame, StepIndex step, std::int64_t frames_per_step,
                            std::int64_t min_frame, cudaStream_t stream, const int* channel_list) {
  if (channels == 0) return;
  accumulate_tail_kernel<<<dim3(blocks_for(frames, kThreads), unsigned(channels)), kThreads, 0,
                           stream>>>(block, block_stride, frames, ring, ring_len, first_frame, step,
                                     frames_per_step, min_frame, channel_list);
  TAPSTREAM_CUDA_CHECK_LAUNCH("accumulate_tail_kernel");
}

void launch_move_rows(const float* src, std::size_t src_plane_rows, const int* src_list, float* dst,
                      std::size_t dst_plane_rows, const int* dst_list, std::size_t rows,
                      std::size_t width, std::size_t planes, cudaStream_t stream) {
  const std::size_t pairs = rows * planes;
  if (pairs == 0 || width == 0) return;
  move_rows_kernel<<<dim3(blocks_for(width, kThreads),
                          unsigned(std::min<std::size_t>(pairs, 65535))),
                     kThreads, 0, stream>>>(src, src_plane_rows, src_list, dst, dst_plane_rows,
                                            dst_list, rows, width, pairs);
  TAPSTREAM_CUDA_CHECK_LAUNCH("move_rows_kernel");
}

void launch_set_channel_flags(const int* list, std::size_t count, unsigned char* flags,
                              unsigned char value, cudaStream_t stream) {
  if (count == 0) return;
  set_channel_flags_kernel<<<blocks_for(count, kThreads), kThreads, 0, stream>>>(list, count, flags,
                                                                                 value);
  TAPSTREAM_CUDA_CHECK_LAUNCH("set_channel_flags_kernel");
}

void launch_scatter_partitions(const float* taps, std::size_t taps_stride, std::size_t rows,
                               std::size_t first_tap, std::size_t partition_frames,
                               std::size_t count, float scale, float* out, cudaStream_t stream) {
  const std::size_t total_rows = rows * count;
  scatter_partitions_kernel<<<dim3(blocks_for(2 * partition_frames, kThreads),
                                   unsigned(std::min<std::size_t>(total_rows, 65535))),
                              kThreads, 0, stream>>>(taps, taps_stride, rows, first_tap,
                                                     partition_frames, total_rows, scale, out);
  TAPSTREAM_CUDA_CHECK_LAUNCH("scatter_partitions_kernel");
}

}  // namespace tapstream::cuda

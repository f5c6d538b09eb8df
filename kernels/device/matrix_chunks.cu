#include "kernels/cuda_check.hpp"
#include "kernels/device/matrix_chunks.hpp"

namespace tapstream::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void stage_input_kernel(float* stage, Samples in, const MatrixChunk* chunk,
                                   int partition) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const MatrixChunk k = *chunk;
  if (i >= k.frames) return;
  const int c = blockIdx.y;
  stage[(long long)c * 2 * partition + partition + k.first + i] =
      in.data[c * in.channel_stride + (long long)(k.done + i) * in.frame_stride];
}

__global__ void store_current_kernel(float2* fdl, const float2* current, const MatrixChunk* chunk,
                                     int channels, int bins, int slots, float* stage, int partition,
                                     float2** window_pointers) {
  const int index = blockIdx.x * blockDim.x + threadIdx.x;
  const MatrixChunk k = *chunk;
  const long long per_slot = (long long)channels * bins;
  if (index < per_slot) {
    const float2 v = current[index];
    fdl[k.slot * per_slot + index] = v;
    fdl[(k.slot + slots) * per_slot + index] = v;
  }
  if (window_pointers != nullptr && index < bins)
    window_pointers[index] = fdl + (k.slot + 1) * per_slot + index;
  // bins = P + 1 > P: the grid covers every sample of the stage's halves.
  if (k.first + k.frames == partition) {
    const int c = index / bins, i = index % bins;
    if (c < channels && i < partition) {
      float* row = stage + (long long)c * 2 * partition;
      row[i] = row[partition + i];
      row[partition + i] = 0.0f;
    }
  }
}

__global__ void emit_output_kernel(Samples out, const float* filtered, const float* filtered_old,
                                   const MatrixChunk* chunk, int partition, int call_frames) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const MatrixChunk k = *chunk;
  if (i >= k.frames) return;
  const int c = blockIdx.y;
  const long long source = (long long)c * 2 * partition + partition + k.first + i;
  float value = filtered[source];
  if (filtered_old != nullptr) {
    const float w = float(k.done + i + 1) / float(call_frames);
    value = filtered_old[source] * (1.0f - w) + value * w;
  }
  out.data[c * out.channel_stride + (long long)(k.done + i) * out.frame_stride] = value;
}

__global__ void fill_pointers_kernel(float2** pointers, const float2* base, long long stride,
                                     int count) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b < count) pointers[b] = const_cast<float2*>(base) + b * stride;
}

unsigned blocks_for(long long n) {
  return unsigned((n + kThreads - 1) / kThreads);
}

}  // namespace

void launch_stage_input(float* stage, Samples in, const MatrixChunk* chunk, int channels,
                        int partition, int max_frames, cudaStream_t stream) {
  stage_input_kernel<<<dim3(blocks_for(max_frames), unsigned(channels)), kThreads, 0, stream>>>(
      stage, in, chunk, partition);
  TAPSTREAM_CUDA_CHECK_LAUNCH("stage_input_kernel");
}

void launch_store_current(float2* fdl, const float2* current, const MatrixChunk* chunk,
                          int channels, int bins, int slots, float* stage, int partition,
                          float2** window_pointers, cudaStream_t stream) {
  store_current_kernel<<<blocks_for((long long)channels * bins), kThreads, 0, stream>>>(
      fdl, current, chunk, channels, bins, slots, stage, partition, window_pointers);
  TAPSTREAM_CUDA_CHECK_LAUNCH("store_current_kernel");
}

void launch_emit_output(Samples out, const float* filtered, const float* filtered_old,
                        const MatrixChunk* chunk, int channels, int partition, int max_frames,
                        int call_frames, cudaStream_t stream) {
  emit_output_kernel<<<dim3(blocks_for(max_frames), unsigned(channels)), kThreads, 0, stream>>>(
      out, filtered, filtered_old, chunk, partition, call_frames);
  TAPSTREAM_CUDA_CHECK_LAUNCH("emit_output_kernel");
}

void launch_fill_pointers(float2** pointers, const float2* base, long long stride, int count,
                          cudaStream_t stream) {
  fill_pointers_kernel<<<blocks_for(count), kThreads, 0, stream>>>(pointers, base, stride, count);
  TAPSTREAM_CUDA_CHECK_LAUNCH("fill_pointers_kernel");
}

}  // namespace tapstream::cuda

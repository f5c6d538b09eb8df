#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "kernels/device/overlap_save_windows.hpp"

namespace tapstream::cuda {
namespace {

constexpr unsigned kThreads = 256;

// Grids below: x over samples of a row, y over channels, z over segments.
dim3 grid_for(std::size_t row, std::size_t channels, std::size_t segments) {
  return dim3(unsigned((row + kThreads - 1) / kThreads), unsigned(channels),
              unsigned(std::min<std::size_t>(std::max<std::size_t>(segments, 1), 65535)));
}

__global__ void write_stage_kernel(float* stage, const float* in, std::size_t in_stride,
                                   std::size_t partition, std::size_t offset, std::size_t frames) {
  const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (i >= frames) return;
  const std::size_t c = blockIdx.y;
  stage[c * 2 * partition + partition + offset + i] = in[c * in_stride + i];
}

__global__ void advance_stage_kernel(float* stage, std::size_t partition) {
  const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (i >= partition) return;
  float* row = stage + blockIdx.y * 2 * partition;
  row[i] = row[partition + i];
  row[partition + i] = 0.0f;
}

__global__ void build_windows_kernel(float* windows, const float* in, std::size_t in_stride,
                                     const float* stage, std::size_t channels,
                                     std::size_t partition, std::size_t segments) {
  const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  const std::size_t window = 2 * partition;
  if (i >= window) return;
  const std::size_t c = blockIdx.y;
  for (std::size_t t = blockIdx.z; t < segments; t += gridDim.z) {
    // Window t starts one segment before segment t.
    const std::size_t position = t * partition + i;  // + partition, relative to segment -1
    const float value = position < partition ? stage[c * window + position]
                                             : in[c * in_stride + position - partition];
    windows[(t * channels + c) * window + i] = value;
  }
}

__global__ void keep_last_segment_kernel(float* stage, const float* in, std::size_t in_stride,
                                         std::size_t partition, std::size_t from) {
  const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (i >= partition) return;
  const std::size_t c = blockIdx.y;
  stage[c * 2 * partition + i] = in[c * in_stride + from + i];
}

__global__ void emit_kernel(EmitArgs a) {
  const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (i >= a.frames) return;
  const std::size_t c = blockIdx.y;
  const std::size_t window = 2 * a.partition;
  for (std::size_t t = blockIdx.z; t < a.segments; t += gridDim.z) {
    const std::size_t source = (t * a.channels + c) * window + a.partition + a.first + i;
    const std::size_t frame = t * a.partition + i;  // within this piece
    float value = a.filtered[source];
    if (a.filtered_old != nullptr) {
      const float w = float(a.call_offset + frame + 1) / float(a.call_frames);
      value = a.filtered_old[source] * (1.0f - w) + value * w;
    }
    a.out[c * a.out_stride + frame] = value;
  }
}

}  // namespace

void launch_write_stage(float* stage, const float* in, std::size_t in_stride, std::size_t channels,
                        std::size_t partition, std::size_t offset, std::size_t frames,
                        cudaStream_t stream) {
  write_stage_kernel<<<grid_for(frames, channels, 1), kThreads, 0, stream>>>(
      stage, in, in_stride, partition, offset, frames);
  TAPSTREAM_CUDA_CHECK_LAUNCH("write_stage_kernel");
}

void launch_advance_stage(float* stage, std::size_t channels, std::size_t partition,
                          cudaStream_t stream) {
  advance_stage_kernel<<<grid_for(partition, channels, 1), kThreads, 0, stream>>>(stage, partition);
  TAPSTREAM_CUDA_CHECK_LAUNCH("advance_stage_kernel");
}

void launch_build_windows(float* windows, const float* in, std::size_t in_stride,
                          const float* stage, std::size_t channels, std::size_t partition,
                          std::size_t segments, cudaStream_t stream) {
  build_windows_kernel<<<grid_for(2 * partition, channels, segments), kThreads, 0, stream>>>(
      windows, in, in_stride, stage, channels, partition, segments);
  TAPSTREAM_CUDA_CHECK_LAUNCH("build_windows_kernel");
}

void launch_keep_last_segment(float* stage, const float* in, std::size_t in_stride,
                              std::size_t channels, std::size_t partition, std::size_t segments,
                              cudaStream_t stream) {
  keep_last_segment_kernel<<<grid_for(partition, channels, 1), kThreads, 0, stream>>>(
      stage, in, in_stride, partition, (segments - 1) * partition);
  TAPSTREAM_CUDA_CHECK_LAUNCH("keep_last_segment_kernel");
}

void launch_emit(const EmitArgs& args, cudaStream_t stream) {
  emit_kernel<<<grid_for(args.frames, args.channels, args.segments), kThreads, 0, stream>>>(args);
  TAPSTREAM_CUDA_CHECK_LAUNCH("emit_kernel");
}

}  // namespace tapstream::cuda

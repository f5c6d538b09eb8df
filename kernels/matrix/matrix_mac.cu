#include "kernels/cuda_check.hpp"
#include "kernels/matrix/matrix_mac.hpp"

namespace tapstream::cuda {
namespace {

// Each thread accumulates this many outputs of one bin, so that an input
// spectrum value loaded once serves several outputs.
constexpr int kOutputsPerThread = 8;
constexpr int kThreads = 128;

__global__ void matrix_mac_kernel(MatrixMacArgs a) {
  const int tiles = (a.outputs + kOutputsPerThread - 1) / kOutputsPerThread;
  const long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (index >= (long long)tiles * a.bins) return;
  const int b = int(index % a.bins);  // consecutive threads, consecutive bins: coalesced
  const int o0 = int(index / a.bins) * kOutputsPerThread;
  const int group = blockIdx.y;
  const int per_group = (a.partitions + a.groups - 1) / a.groups;
  const int j_begin = group * per_group;
  const int j_end = min(a.partitions, j_begin + per_group);

  float2 acc[kOutputsPerThread];
  for (int k = 0; k < kOutputsPerThread; ++k) acc[k] = make_float2(0.0f, 0.0f);
  for (int j = j_begin; j < j_end; ++j) {
    const float2* x =
        j == 0 ? a.current
               : a.fdl + (long long)((a.slot - j + a.slots) % a.slots) * a.inputs * a.bins;
    const float2* h = a.spectra + (long long)j * a.inputs * a.outputs * a.bins;
    for (int i = 0; i < a.inputs; ++i) {
      const float2 xv = x[(long long)i * a.bins + b];
      const float2* hi = h + ((long long)i * a.outputs + o0) * a.bins + b;
#pragma unroll
      for (int k = 0; k < kOutputsPerThread; ++k) {
        if (o0 + k < a.outputs) {
          const float2 hv = hi[(long long)k * a.bins];
          acc[k].x += xv.x * hv.x - xv.y * hv.y;
          acc[k].y += xv.x * hv.y + xv.y * hv.x;
        }
      }
    }
  }
  float2* dst = a.partial + ((long long)group * a.outputs + o0) * a.bins + b;
  for (int k = 0; k < kOutputsPerThread; ++k) {
    if (o0 + k < a.outputs) dst[(long long)k * a.bins] = acc[k];
  }
}

__global__ void matrix_sum_groups_kernel(MatrixMacArgs a) {
  const long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const long long count = (long long)a.outputs * a.bins;
  if (index >= count) return;
  float2 sum = make_float2(0.0f, 0.0f);
  for (int g = 0; g < a.groups; ++g) {
    const float2 v = a.partial[g * count + index];
    sum.x += v.x;
    sum.y += v.y;
  }
  a.out[index] = sum;
}

}  // namespace

int matrix_mac_groups(int inputs, int outputs, int bins, int partitions) {
  // About 128 Ki threads in flight saturate an H100's memory system for
  // streaming reads; fewer groups where the shape alone provides them.
  (void)inputs;
  const long long tiles = (outputs + kOutputsPerThread - 1) / kOutputsPerThread;
  const long long per_group = tiles * bins;
  long long groups = (131072 + per_group - 1) / per_group;
  if (groups > partitions) groups = partitions;
  if (groups < 1) groups = 1;
  return int(groups);
}

void launch_matrix_mac(const MatrixMacArgs& a, cudaStream_t stream) {
  const long long tiles = (a.outputs + kOutputsPerThread - 1) / kOutputsPerThread;
  const dim3 grid(unsigned((tiles * a.bins + kThreads - 1) / kThreads), unsigned(a.groups));
  matrix_mac_kernel<<<grid, kThreads, 0, stream>>>(a);
  TAPSTREAM_CUDA_CHECK_LAUNCH("matrix_mac_kernel");
  const long long count = (long long)a.outputs * a.bins;
  matrix_sum_groups_kernel<<<unsigned((count + kThreads - 1) / kThreads), kThreads, 0, stream>>>(a);
  TAPSTREAM_CUDA_CHECK_LAUNCH("matrix_sum_groups_kernel");
}

}  // namespace tapstream::cuda

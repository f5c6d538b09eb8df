#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "kernels/device/matrix_mac.hpp"

namespace tapstream::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kOutputsPerTile = 64;  // 32 lanes, two outputs each

// Lanes across output pairs: the smallest power of two that covers the
// tile's pairs (so that 32 / lanes rows of a warp share its k steps).
int lanes_for(int outputs_padded) {
  const int pairs = std::min(outputs_padded / 2, kOutputsPerTile / 2);
  int lanes = 1;
  while (lanes < pairs) lanes *= 2;
  return lanes;
}

__device__ inline void cmac(float2& acc, float2 x, float hr, float hi) {
  acc.x = fmaf(x.x, hr, fmaf(-x.y, hi, acc.x));
  acc.y = fmaf(x.x, hi, fmaf(x.y, hr, acc.y));
}

// Delayed: each output of a thread's pair reads the window its path's
// whole-segment delay back (two loads of X a step instead of one shared one).
template <bool Delayed>
__global__ void __launch_bounds__(kThreads)
    matrix_mac_kernel(MatrixMacArgs a, int lanes, int log2_lanes) {
  __shared__ float4 rows_sum[kThreads];
  const MatrixMacShape s = a.shape;
  const int b = blockIdx.x, tile = blockIdx.y, split = blockIdx.z;
  const int lane = threadIdx.x & (lanes - 1), row = threadIdx.x >> log2_lanes;
  const int rows = kThreads >> log2_lanes;
  const int padded = s.outputs_padded();
  const int pair = tile * (kOutputsPerTile / 2) + lane;
  const bool active = 2 * pair < padded;
  const long long depth = s.depth();
  const long long per_split = (depth - a.k_first + a.splits - 1) / a.splits;
  const long long k_begin = a.k_first + split * per_split;
  const long long k_end = min(depth, k_begin + per_split);
  const long long per_slot = (long long)s.inputs * s.bins;
  // [k][bins], this bin: x[k * bins] is X_{s-j} for k = (partitions-1-j) * inputs + i.
  const float2* x = a.fdl + (a.chunk->slot + 1 + a.slots - s.partitions) * per_slot + b;
  const float4* h = reinterpret_cast<const float4*>(a.spectra + (long long)b * depth * padded) +
                    (active ? pair : 0);
  const long long h_step = padded / 2;  // float4s per k

  float2 acc0 = make_float2(0.0f, 0.0f), acc1 = make_float2(0.0f, 0.0f);
  if (active) {
    if constexpr (Delayed) {
      // The pair's two delays per input, as one 8-byte load; i = k mod inputs,
      // stepped without a division.
      const int2* q = reinterpret_cast<const int2*>(a.delays) + pair;
      const int q_step = padded / 2;
      int i = int((k_begin + row) % s.inputs);
      const int i_step = rows % s.inputs;
#pragma unroll 4
      for (long long k = k_begin + row; k < k_end; k += rows) {
        const int2 d = __ldg(q + i * q_step);
        const float2 x0 = x[k * s.bins - d.x * per_slot];
        const float2 x1 = x[k * s.bins - d.y * per_slot];
        const float4 hv = __ldcs(h + k * h_step);  // streamed once: do not keep in L2
        cmac(acc0, x0, hv.x, hv.y);
        cmac(acc1, x1, hv.z, hv.w);
        i += i_step;
        if (i >= s.inputs) i -= s.inputs;
      }
    } else {
#pragma unroll 4
      for (long long k = k_begin + row; k < k_end; k += rows) {
        const float2 xv = x[k * s.bins];
        const float4 hv = __ldcs(h + k * h_step);  // streamed once: do not keep in L2
        cmac(acc0, xv, hv.x, hv.y);
        cmac(acc1, xv, hv.z, hv.w);
      }
    }
  }
  rows_sum[threadIdx.x] = make_float4(acc0.x, acc0.y, acc1.x, acc1.y);
  __syncthreads();
  for (int half = rows / 2; half > 0; half /= 2) {
    if (row < half) {
      const float4 o = rows_sum[threadIdx.x + half * lanes];
      float4& m = rows_sum[threadIdx.x];
      m.x += o.x;
      m.y += o.y;
      m.z += o.z;
      m.w += o.w;
    }
    __syncthreads();
  }
  if (row != 0 || !active) return;
  const float4 sum = rows_sum[threadIdx.x];
  float2* dst = a.splits > 1 ? a.partial + (long long)split * s.outputs * s.bins : a.out;
  const int o = 2 * pair;
  dst[(long long)o * s.bins + b] = make_float2(sum.x, sum.y);
  if (o + 1 < s.outputs) dst[(long long)(o + 1) * s.bins + b] = make_float2(sum.z, sum.w);
}

__global__ void matrix_sum_splits_kernel(const float2* partial, float2* out, long long count,
                                         int splits) {
  const long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (index >= count) return;
  float2 sum = make_float2(0.0f, 0.0f);
  for (int g = 0; g < splits; ++g) {
    const float2 v = partial[g * count + index];
    sum.x += v.x;
    sum.y += v.y;
  }
  out[index] = sum;
}

__global__ void pack_spectra_kernel(const float2* src, float2* dst, MatrixMacShape s, int j) {
  const long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const long long count = (long long)s.inputs * s.outputs * s.bins;
  if (index >= count) return;
  const int b = int(index % s.bins);
  const long long io = index / s.bins;
  const int o = int(io % s.outputs), i = int(io / s.outputs);
  const long long k = (long long)(s.partitions - 1 - j) * s.inputs + i;
  dst[((long long)b * s.depth() + k) * s.outputs_padded() + o] = src[index];
}

}  // namespace

int matrix_mac_splits(const MatrixMacShape& s) {
  // About two waves of 256-thread blocks on a 132-SM H100 (8 blocks an SM);
  // no split so thin that its rows make fewer than 4 steps each.
  const int lanes = lanes_for(s.outputs_padded());
  const long long rows = kThreads / lanes;
  const long long tiles = (s.outputs_padded() + kOutputsPerTile - 1) / kOutputsPerTile;
  const long long blocks = tiles * s.bins;
  long long splits = (2 * 132 * 8 + blocks - 1) / blocks;
  splits = std::min(splits, std::max(1LL, s.depth() / (4 * rows)));
  return int(std::clamp(splits, 1LL, 65535LL));
}

void launch_matrix_mac(const MatrixMacArgs& a, cudaStream_t stream) {
  const MatrixMacShape& s = a.shape;
  const int lanes = lanes_for(s.outputs_padded());
  int log2_lanes = 0;
  while ((1 << log2_lanes) < lanes) ++log2_lanes;
  const unsigned tiles = unsigned((s.outputs_padded() + kOutputsPerTile - 1) / kOutputsPerTile);
  const dim3 grid(unsigned(s.bins), tiles, unsigned(a.splits));
  if (a.delays != nullptr)
    matrix_mac_kernel<true><<<grid, kThreads, 0, stream>>>(a, lanes, log2_lanes);
  else
    matrix_mac_kernel<false><<<grid, kThreads, 0, stream>>>(a, lanes, log2_lanes);
  TAPSTREAM_CUDA_CHECK_LAUNCH("matrix_mac_kernel");
  if (a.splits > 1) {
    const long long count = (long long)s.outputs * s.bins;
    matrix_sum_splits_kernel<<<unsigned((count + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        a.partial, a.out, count, a.splits);
    TAPSTREAM_CUDA_CHECK_LAUNCH("matrix_sum_splits_kernel");
  }
}

void launch_pack_spectra(const float2* partition_spectra, float2* spectra,
                         const MatrixMacShape& shape, int j, cudaStream_t stream) {
  const long long count = (long long)shape.inputs * shape.outputs * shape.bins;
  pack_spectra_kernel<<<unsigned((count + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      partition_spectra, spectra, shape, j);
  TAPSTREAM_CUDA_CHECK_LAUNCH("pack_spectra_kernel");
}

}  // namespace tapstream::cuda

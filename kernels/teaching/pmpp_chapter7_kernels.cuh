#pragma once
// The teaching variants of the direct form (Kirk & Hwu, Programming Massively
// Parallel Processors, chapter 7: convolution): one thread per output with
// taps from global memory (naive) or from __constant__ memory (constant), an
// input tile plus its halo staged in shared memory (shared_tile), and a tile
// in shared memory with the halo read through the read-only cache
// (cached_tile). Selected by EngineOptions::kernel (kernels/device/
// direct_kernels.hpp, DirectKernel), benchmarked beside the tuned kernel and
// held to the same exactness tests (tests/cuda_engine_test.cpp).
//
// Compiled into kernels/device/direct_kernels.cu (which includes this file
// once), since the constant variant reads that translation unit's
// __constant__ banks (kernels/device/direct_primitives.cuh).

#include <cuda_runtime.h>

#include "kernels/cuda_check.hpp"
#include "kernels/device/direct_kernels.hpp"
#include "kernels/device/direct_primitives.cuh"

namespace tapstream::cuda {
namespace {

// naive and constant: one thread per output.
template <bool kConstant>
__global__ void __launch_bounds__(kThreads) simple_kernel(DirectArgs a) {
  const long long f = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const int c = blockIdx.y;
  if (f >= a.frames) return;
  const ChannelPointers p = channel_pointers(a, c);
  float total = 0.0f;
  for (int k0 = 0; k0 < a.taps; k0 += kAccumulationChunk) {
    const int k1 = min(a.taps, k0 + kAccumulationChunk);
    float acc = 0.0f;
    for (int k = k0; k < k1; ++k)
      acc = fmaf(load_tap<kConstant>(a, p.taps + k), load_x(a, p.in, p.history, f - k), acc);
    total += acc;
  }
  store_y(a, c, f, total);
}

// shared_tile: a block computes kThreads consecutive outputs; for each chunk of
// kThreads taps it stages the window of kThreads + chunk - 1 samples those outputs
// need (tile plus halo) in shared memory.
template <bool kConstant>
__global__ void __launch_bounds__(kThreads) shared_tile_kernel(DirectArgs a) {
  constexpr int K = kThreads;
  __shared__ float window[kThreads + K];
  const int t = threadIdx.x;
  const int c = blockIdx.y;
  const long long n0 = (long long)blockIdx.x * kThreads;
  const ChannelPointers p = channel_pointers(a, c);
  float total = 0.0f;
  for (int k0 = 0; k0 < a.taps; k0 += K) {
    const int kc = min(K, a.taps - k0);
    // window[i] = x(n0 - k0 - (K - 1) + i)
    const long long j0 = n0 - k0 - (K - 1);
    __syncthreads();
    for (int i = t; i < kThreads + K - 1; i += kThreads)
      window[i] = load_x(a, p.in, p.history, j0 + i);
    __syncthreads();
    float acc = 0.0f;
    for (int kk = 0; kk < kc; ++kk)
      acc = fmaf(load_tap<kConstant>(a, p.taps + k0 + kk), window[t - kk + K - 1], acc);
    total += acc;
  }
  if (n0 + t < a.frames) store_y(a, c, n0 + t, total);
}

// cached_tile: only the block's own input tile is staged; samples before it (the
// halo) are read through the read-only data cache.
template <bool kConstant>
__global__ void __launch_bounds__(kThreads) cached_tile_kernel(DirectArgs a) {
  __shared__ float tile[kThreads];
  const int t = threadIdx.x;
  const int c = blockIdx.y;
  const long long n0 = (long long)blockIdx.x * kThreads;
  const ChannelPointers p = channel_pointers(a, c);
  tile[t] = load_x(a, p.in, p.history, n0 + t);
  __syncthreads();
  float total = 0.0f;
  for (int k0 = 0; k0 < a.taps; k0 += kAccumulationChunk) {
    const int k1 = min(a.taps, k0 + kAccumulationChunk);
    float acc = 0.0f;
    for (int k = k0; k < k1; ++k) {
      const int i = t - k;
      float x;
      if (i >= 0) {
        x = tile[i];
      } else {
        const long long j = n0 + i;
        if (j >= 0)
          x = __ldg(p.in + j * a.in.frame_stride);
        else
          x = j >= -a.history_len ? __ldg(p.history + j) : 0.0f;
      }
      acc = fmaf(load_tap<kConstant>(a, p.taps + k), x, acc);
    }
    total += acc;
  }
  if (n0 + t < a.frames) store_y(a, c, n0 + t, total);
}

// Launches a teaching variant (taps from the constant bank when kConstant);
// DirectKernel::tuned is launched by launch_tuned in direct_kernels.cu.
template <bool kConstant>
void launch_with_taps(DirectKernel kernel, const DirectArgs& a, cudaStream_t stream) {
  const dim3 grid(blocks_for(a.frames, kThreads), a.channels);
  switch (kernel) {
    case DirectKernel::naive:
    case DirectKernel::constant:
      simple_kernel<kConstant><<<grid, kThreads, 0, stream>>>(a);
      TAPSTREAM_CUDA_CHECK_LAUNCH("simple_kernel");
      break;
    case DirectKernel::shared_tile:
      shared_tile_kernel<kConstant><<<grid, kThreads, 0, stream>>>(a);
      TAPSTREAM_CUDA_CHECK_LAUNCH("shared_tile_kernel");
      break;
    case DirectKernel::cached_tile:
      cached_tile_kernel<kConstant><<<grid, kThreads, 0, stream>>>(a);
      TAPSTREAM_CUDA_CHECK_LAUNCH("cached_tile_kernel");
      break;
    case DirectKernel::tuned:
      break;  // launch_tuned
  }
}

}  // namespace
}  // namespace tapstream::cuda

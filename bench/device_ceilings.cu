#include "bench/device_ceilings.hpp"
#include "kernels/cuda_check.hpp"

namespace tapstream::bench {
namespace {

__global__ void fma_loop(float* out, int iterations, float a, float b) {
  float acc[fma_chains];
#pragma unroll
  for (int k = 0; k < fma_chains; ++k) acc[k] = threadIdx.x * 1e-3f + k;
#pragma unroll 8
  for (int i = 0; i < iterations; ++i) {
#pragma unroll
    for (int k = 0; k < fma_chains; ++k) acc[k] = fmaf(acc[k], a, b);
  }
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < fma_chains; ++k) sum += acc[k];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

}  // namespace

void launch_fma_loop(float* out, int blocks, int threads, int iterations, cudaStream_t stream) {
  fma_loop<<<blocks, threads, 0, stream>>>(out, iterations, 0.999999f, 1e-7f);
  TAPSTREAM_CUDA_CHECK_LAUNCH("fma_loop");
}

}  // namespace tapstream::bench

#pragma once
// Device-side building blocks of the direct-form kernels, shared by the
// production kernels (kernels/device/direct_kernels.cu) and the teaching
// variants (kernels/teaching/): the __constant__ tap banks, sample and tap
// loads, the output store (with the crossfade blend) and a channel's pointers.
//
// Included by kernels/device/direct_kernels.cu only: the __constant__ banks
// below belong to that one translation unit (the code is compiled without
// relocatable device code), so that upload_constant_bank() and every kernel
// reading them see the same banks.

#include <cuda_runtime.h>

#include "kernels/device/direct_kernels.hpp"

namespace tapstream::cuda {
namespace {

__constant__ float c_taps[2][kConstantBankFloats];

constexpr int kAccumulationChunk = 256;
constexpr int kThreads = 256;
constexpr int kOutputsPerThread = 8;  // tuned kernel's coarsening factor

// Input sample (c, j) of the block, from the history for j < 0; zero before the
// history starts (only reached by zero-padded taps).
__device__ __forceinline__ float load_x(const DirectArgs& a, const float* in_c,
                                        const float* history_c, long long j) {
  if (j >= 0) return j < a.frames ? in_c[j * a.in.frame_stride] : 0.0f;
  if (j >= -a.history_len) return history_c[j];
  return 0.0f;
}

template <bool kConstant>
__device__ __forceinline__ float load_tap(const DirectArgs& a, long long index) {
  if constexpr (kConstant) {
    return c_taps[a.constant_bank][index];
  } else {
    return __ldg(a.global_taps + index);
  }
}

__device__ __forceinline__ void store_y(const DirectArgs& a, int c, long long f, float y) {
  float* p = a.out + c * a.out_channel_stride + f * a.out_frame_stride;
  if (a.blend) {
    const float w = float(double(a.blend_offset + f + 1) / double(a.blend_frames));
    *p = *p * (1.0f - w) + y * w;
  } else {
    *p = y;
  }
}

struct ChannelPointers {
  const float* in;
  const float* history;
  long long taps;
};

__device__ __forceinline__ ChannelPointers channel_pointers(const DirectArgs& a, int c) {
  return {a.in.data + c * a.in.channel_stride,
          a.history ? a.history + c * a.history_stride + a.history_end : nullptr,
          c * a.taps_channel_stride};
}

// Blocks of `per_block` for n items.
unsigned blocks_for(long long n, int per_block) {
  return unsigned((n + per_block - 1) / per_block);
}

}  // namespace
}  // namespace tapstream::cuda

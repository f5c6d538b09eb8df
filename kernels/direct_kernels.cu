// Direct-form FIR kernels (see direct_kernels.hpp). Accumulation is blocked: each
// chunk of at most kAccumulationChunk taps is summed into a fresh partial that is
// then added to the total, which keeps float32 rounding of 131072-tap filters well
// inside the 1e-5 relative error bound.

#include <cstdint>
#include <stdexcept>

#include "kernels/cuda_check.hpp"
#include "kernels/direct_kernels.hpp"

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

// tuned: the block's kThreads threads form G = kThreads / P groups of P threads.
// All groups work on the same T = P * 8 consecutive outputs of one channel, each
// on its own chunks of K taps (tap split, so that short blocks still spread over
// many threads); the partial sums are added in shared memory at the end. Within a
// group each thread keeps 8 consecutive outputs in registers and slides a register
// window over the shared-memory samples, two float4 loads per 8 taps (64 FMAs).
template <bool kConstant>
__global__ void __launch_bounds__(kThreads) tuned_kernel(DirectArgs a, int P, int K) {
  extern __shared__ float4 shared_storage[];
  float* shared = reinterpret_cast<float*>(shared_storage);
  const int G = kThreads / P;
  const int T = P * kOutputsPerThread;
  const int W = T + K;  // window: w[i] = x(n0 - k0 - K + i)
  const int g = threadIdx.x / P;
  const int t = threadIdx.x % P;
  const int c = blockIdx.y;
  const long long n0 = (long long)blockIdx.x * T;
  float* w = shared + g * W;
  const ChannelPointers p = channel_pointers(a, c);
  const bool vector_in =
      a.in.frame_stride == 1 && (reinterpret_cast<std::uintptr_t>(p.in) & 15) == 0;
  const bool vector_history =
      p.history != nullptr && (reinterpret_cast<std::uintptr_t>(p.history) & 15) == 0;
  const int chunks = (a.taps_padded + K - 1) / K;

  float total[kOutputsPerThread];
#pragma unroll
  for (int r = 0; r < kOutputsPerThread; ++r) total[r] = 0.0f;

  for (int round = 0; round < chunks; round += G) {
    const int chunk = round + g;
    const bool active = chunk < chunks;
    const int k0 = chunk * K;
    if (round > 0) __syncthreads();  // everyone is done reading the previous windows
    if (active) {
      const long long j0 = n0 - k0 - K;  // a multiple of 4: quads never straddle j = 0
      for (int q = t; q < W / 4; q += P) {
        const long long j = j0 + 4 * q;
        float4 v;
        if (vector_in && j >= 0 && j + 4 <= a.frames) {
          v = *reinterpret_cast<const float4*>(p.in + j);
        } else if (vector_history && j + 4 <= 0 && j >= -a.history_len) {
          v = *reinterpret_cast<const float4*>(p.history + j);
        } else {
          v.x = load_x(a, p.in, p.history, j);
          v.y = load_x(a, p.in, p.history, j + 1);
          v.z = load_x(a, p.in, p.history, j + 2);
          v.w = load_x(a, p.in, p.history, j + 3);
        }
        reinterpret_cast<float4*>(w)[q] = v;
      }
    }
    __syncthreads();
    if (active) {
      const int kc = min(K, a.taps_padded - k0);
      const int base = t * kOutputsPerThread;
      float acc[kOutputsPerThread];
      float lo[8], hi[8];
#pragma unroll
      for (int r = 0; r < kOutputsPerThread; ++r) acc[r] = 0.0f;
      {
        const float4* src = reinterpret_cast<const float4*>(w + base + K);
        const float4 h0 = src[0], h1 = src[1];
        hi[0] = h0.x, hi[1] = h0.y, hi[2] = h0.z, hi[3] = h0.w;
        hi[4] = h1.x, hi[5] = h1.y, hi[6] = h1.z, hi[7] = h1.w;
      }
      const long long tap_base = p.taps + k0;
      for (int kk = 0; kk < kc; kk += 8) {
        // lo = w[base + K - kk - 8, +8), hi = w[base + K - kk, +8): output base + r
        // with tap k0 + kk + u needs w[base + K - kk + r - u].
        const float4* src = reinterpret_cast<const float4*>(w + base + K - kk - 8);
        const float4 l0 = src[0], l1 = src[1];
        lo[0] = l0.x, lo[1] = l0.y, lo[2] = l0.z, lo[3] = l0.w;
        lo[4] = l1.x, lo[5] = l1.y, lo[6] = l1.z, lo[7] = l1.w;
        float h[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) h[u] = load_tap<kConstant>(a, tap_base + kk + u);
#pragma unroll
        for (int u = 0; u < 8; ++u) {
#pragma unroll
          for (int r = 0; r < kOutputsPerThread; ++r) {
            const int idx = 8 + r - u;
            acc[r] = fmaf(h[u], idx >= 8 ? hi[idx - 8] : lo[idx], acc[r]);
          }
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) hi[i] = lo[i];
      }
#pragma unroll
      for (int r = 0; r < kOutputsPerThread; ++r) total[r] += acc[r];
    }
  }

  // Add the groups' partial sums (in a fixed order: deterministic) and store.
  __syncthreads();
  float* partial = shared;  // G * T floats, fits in the G * W of the windows
  {
    float4* dst = reinterpret_cast<float4*>(partial + g * T + t * kOutputsPerThread);
    dst[0] = make_float4(total[0], total[1], total[2], total[3]);
    dst[1] = make_float4(total[4], total[5], total[6], total[7]);
  }
  __syncthreads();
  for (int o = threadIdx.x; o < T; o += kThreads) {
    const long long f = n0 + o;
    if (f >= a.frames) break;
    float y = 0.0f;
    for (int gg = 0; gg < G; ++gg) y += partial[gg * T + o];
    store_y(a, c, f, y);
  }
}

// History carry-over: new_history(c, p) = x(frames + p) for -history_len <= p < 0.
__global__ void carry_history_kernel(SampleView in, const float* old_history, float* new_history,
                                     long long history_stride, int history_end, int history_len,
                                     int frames) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int c = blockIdx.y;
  if (i >= history_len) return;
  const long long p = (long long)i - history_len;  // -history_len .. -1
  const long long j = frames + p;
  const float x = j >= 0 ? in.data[c * in.channel_stride + j * in.frame_stride]
                         : old_history[c * history_stride + history_end + j];
  new_history[c * history_stride + history_end + p] = x;
}

__global__ void copy_samples_kernel(SampleView src, float* dst, long long dst_channel_stride,
                                    long long dst_frame_stride, int frames) {
  const long long f = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const int c = blockIdx.y;
  if (f >= frames) return;
  dst[c * dst_channel_stride + f * dst_frame_stride] =
      src.data[c * src.channel_stride + f * src.frame_stride];
}

unsigned blocks_for(long long n, int per_block) {
  return unsigned((n + per_block - 1) / per_block);
}

// Picks P (threads per group) for the tuned kernel: the widest groups that still
// give every multiprocessor two blocks; for short blocks, narrower groups so that
// the tap split keeps more threads busy.
void tuned_shape(const DirectArgs& a, int* P_out, int* K_out) {
  const int K = a.taps_padded < 256 ? a.taps_padded : 256;
  const long long chunks = (a.taps_padded + K - 1) / K;
  const long long target = 2LL * a.multiprocessors;
  int best_P = kThreads;
  long long best_work = -1;
  for (int P = kThreads; P >= 8; P /= 2) {
    const long long T = (long long)P * kOutputsPerThread;
    const long long blocks = (long long)a.channels * ((a.frames + T - 1) / T);
    if (blocks >= target) {
      best_P = P;
      break;
    }
    const long long G = kThreads / P;
    const long long work = blocks * (G < chunks ? G : chunks);
    if (work > best_work) best_work = work, best_P = P;
  }
  *P_out = best_P;
  *K_out = K;
}

template <bool kConstant>
void launch_with_taps(DirectKernel kernel, const DirectArgs& a, cudaStream_t stream) {
  switch (kernel) {
    case DirectKernel::naive:
    case DirectKernel::constant:
      simple_kernel<kConstant>
          <<<dim3(blocks_for(a.frames, kThreads), a.channels), kThreads, 0, stream>>>(a);
      TAPSTREAM_CUDA_CHECK_LAUNCH("simple_kernel");
      return;
    case DirectKernel::shared_tile:
      shared_tile_kernel<kConstant>
          <<<dim3(blocks_for(a.frames, kThreads), a.channels), kThreads, 0, stream>>>(a);
      TAPSTREAM_CUDA_CHECK_LAUNCH("shared_tile_kernel");
      return;
    case DirectKernel::cached_tile:
      cached_tile_kernel<kConstant>
          <<<dim3(blocks_for(a.frames, kThreads), a.channels), kThreads, 0, stream>>>(a);
      TAPSTREAM_CUDA_CHECK_LAUNCH("cached_tile_kernel");
      return;
    case DirectKernel::tuned: {
      int P = 0, K = 0;
      tuned_shape(a, &P, &K);
      const int T = P * kOutputsPerThread;
      const std::size_t shared_bytes = std::size_t(kThreads / P) * (T + K) * sizeof(float);
      tuned_kernel<kConstant>
          <<<dim3(blocks_for(a.frames, T), a.channels), kThreads, shared_bytes, stream>>>(a, P, K);
      TAPSTREAM_CUDA_CHECK_LAUNCH("tuned_kernel");
      return;
    }
  }
}

}  // namespace

DirectKernel parse_direct_kernel(const std::string& name) {
  if (name == "auto" || name == "tuned") return DirectKernel::tuned;
  if (name == "naive") return DirectKernel::naive;
  if (name == "constant") return DirectKernel::constant;
  if (name == "shared_tile") return DirectKernel::shared_tile;
  if (name == "cached_tile") return DirectKernel::cached_tile;
  throw std::invalid_argument(
      "unknown CUDA kernel variant '" + name +
      "' (expected auto, naive, constant, shared_tile, cached_tile or tuned)");
}

const char* direct_kernel_name(DirectKernel kernel) {
  switch (kernel) {
    case DirectKernel::naive:
      return "naive";
    case DirectKernel::constant:
      return "constant";
    case DirectKernel::shared_tile:
      return "shared_tile";
    case DirectKernel::cached_tile:
      return "cached_tile";
    case DirectKernel::tuned:
      return "tuned";
  }
  return "?";
}

std::vector<std::string> direct_kernel_names() {
  return {"auto", "naive", "constant", "shared_tile", "cached_tile", "tuned"};
}

void launch_direct(DirectKernel kernel, const DirectArgs& args, cudaStream_t stream) {
  if (args.frames <= 0 || args.channels <= 0) return;
  // naive always reads its taps from global memory; the others use the constant
  // bank when the taps are there.
  if (kernel != DirectKernel::naive && args.constant_bank >= 0)
    launch_with_taps<true>(kernel, args, stream);
  else
    launch_with_taps<false>(kernel, args, stream);
}

void launch_carry_history(const SampleView& in, const float* old_history, float* new_history,
                          long long history_stride, int history_end, int history_len, int channels,
                          int frames, cudaStream_t stream) {
  if (history_len <= 0 || channels <= 0) return;
  carry_history_kernel<<<dim3(blocks_for(history_len, kThreads), channels), kThreads, 0, stream>>>(
      in, old_history, new_history, history_stride, history_end, history_len, frames);
  TAPSTREAM_CUDA_CHECK_LAUNCH("carry_history_kernel");
}

void launch_copy_samples(const SampleView& src, float* dst, long long dst_channel_stride,
                         long long dst_frame_stride, int channels, int frames,
                         cudaStream_t stream) {
  if (frames <= 0 || channels <= 0) return;
  copy_samples_kernel<<<dim3(blocks_for(frames, kThreads), channels), kThreads, 0, stream>>>(
      src, dst, dst_channel_stride, dst_frame_stride, frames);
  TAPSTREAM_CUDA_CHECK_LAUNCH("copy_samples_kernel");
}

void upload_constant_bank(int bank, const float* host_taps, std::size_t count,
                          cudaStream_t stream) {
  if (bank < 0 || bank > 1 || count > kConstantBankFloats)
    throw std::invalid_argument("upload_constant_bank: bank " + std::to_string(bank) + ", " +
                                std::to_string(count) + " floats do not fit");
  TAPSTREAM_CUDA_CHECK(cudaMemcpyToSymbolAsync(c_taps, host_taps, count * sizeof(float),
                                               bank * kConstantBankFloats * sizeof(float),
                                               cudaMemcpyHostToDevice, stream));
}

}  // namespace tapstream::cuda

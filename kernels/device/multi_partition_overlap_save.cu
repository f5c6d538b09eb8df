// The three kernels of multi_partition_overlap_save.hpp.

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda_check.hpp"
#include "kernels/device/multi_partition_overlap_save.hpp"
#include "kernels/device/shared_memory_fft.cuh"

namespace tapstream::cuda {
namespace {

using namespace shared_fft;

// Thread block of the MAC: 128 bins of one channel, so that a block's
// registers (about 100 a thread at K = 16) leave room for several per SM.
constexpr int kMacThreads = 128;
// Outputs per MAC step: their U spectra are loaded together (U loads in
// flight per thread) before the K U multiply-adds.
constexpr int kMacUnroll = 4;

// Spectrum X of the window [previous | segment] of (segment blockIdx.x, channel blockIdx.y).
template <int M, int T>
__global__ void __launch_bounds__(T) forward_spectrum_kernel(MultiPartitionArgs a) {
  extern __shared__ float2 s[];
  constexpr int P = M;
  const std::size_t c = blockIdx.y;
  const std::size_t t = blockIdx.x;
  load_window<P, T>(s, a.in + c * a.in_stride, a.history + c * a.history_stride, t);
  fft_in_shared<M, T>(s);

  float2* x = a.spectra + (t * a.channels + c) * (P + 1);
  for (int k = int(threadIdx.x); k <= M / 2; k += T) {
    if (k == 0) {
      float x0, xp;
      split_dc(s[0], x0, xp);
      x[0] = make_float2(x0, 0.0f);
      x[M] = make_float2(xp, 0.0f);
      continue;
    }
    const int kk = M - k;
    float2 xk, xkk;
    split_pair(split_twiddle<M>(k), s[padded(k)], s[padded(kk)], xk, xkk);
    x[k] = xk;
    x[kk] = xkk;
  }
}

// Outputs of (segment blockIdx.x, channel blockIdx.y) from the product spectrum Y.
template <int M, int T>
__global__ void __launch_bounds__(T) inverse_spectrum_kernel(MultiPartitionArgs a) {
  extern __shared__ float2 s[];
  constexpr int P = M;
  const std::size_t c = blockIdx.y;
  const std::size_t t = blockIdx.x;
  const float2* y = a.products + (t * a.channels + c) * (P + 1);
  for (int k = int(threadIdx.x); k <= M / 2; k += T) {
    if (k == 0) {
      s[0] = fold_dc(y[0].x, y[M].x);
      continue;
    }
    const int kk = M - k;
    float2 zk, zkk;
    fold_pair(split_twiddle<M>(k), y[k], y[kk], zk, zkk);
    s[padded(k)] = zk;
    s[padded(kk)] = zkk;
  }
  __syncthreads();
  fft_in_shared<M, T>(s);
  store_valid_outputs<P, T>(s, a.out + c * a.out_stride + t * P);
}

__device__ __forceinline__ void complex_mac(float2& acc, float2 x, float2 h) {
  acc.x = fmaf(x.x, h.x, fmaf(-x.y, h.y, acc.x));
  acc.y = fmaf(x.x, h.y, fmaf(x.y, h.x, acc.y));
}

// X of run segment t (negative: before the run, from the ring; before the
// stream: zero) at bin `within` of the [channels][bins] plane.
__device__ __forceinline__ float2 spectrum(const MultiPartitionArgs& a, std::int64_t t,
                                           std::size_t within, std::size_t per_segment) {
  if (t >= 0) return a.spectra[std::size_t(t) * per_segment + within];
  const std::int64_t n = a.first_segment + t;
  if (n < 0) return make_float2(0.0f, 0.0f);
  return a.ring[(std::size_t(n) % a.ring_slots) * per_segment + within];
}

// One thread per (bin, channel blockIdx.y, chunk blockIdx.z of `chunk`
// segments). x[i] holds X of segment t - (K - 1) + i, where t is the first
// segment of the current step: x[K - 1 + u] is step output u's newest spectrum.
template <int K>
__global__ void __launch_bounds__(kMacThreads)
    sliding_mac_kernel(MultiPartitionArgs a, std::size_t chunk) {
  constexpr int U = kMacUnroll;
  const std::size_t bins = a.partition + 1;
  const std::size_t bin = blockIdx.x * std::size_t(kMacThreads) + threadIdx.x;
  if (bin >= bins) return;
  const std::size_t c = blockIdx.y;
  const std::size_t per_segment = a.channels * bins;
  const std::size_t within = c * bins + bin;
  const std::int64_t first = std::int64_t(blockIdx.z * chunk);
  const std::int64_t end = std::min<std::int64_t>(first + std::int64_t(chunk), a.segments);

  float2 h[K];
  const float2* filter = a.filter + c * a.filter_channel_stride + bin;
#pragma unroll
  for (int j = 0; j < K; ++j) h[j] = __ldg(filter + j * a.filter_partition_stride);

  float2 x[K - 1 + U];
#pragma unroll
  for (int i = 0; i < K - 1; ++i) x[i] = spectrum(a, first - (K - 1) + i, within, per_segment);

  for (std::int64_t t = first; t < end; t += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      x[K - 1 + u] = t + u < end ? a.spectra[std::size_t(t + u) * per_segment + within]
                                 : make_float2(0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (t + u >= end) break;
      float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll
      for (int j = 0; j < K; ++j) complex_mac(acc, x[K - 1 + u - j], h[j]);
      a.products[std::size_t(t + u) * per_segment + within] = acc;
      if (std::size_t(t + u) >= a.store_from) {
        const std::size_t slot = std::size_t(a.first_segment + t + u) % a.ring_slots;
        a.ring[slot * per_segment + within] = x[K - 1 + u];
      }
    }
#pragma unroll
    for (int i = 0; i < K - 1; ++i) x[i] = x[i + U];
  }
}

// The MAC's partition counts, as template arguments: every K up to 16, and 32
// (131072 taps in partitions of 4096).
constexpr int kMaxPartitions = 32;
constexpr int next_partitions(int k) {
  return k < 16 ? k + 1 : k == 16 ? 32 : kMaxPartitions + 1;
}

template <int K = 2, class Body>
bool for_partitions(std::size_t partitions, Body&& body) {
  if constexpr (K <= kMaxPartitions) {
    if (partitions == std::size_t(K)) {
      body(std::integral_constant<int, K>{});
      return true;
    }
    return for_partitions<next_partitions(K)>(partitions, body);
  } else {
    return false;
  }
}

// Segments per MAC thread: enough threads for two waves of the device (so
// that every SM has loads in flight), but chunks of at least 4 (K - 1)
// segments, so that the warm-up (K - 1 spectra read again) adds at most a
// quarter to the reads of X.
std::size_t mac_chunk(const MultiPartitionArgs& a) {
  const std::size_t threads_per_chunk = a.channels * (a.partition + 1);
  const std::size_t wanted = std::size_t(std::max(1, a.multiprocessors)) * 2048 * 2;
  const std::size_t chunks_for_threads = (wanted + threads_per_chunk - 1) / threads_per_chunk;
  const std::size_t chunks_for_warm_up =
      std::max<std::size_t>(1, a.segments / (4 * (a.partitions - 1)));
  const std::size_t chunks =
      std::clamp<std::size_t>(std::min(chunks_for_threads, chunks_for_warm_up), 1,
                              std::min<std::size_t>(a.segments, 65535));
  return (a.segments + chunks - 1) / chunks;
}

}  // namespace

bool multi_partition_overlap_save_supports(std::size_t partition, std::size_t partitions) {
  return shared_fft::supports(partition) && for_partitions(partitions, [](auto) {});
}

void prepare_multi_partition_overlap_save(std::size_t partition) {
  for_partition(partition, [](auto size) {
    constexpr int M = decltype(size)::value;
    constexpr int T = threads_for<M>();
    TAPSTREAM_CUDA_CHECK(cudaFuncSetAttribute(forward_spectrum_kernel<M, T>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              int(shared_bytes_for<M>())));
    TAPSTREAM_CUDA_CHECK(cudaFuncSetAttribute(inverse_spectrum_kernel<M, T>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              int(shared_bytes_for<M>())));
  });
}

void launch_multi_partition_overlap_save(const MultiPartitionArgs& args, cudaStream_t stream) {
  if (args.segments == 0 || args.channels == 0) return;
  const dim3 transforms(unsigned(args.segments), unsigned(args.channels));
  for_partition(args.partition, [&](auto size) {
    constexpr int M = decltype(size)::value;
    constexpr int T = threads_for<M>();
    forward_spectrum_kernel<M, T><<<transforms, T, shared_bytes_for<M>(), stream>>>(args);
    TAPSTREAM_CUDA_CHECK_LAUNCH("forward_spectrum_kernel");
  });

  const std::size_t chunk = mac_chunk(args);
  const dim3 mac_grid(unsigned((args.partition + 1 + kMacThreads - 1) / kMacThreads),
                      unsigned(args.channels), unsigned((args.segments + chunk - 1) / chunk));
  const bool launched = for_partitions(args.partitions, [&](auto count) {
    constexpr int K = decltype(count)::value;
    sliding_mac_kernel<K><<<mac_grid, kMacThreads, 0, stream>>>(args, chunk);
    TAPSTREAM_CUDA_CHECK_LAUNCH("sliding_mac_kernel");
  });
  if (!launched)
    throw std::invalid_argument("multi-partition overlap-save: " + std::to_string(args.partitions) +
                                " partitions not supported");

  for_partition(args.partition, [&](auto size) {
    constexpr int M = decltype(size)::value;
    constexpr int T = threads_for<M>();
    inverse_spectrum_kernel<M, T><<<transforms, T, shared_bytes_for<M>(), stream>>>(args);
    TAPSTREAM_CUDA_CHECK_LAUNCH("inverse_spectrum_kernel");
  });
}

}  // namespace tapstream::cuda

#pragma once
// The in-shared-memory transform of overlap-save windows, shared by the
// single-partition kernel (fused_overlap_save.cu) and the multi-partition
// kernels (multi_partition_overlap_save.cu): one thread block per 2P-sample
// window of one channel.
//
// The 2P real samples x of a window are read as P complex values
// z[n] = x[2n] + i x[2n+1] (the same bytes in shared memory), so one P-point
// complex FFT gives Z, and X[k] = (Z[k] + conj Z[P-k]) / 2
// - i W^k (Z[k] - conj Z[P-k]) / 2 with W = exp(-i pi / P) for k = 0..P
// (split_pair). A spectrum Y of a real signal is folded back the same way into
// the spectrum Z' of the even/odd pairs of its inverse (fold_pair), whose
// inverse FFT is conj(FFT(conj Z')): both transforms are the same forward FFT.
// Each split or fold step touches only the pair (k, P - k), so the thread
// owning a pair works in place without a barrier.
//
// The FFT is Stockham radix 8 (then one radix-4 or radix-2 pass) in shared
// memory: each thread holds its butterflies' inputs in registers across a
// barrier, so one buffer serves in place. Element i lives at i + i / 16: that
// padding keeps the first pass's stride-8 stores and the later stride-Ns
// stores from piling onto a few banks. Twiddles come from sincospif (about
// one ulp) and are raised to the butterfly's powers by complex products.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace tapstream::cuda::shared_fft {

constexpr int kMinLog = 8;   // P = 256
constexpr int kMaxLog = 14;  // P = 16384: 2P-point windows, 136 KiB of shared memory

// Whether P (the partition, half the window) is a size these kernels are built for.
inline bool supports(std::size_t partition) {
  return partition >= (std::size_t(1) << kMinLog) && partition <= (std::size_t(1) << kMaxLog) &&
         (partition & (partition - 1)) == 0;
}

// Threads per block for a P-point FFT: one radix-8 butterfly each, at most
// 512 at P = 16384 (1024 would leave 64 registers a thread and spill more).
template <int M>
constexpr int threads_for() {
  return std::clamp(M / 8, 32, M == 16384 ? 512 : 1024);
}

template <int M>
constexpr std::size_t shared_bytes_for() {
  return std::size_t(M + M / 16) * sizeof(float2);
}

// Calls body(std::integral_constant<int, P>{}) for the run-time partition.
template <int Log = kMinLog, class Body>
void for_partition(std::size_t partition, Body&& body) {
  if constexpr (Log <= kMaxLog) {
    if (partition == (std::size_t(1) << Log)) {
      body(std::integral_constant<int, (1 << Log)>{});
      return;
    }
    for_partition<Log + 1>(partition, body);
  } else {
    throw std::invalid_argument("shared-memory FFT: partition " + std::to_string(partition) +
                                " is not a power of two in 256..16384");
  }
}

__device__ __forceinline__ int padded(int i) {
  return i + (i >> 4);
}
// Real sample m of the window within the float view of the padded complex array.
__device__ __forceinline__ int padded_real(int m) {
  return 2 * padded(m >> 1) + (m & 1);
}

__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
  return make_float2(fmaf(a.x, b.x, -a.y * b.y), fmaf(a.x, b.y, a.y * b.x));
}
__device__ __forceinline__ float2 cadd(float2 a, float2 b) {
  return make_float2(a.x + b.x, a.y + b.y);
}
__device__ __forceinline__ float2 csub(float2 a, float2 b) {
  return make_float2(a.x - b.x, a.y - b.y);
}
__device__ __forceinline__ float2 conj(float2 a) {
  return make_float2(a.x, -a.y);
}
__device__ __forceinline__ float2 times_minus_i(float2 a) {
  return make_float2(a.y, -a.x);
}
__device__ __forceinline__ float2 times_i(float2 a) {
  return make_float2(-a.y, a.x);
}

__device__ __forceinline__ void dft2(float2& v0, float2& v1) {
  const float2 a = cadd(v0, v1);
  v1 = csub(v0, v1);
  v0 = a;
}

__device__ __forceinline__ void dft4(float2& v0, float2& v1, float2& v2, float2& v3) {
  const float2 a0 = cadd(v0, v2), a1 = csub(v0, v2), a2 = cadd(v1, v3);
  const float2 a3 = times_minus_i(csub(v1, v3));
  v0 = cadd(a0, a2);
  v2 = csub(a0, a2);
  v1 = cadd(a1, a3);
  v3 = csub(a1, a3);
}

__device__ __forceinline__ void dft8(float2* v) {
  float2 e0 = v[0], e1 = v[2], e2 = v[4], e3 = v[6];
  float2 o0 = v[1], o1 = v[3], o2 = v[5], o3 = v[7];
  dft4(e0, e1, e2, e3);
  dft4(o0, o1, o2, o3);
  constexpr float h = 0.70710678118654752f;
  o1 = make_float2(h * (o1.x + o1.y), h * (o1.y - o1.x));   // * exp(-i pi / 4)
  o2 = times_minus_i(o2);                                   // * exp(-i pi / 2)
  o3 = make_float2(h * (o3.y - o3.x), -h * (o3.x + o3.y));  // * exp(-3 i pi / 4)
  v[0] = cadd(e0, o0);
  v[4] = csub(e0, o0);
  v[1] = cadd(e1, o1);
  v[5] = csub(e1, o1);
  v[2] = cadd(e2, o2);
  v[6] = csub(e2, o2);
  v[3] = cadd(e3, o3);
  v[7] = csub(e3, o3);
}

template <int R>
__device__ __forceinline__ void dft(float2* v) {
  if constexpr (R == 8) {
    dft8(v);
  } else if constexpr (R == 4) {
    dft4(v[0], v[1], v[2], v[3]);
  } else {
    dft2(v[0], v[1]);
  }
}

// One Stockham pass of radix R over M points after passes whose radices
// multiply to Ns: butterfly j reads j + r M / R and writes
// (j / Ns) Ns R + j % Ns + r Ns.
template <int R, int M, int T, int Ns>
__device__ __forceinline__ void stockham_pass(float2* s) {
  constexpr int kItems = M / R / T;
  static_assert(kItems >= 1 && kItems * R * T == M, "threads must divide the butterflies");
  float2 v[kItems][R];
#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    const int j = int(threadIdx.x) + it * T;
#pragma unroll
    for (int r = 0; r < R; ++r) v[it][r] = s[padded(j + r * (M / R))];
    if constexpr (Ns > 1) {
      const int k = j & (Ns - 1);
      float sine, cosine;
      sincospif(-2.0f * float(k) / float(Ns * R), &sine, &cosine);
      const float2 w = make_float2(cosine, sine);
      float2 wr = w;
#pragma unroll
      for (int r = 1; r < R; ++r) {
        v[it][r] = cmul(v[it][r], wr);
        if (r + 1 < R) wr = cmul(wr, w);
      }
    }
    dft<R>(v[it]);
  }
  __syncthreads();
#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    const int j = int(threadIdx.x) + it * T;
    const int base = (j / Ns) * Ns * R + (j & (Ns - 1));
#pragma unroll
    for (int r = 0; r < R; ++r) s[padded(base + r * Ns)] = v[it][r];
  }
  __syncthreads();
}

// In-place forward FFT of the M padded points in s; ends with a barrier.
template <int M, int T, int Ns = 1>
__device__ __forceinline__ void fft_in_shared(float2* s) {
  if constexpr (Ns * 8 <= M) {
    stockham_pass<8, M, T, Ns>(s);
    fft_in_shared<M, T, Ns * 8>(s);
  } else if constexpr (M / Ns == 4) {
    stockham_pass<4, M, T, Ns>(s);
  } else if constexpr (M / Ns == 2) {
    stockham_pass<2, M, T, Ns>(s);
  }
}

// The window [segment t - 1 | segment t] of one channel into the padded array
// s, as P complex even/odd pairs: segment t at in + t * P, the one before
// segment 0 at history; ends with a barrier.
template <int P, int T>
__device__ __forceinline__ void load_window(float2* s, const float* in, const float* history,
                                            std::size_t t) {
  const float* segment = in + t * P;
  const float* previous = t == 0 ? history : segment - P;
  float* samples = reinterpret_cast<float*>(s);
#pragma unroll
  for (int i = int(threadIdx.x); i < P; i += T) {
    samples[padded_real(i)] = previous[i];
    samples[padded_real(P + i)] = segment[i];
  }
  __syncthreads();
}

// The P valid outputs (the window's second half) of the inverse transform,
// after fold and the forward FFT: the inverse is the conjugate of that FFT,
// so odd samples change sign.
template <int P, int T>
__device__ __forceinline__ void store_valid_outputs(const float2* s, float* out) {
  const float* samples = reinterpret_cast<const float*>(s);
#pragma unroll
  for (int i = int(threadIdx.x); i < P; i += T) {
    const int m = P + i;
    const float v = samples[padded_real(m)];
    out[i] = (m & 1) ? -v : v;
  }
}

// DC and Nyquist of the real spectrum are both real and share Z[0]:
// X[0] = Re Z[0] + Im Z[0], X[P] = Re Z[0] - Im Z[0].
__device__ __forceinline__ void split_dc(float2 z0, float& x0, float& xp) {
  x0 = z0.x + z0.y;
  xp = z0.x - z0.y;
}

// W^k = exp(-i pi k / M), the twiddle of the split and the fold of pair k.
template <int M>
__device__ __forceinline__ float2 split_twiddle(int k) {
  float sine, cosine;
  sincospif(-float(k) / float(M), &sine, &cosine);
  return make_float2(cosine, sine);
}

// X[k] and X[M - k] of the 2M-point real spectrum from Z[k], Z[M - k]
// (1 <= k <= M / 2), w = split_twiddle<M>(k).
__device__ __forceinline__ void split_pair(float2 w, float2 zk, float2 zkk, float2& xk,
                                           float2& xkk) {
  const float2 even = make_float2(0.5f * (zk.x + zkk.x), 0.5f * (zk.y - zkk.y));
  const float2 odd = times_minus_i(make_float2(0.5f * (zk.x - zkk.x), 0.5f * (zk.y + zkk.y)));
  const float2 w_odd = cmul(w, odd);
  xk = cadd(even, w_odd);
  xkk = conj(csub(even, w_odd));
}

// conj Z'[0] from the real DC and Nyquist bins of Y.
__device__ __forceinline__ float2 fold_dc(float y0, float yp) {
  return make_float2(y0 + yp, -(y0 - yp));
}

// conj Z'[k] and conj Z'[M - k] (what the forward FFT takes to give the
// inverse) from Y[k], Y[M - k] (1 <= k <= M / 2), w = split_twiddle<M>(k).
__device__ __forceinline__ void fold_pair(float2 w, float2 yk, float2 ykk, float2& zk,
                                          float2& zkk) {
  const float2 e = cadd(yk, conj(ykk));
  const float2 o = cmul(csub(yk, conj(ykk)), conj(w));
  // Z'[k] = e + i o and Z'[M - k] = conj(e) + i conj(o), stored conjugated.
  zk = conj(cadd(e, times_i(o)));
  zkk = conj(cadd(conj(e), times_i(conj(o))));
}

}  // namespace tapstream::cuda::shared_fft

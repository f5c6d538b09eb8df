#include "dsp/cpu_simd.hpp"

// Each kernel has three versions of one static function; GCC builds an ifunc
// that picks the best for the CPU at load time. The public functions are thin
// wrappers so that other translation units see ordinary symbols. Elsewhere
// than x86-64 only the portable versions are built.
#if defined(__x86_64__)
#include <immintrin.h>
#define TAPSTREAM_X86_SIMD 1
#define TAPSTREAM_PORTABLE __attribute__((target("default")))
#else
#define TAPSTREAM_X86_SIMD 0
#define TAPSTREAM_PORTABLE
#endif

namespace tapstream::simd {
namespace {

// ---- direct FIR: 64 outputs per pass, accumulators held in registers ----

#if TAPSTREAM_X86_SIMD
__attribute__((target("avx512f"))) void direct_fir_impl(const float* x, const float* r,
                                                        std::size_t taps, float* y,
                                                        std::size_t frames) {
  std::size_t n = 0;
  for (; n + 48 < frames; n += 64) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    const float* xn = x + n;
    for (std::size_t j = 0; j < taps; ++j) {
      const __m512 h = _mm512_set1_ps(r[j]);
      a0 = _mm512_fmadd_ps(h, _mm512_loadu_ps(xn + j), a0);
      a1 = _mm512_fmadd_ps(h, _mm512_loadu_ps(xn + j + 16), a1);
      a2 = _mm512_fmadd_ps(h, _mm512_loadu_ps(xn + j + 32), a2);
      a3 = _mm512_fmadd_ps(h, _mm512_loadu_ps(xn + j + 48), a3);
    }
    _mm512_storeu_ps(y + n, a0);
    _mm512_storeu_ps(y + n + 16, a1);
    _mm512_storeu_ps(y + n + 32, a2);
    _mm512_storeu_ps(y + n + 48, a3);
  }
  // Short blocks (live audio) and remainders: 16 outputs at a time.
  for (; n < frames; n += 16) {
    __m512 a0 = _mm512_setzero_ps();
    const float* xn = x + n;
    for (std::size_t j = 0; j < taps; ++j) {
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(r[j]), _mm512_loadu_ps(xn + j), a0);
    }
    _mm512_storeu_ps(y + n, a0);
  }
}
#endif

#if TAPSTREAM_X86_SIMD
__attribute__((target("avx2,fma"))) void direct_fir_impl(const float* x, const float* r,
                                                         std::size_t taps, float* y,
                                                         std::size_t frames) {
  for (std::size_t n = 0; n < frames; n += 64) {
    __m256 a[8];
    for (auto& v : a) v = _mm256_setzero_ps();
    const float* xn = x + n;
    for (std::size_t j = 0; j < taps; ++j) {
      const __m256 h = _mm256_set1_ps(r[j]);
      for (int k = 0; k < 8; ++k) a[k] = _mm256_fmadd_ps(h, _mm256_loadu_ps(xn + j + 8 * k), a[k]);
    }
    for (int k = 0; k < 8; ++k) _mm256_storeu_ps(y + n + 8 * k, a[k]);
  }
}
#endif

TAPSTREAM_PORTABLE void direct_fir_impl(const float* x, const float* r, std::size_t taps, float* y,
                                        std::size_t frames) {
  for (std::size_t n = 0; n < frames; n += 64) {
    float a[64] = {};
    const float* xn = x + n;
    for (std::size_t j = 0; j < taps; ++j) {
      const float h = r[j];
      for (int k = 0; k < 64; ++k) a[k] += h * xn[j + k];
    }
    for (int k = 0; k < 64; ++k) y[n + k] = a[k];
  }
}

// ---- split <-> interleaved, and out = x * h + add written interleaved ----

#if TAPSTREAM_X86_SIMD
__attribute__((target("avx512f"))) void deinterleave_impl(const float* c, float* re, float* im,
                                                          std::size_t bins) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (std::size_t k = 0; k < bins; k += 16) {
    const __m512 c0 = _mm512_loadu_ps(c + 2 * k), c1 = _mm512_loadu_ps(c + 2 * k + 16);
    _mm512_storeu_ps(re + k, _mm512_permutex2var_ps(c0, even, c1));
    _mm512_storeu_ps(im + k, _mm512_permutex2var_ps(c0, odd, c1));
  }
}
#endif

#if TAPSTREAM_X86_SIMD
__attribute__((target("avx2,fma"))) void deinterleave_impl(const float* c, float* re, float* im,
                                                           std::size_t bins) {
  for (std::size_t k = 0; k < bins; k += 8) {
    const __m256 c0 = _mm256_loadu_ps(c + 2 * k), c1 = _mm256_loadu_ps(c + 2 * k + 8);
    const __m256 r = _mm256_shuffle_ps(c0, c1, _MM_SHUFFLE(2, 0, 2, 0));  // r0 r1 r4 r5 r2 r3 r6 r7
    const __m256 i = _mm256_shuffle_ps(c0, c1, _MM_SHUFFLE(3, 1, 3, 1));
    _mm256_storeu_ps(re + k, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(r), 0xd8)));
    _mm256_storeu_ps(im + k, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(i), 0xd8)));
  }
}
#endif

TAPSTREAM_PORTABLE void deinterleave_impl(const float* c, float* re, float* im, std::size_t bins) {
  for (std::size_t k = 0; k < bins; ++k) {
    re[k] = c[2 * k];
    im[k] = c[2 * k + 1];
  }
}

#if TAPSTREAM_X86_SIMD
__attribute__((target("avx512f"))) void multiply_add_impl(const float* xr, const float* xi,
                                                          const float* hr, const float* hi,
                                                          const float* ar, const float* ai,
                                                          float* out, std::size_t bins) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_idx =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (std::size_t k = 0; k < bins; k += 16) {
    const __m512 a = _mm512_loadu_ps(xr + k), b = _mm512_loadu_ps(xi + k);
    const __m512 c = _mm512_loadu_ps(hr + k), d = _mm512_loadu_ps(hi + k);
    const __m512 re = _mm512_fmadd_ps(a, c, _mm512_fnmadd_ps(b, d, _mm512_loadu_ps(ar + k)));
    const __m512 im = _mm512_fmadd_ps(a, d, _mm512_fmadd_ps(b, c, _mm512_loadu_ps(ai + k)));
    _mm512_storeu_ps(out + 2 * k, _mm512_permutex2var_ps(re, lo, im));
    _mm512_storeu_ps(out + 2 * k + 16, _mm512_permutex2var_ps(re, hi_idx, im));
  }
}
#endif

#if TAPSTREAM_X86_SIMD
__attribute__((target("avx2,fma"))) void multiply_add_impl(const float* xr, const float* xi,
                                                           const float* hr, const float* hi,
                                                           const float* ar, const float* ai,
                                                           float* out, std::size_t bins) {
  for (std::size_t k = 0; k < bins; k += 8) {
    const __m256 a = _mm256_loadu_ps(xr + k), b = _mm256_loadu_ps(xi + k);
    const __m256 c = _mm256_loadu_ps(hr + k), d = _mm256_loadu_ps(hi + k);
    const __m256 re = _mm256_fmadd_ps(a, c, _mm256_fnmadd_ps(b, d, _mm256_loadu_ps(ar + k)));
    const __m256 im = _mm256_fmadd_ps(a, d, _mm256_fmadd_ps(b, c, _mm256_loadu_ps(ai + k)));
    const __m256 l = _mm256_unpacklo_ps(re, im), h = _mm256_unpackhi_ps(re, im);
    _mm256_storeu_ps(out + 2 * k, _mm256_permute2f128_ps(l, h, 0x20));
    _mm256_storeu_ps(out + 2 * k + 8, _mm256_permute2f128_ps(l, h, 0x31));
  }
}
#endif

TAPSTREAM_PORTABLE void multiply_add_impl(const float* xr, const float* xi, const float* hr,
                                          const float* hi, const float* ar, const float* ai,
                                          float* out, std::size_t bins) {
  for (std::size_t k = 0; k < bins; ++k) {
    out[2 * k] = xr[k] * hr[k] - xi[k] * hi[k] + ar[k];
    out[2 * k + 1] = xr[k] * hi[k] + xi[k] * hr[k] + ai[k];
  }
}

// ---- out = sum_t x[t] * h[t], 32 bins per pass held in registers ----

#if TAPSTREAM_X86_SIMD
__attribute__((target("avx512f"))) void sum_of_products_impl(
    const float* const* xr, const float* const* xi, const float* const* hr, const float* const* hi,
    std::size_t terms, float* orr, float* oi, std::size_t bins) {
  std::size_t k = 0;
  for (; k + 32 <= bins; k += 32) {
    __m512 r0 = _mm512_setzero_ps(), r1 = _mm512_setzero_ps();
    __m512 i0 = _mm512_setzero_ps(), i1 = _mm512_setzero_ps();
    for (std::size_t t = 0; t < terms; ++t) {
      const float *a = xr[t] + k, *b = xi[t] + k, *c = hr[t] + k, *d = hi[t] + k;
      const __m512 a0 = _mm512_loadu_ps(a), a1 = _mm512_loadu_ps(a + 16);
      const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
      const __m512 c0 = _mm512_loadu_ps(c), c1 = _mm512_loadu_ps(c + 16);
      const __m512 d0 = _mm512_loadu_ps(d), d1 = _mm512_loadu_ps(d + 16);
      r0 = _mm512_fnmadd_ps(b0, d0, _mm512_fmadd_ps(a0, c0, r0));
      r1 = _mm512_fnmadd_ps(b1, d1, _mm512_fmadd_ps(a1, c1, r1));
      i0 = _mm512_fmadd_ps(b0, c0, _mm512_fmadd_ps(a0, d0, i0));
      i1 = _mm512_fmadd_ps(b1, c1, _mm512_fmadd_ps(a1, d1, i1));
    }
    _mm512_storeu_ps(orr + k, r0);
    _mm512_storeu_ps(orr + k + 16, r1);
    _mm512_storeu_ps(oi + k, i0);
    _mm512_storeu_ps(oi + k + 16, i1);
  }
  for (; k < bins; k += 16) {
    __m512 r0 = _mm512_setzero_ps(), i0 = _mm512_setzero_ps();
    for (std::size_t t = 0; t < terms; ++t) {
      const __m512 a0 = _mm512_loadu_ps(xr[t] + k), b0 = _mm512_loadu_ps(xi[t] + k);
      const __m512 c0 = _mm512_loadu_ps(hr[t] + k), d0 = _mm512_loadu_ps(hi[t] + k);
      r0 = _mm512_fnmadd_ps(b0, d0, _mm512_fmadd_ps(a0, c0, r0));
      i0 = _mm512_fmadd_ps(b0, c0, _mm512_fmadd_ps(a0, d0, i0));
    }
    _mm512_storeu_ps(orr + k, r0);
    _mm512_storeu_ps(oi + k, i0);
  }
}
#endif

#if TAPSTREAM_X86_SIMD
__attribute__((target("avx2,fma"))) void sum_of_products_impl(
    const float* const* xr, const float* const* xi, const float* const* hr, const float* const* hi,
    std::size_t terms, float* orr, float* oi, std::size_t bins) {
  for (std::size_t k = 0; k < bins; k += 16) {
    __m256 r0 = _mm256_setzero_ps(), r1 = _mm256_setzero_ps();
    __m256 i0 = _mm256_setzero_ps(), i1 = _mm256_setzero_ps();
    for (std::size_t t = 0; t < terms; ++t) {
      const float *a = xr[t] + k, *b = xi[t] + k, *c = hr[t] + k, *d = hi[t] + k;
      const __m256 a0 = _mm256_loadu_ps(a), a1 = _mm256_loadu_ps(a + 8);
      const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
      const __m256 c0 = _mm256_loadu_ps(c), c1 = _mm256_loadu_ps(c + 8);
      const __m256 d0 = _mm256_loadu_ps(d), d1 = _mm256_loadu_ps(d + 8);
      r0 = _mm256_fnmadd_ps(b0, d0, _mm256_fmadd_ps(a0, c0, r0));
      r1 = _mm256_fnmadd_ps(b1, d1, _mm256_fmadd_ps(a1, c1, r1));
      i0 = _mm256_fmadd_ps(b0, c0, _mm256_fmadd_ps(a0, d0, i0));
      i1 = _mm256_fmadd_ps(b1, c1, _mm256_fmadd_ps(a1, d1, i1));
    }
    _mm256_storeu_ps(orr + k, r0);
    _mm256_storeu_ps(orr + k + 8, r1);
    _mm256_storeu_ps(oi + k, i0);
    _mm256_storeu_ps(oi + k + 8, i1);
  }
}
#endif

TAPSTREAM_PORTABLE void sum_of_products_impl(const float* const* xr, const float* const* xi,
                                             const float* const* hr, const float* const* hi,
                                             std::size_t terms, float* orr, float* oi,
                                             std::size_t bins) {
  for (std::size_t k = 0; k < bins; ++k) {
    orr[k] = 0.0f;
    oi[k] = 0.0f;
  }
  for (std::size_t t = 0; t < terms; ++t) {
    for (std::size_t k = 0; k < bins; ++k) {
      orr[k] += xr[t][k] * hr[t][k] - xi[t][k] * hi[t][k];
      oi[k] += xr[t][k] * hi[t][k] + xi[t][k] * hr[t][k];
    }
  }
}

}  // namespace

void direct_fir(const float* x, const float* reversed_taps, std::size_t taps, float* y,
                std::size_t frames) {
  direct_fir_impl(x, reversed_taps, taps, y, frames);
}

void deinterleave(const float* interleaved, float* re, float* im, std::size_t bins) {
  deinterleave_impl(interleaved, re, im, bins);
}

void multiply_add(const float* x_re, const float* x_im, const float* h_re, const float* h_im,
                  const float* add_re, const float* add_im, float* out_interleaved,
                  std::size_t bins) {
  multiply_add_impl(x_re, x_im, h_re, h_im, add_re, add_im, out_interleaved, bins);
}

void sum_of_products(const float* const* x_re, const float* const* x_im, const float* const* h_re,
                     const float* const* h_im, std::size_t terms, float* out_re, float* out_im,
                     std::size_t bins) {
  sum_of_products_impl(x_re, x_im, h_re, h_im, terms, out_re, out_im, bins);
}

}  // namespace tapstream::simd

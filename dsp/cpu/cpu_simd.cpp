#include "dsp/cpu/cpu_simd.hpp"

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

// ---- spectra in blocks of 32 bins: [32 re | 32 im] ----

#if TAPSTREAM_X86_SIMD
__attribute__((target("avx512f"))) void to_blocks_impl(const float* c, float* dst,
                                                       std::size_t stride, std::size_t blocks) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (std::size_t b = 0; b < blocks; ++b, c += 64, dst += stride) {
    const __m512 c0 = _mm512_loadu_ps(c), c1 = _mm512_loadu_ps(c + 16);
    const __m512 c2 = _mm512_loadu_ps(c + 32), c3 = _mm512_loadu_ps(c + 48);
    _mm512_storeu_ps(dst, _mm512_permutex2var_ps(c0, even, c1));
    _mm512_storeu_ps(dst + 16, _mm512_permutex2var_ps(c2, even, c3));
    _mm512_storeu_ps(dst + 32, _mm512_permutex2var_ps(c0, odd, c1));
    _mm512_storeu_ps(dst + 48, _mm512_permutex2var_ps(c2, odd, c3));
  }
}

__attribute__((target("avx2,fma"))) void to_blocks_impl(const float* c, float* dst,
                                                        std::size_t stride, std::size_t blocks) {
  for (std::size_t b = 0; b < blocks; ++b, c += 64, dst += stride) {
    for (std::size_t k = 0; k < 32; k += 8) {
      const __m256 c0 = _mm256_loadu_ps(c + 2 * k), c1 = _mm256_loadu_ps(c + 2 * k + 8);
      const __m256 r =
          _mm256_shuffle_ps(c0, c1, _MM_SHUFFLE(2, 0, 2, 0));  // r0 r1 r4 r5 r2 r3 r6 r7
      const __m256 i = _mm256_shuffle_ps(c0, c1, _MM_SHUFFLE(3, 1, 3, 1));
      _mm256_storeu_ps(dst + k, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(r), 0xd8)));
      _mm256_storeu_ps(dst + 32 + k,
                       _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(i), 0xd8)));
    }
  }
}
#endif

TAPSTREAM_PORTABLE void to_blocks_impl(const float* c, float* dst, std::size_t stride,
                                       std::size_t blocks) {
  for (std::size_t b = 0; b < blocks; ++b, c += 64, dst += stride) {
    for (std::size_t k = 0; k < 32; ++k) {
      dst[k] = c[2 * k];
      dst[32 + k] = c[2 * k + 1];
    }
  }
}

#if TAPSTREAM_X86_SIMD
__attribute__((target("avx512f"))) void multiply_add_impl(const float* x, std::size_t x_stride,
                                                          const float* h, std::size_t h_stride,
                                                          const float* add, float* out,
                                                          std::size_t blocks) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (std::size_t b = 0; b < blocks; ++b, x += x_stride, h += h_stride, add += 64, out += 64) {
    for (std::size_t k = 0; k < 32; k += 16) {
      const __m512 a = _mm512_loadu_ps(x + k), bb = _mm512_loadu_ps(x + 32 + k);
      const __m512 c = _mm512_loadu_ps(h + k), d = _mm512_loadu_ps(h + 32 + k);
      const __m512 re = _mm512_fmadd_ps(a, c, _mm512_fnmadd_ps(bb, d, _mm512_loadu_ps(add + k)));
      const __m512 im =
          _mm512_fmadd_ps(a, d, _mm512_fmadd_ps(bb, c, _mm512_loadu_ps(add + 32 + k)));
      _mm512_storeu_ps(out + 2 * k, _mm512_permutex2var_ps(re, lo, im));
      _mm512_storeu_ps(out + 2 * k + 16, _mm512_permutex2var_ps(re, hi, im));
    }
  }
}

__attribute__((target("avx2,fma"))) void multiply_add_impl(const float* x, std::size_t x_stride,
                                                           const float* h, std::size_t h_stride,
                                                           const float* add, float* out,
                                                           std::size_t blocks) {
  for (std::size_t b = 0; b < blocks; ++b, x += x_stride, h += h_stride, add += 64, out += 64) {
    for (std::size_t k = 0; k < 32; k += 8) {
      const __m256 a = _mm256_loadu_ps(x + k), bb = _mm256_loadu_ps(x + 32 + k);
      const __m256 c = _mm256_loadu_ps(h + k), d = _mm256_loadu_ps(h + 32 + k);
      const __m256 re = _mm256_fmadd_ps(a, c, _mm256_fnmadd_ps(bb, d, _mm256_loadu_ps(add + k)));
      const __m256 im =
          _mm256_fmadd_ps(a, d, _mm256_fmadd_ps(bb, c, _mm256_loadu_ps(add + 32 + k)));
      const __m256 l = _mm256_unpacklo_ps(re, im), u = _mm256_unpackhi_ps(re, im);
      _mm256_storeu_ps(out + 2 * k, _mm256_permute2f128_ps(l, u, 0x20));
      _mm256_storeu_ps(out + 2 * k + 8, _mm256_permute2f128_ps(l, u, 0x31));
    }
  }
}
#endif

TAPSTREAM_PORTABLE void multiply_add_impl(const float* x, std::size_t x_stride, const float* h,
                                          std::size_t h_stride, const float* add, float* out,
                                          std::size_t blocks) {
  for (std::size_t b = 0; b < blocks; ++b, x += x_stride, h += h_stride, add += 64, out += 64) {
    for (std::size_t k = 0; k < 32; ++k) {
      out[2 * k] = x[k] * h[k] - x[32 + k] * h[32 + k] + add[k];
      out[2 * k + 1] = x[k] * h[32 + k] + x[32 + k] * h[k] + add[32 + k];
    }
  }
}

// ---- delay-line products: per block, terms walk the slots backwards ----

#if TAPSTREAM_X86_SIMD
__attribute__((target("avx512f"))) void delay_line_products_impl(
    const float* x, std::size_t x_stride, std::size_t slots, std::size_t first_slot, const float* h,
    std::size_t h_stride, std::size_t terms, float* out, std::size_t blocks) {
  for (std::size_t b = 0; b < blocks; ++b, x += x_stride, h += h_stride, out += 64) {
    __m512 r0 = _mm512_setzero_ps(), r1 = _mm512_setzero_ps();
    __m512 i0 = _mm512_setzero_ps(), i1 = _mm512_setzero_ps();
    std::size_t s = first_slot;
    const float* hs = h;
    for (std::size_t t = 0; t < terms; ++t, hs += 64) {
      const float* xs = x + s * 64;
      s = s == 0 ? slots - 1 : s - 1;
      const __m512 a0 = _mm512_loadu_ps(xs), a1 = _mm512_loadu_ps(xs + 16);
      const __m512 b0 = _mm512_loadu_ps(xs + 32), b1 = _mm512_loadu_ps(xs + 48);
      const __m512 c0 = _mm512_loadu_ps(hs), c1 = _mm512_loadu_ps(hs + 16);
      const __m512 d0 = _mm512_loadu_ps(hs + 32), d1 = _mm512_loadu_ps(hs + 48);
      r0 = _mm512_fnmadd_ps(b0, d0, _mm512_fmadd_ps(a0, c0, r0));
      r1 = _mm512_fnmadd_ps(b1, d1, _mm512_fmadd_ps(a1, c1, r1));
      i0 = _mm512_fmadd_ps(b0, c0, _mm512_fmadd_ps(a0, d0, i0));
      i1 = _mm512_fmadd_ps(b1, c1, _mm512_fmadd_ps(a1, d1, i1));
    }
    _mm512_storeu_ps(out, r0);
    _mm512_storeu_ps(out + 16, r1);
    _mm512_storeu_ps(out + 32, i0);
    _mm512_storeu_ps(out + 48, i1);
  }
}

__attribute__((target("avx2,fma"))) void delay_line_products_impl(
    const float* x, std::size_t x_stride, std::size_t slots, std::size_t first_slot, const float* h,
    std::size_t h_stride, std::size_t terms, float* out, std::size_t blocks) {
  for (std::size_t b = 0; b < blocks; ++b, x += x_stride, h += h_stride, out += 64) {
    __m256 r[4], i[4];
    for (int k = 0; k < 4; ++k) r[k] = i[k] = _mm256_setzero_ps();
    std::size_t s = first_slot;
    const float* hs = h;
    for (std::size_t t = 0; t < terms; ++t, hs += 64) {
      const float* xs = x + s * 64;
      s = s == 0 ? slots - 1 : s - 1;
      for (int k = 0; k < 4; ++k) {
        const __m256 a = _mm256_loadu_ps(xs + 8 * k), bb = _mm256_loadu_ps(xs + 32 + 8 * k);
        const __m256 c = _mm256_loadu_ps(hs + 8 * k), d = _mm256_loadu_ps(hs + 32 + 8 * k);
        r[k] = _mm256_fnmadd_ps(bb, d, _mm256_fmadd_ps(a, c, r[k]));
        i[k] = _mm256_fmadd_ps(bb, c, _mm256_fmadd_ps(a, d, i[k]));
      }
    }
    for (int k = 0; k < 4; ++k) {
      _mm256_storeu_ps(out + 8 * k, r[k]);
      _mm256_storeu_ps(out + 32 + 8 * k, i[k]);
    }
  }
}
#endif

TAPSTREAM_PORTABLE void delay_line_products_impl(const float* x, std::size_t x_stride,
                                                 std::size_t slots, std::size_t first_slot,
                                                 const float* h, std::size_t h_stride,
                                                 std::size_t terms, float* out,
                                                 std::size_t blocks) {
  for (std::size_t b = 0; b < blocks; ++b, x += x_stride, h += h_stride, out += 64) {
    float acc[64] = {};
    std::size_t s = first_slot;
    const float* hs = h;
    for (std::size_t t = 0; t < terms; ++t, hs += 64) {
      const float* xs = x + s * 64;
      s = s == 0 ? slots - 1 : s - 1;
      for (std::size_t k = 0; k < 32; ++k) {
        acc[k] += xs[k] * hs[k] - xs[32 + k] * hs[32 + k];
        acc[32 + k] += xs[k] * hs[32 + k] + xs[32 + k] * hs[k];
      }
    }
    for (std::size_t k = 0; k < 64; ++k) out[k] = acc[k];
  }
}

// ---- interleaved complex sums of products, accumulated in registers ----
// out = init + sum_t x_t * h_t over a stretch of bins. Per pair of lanes:
// a += x * dup(hr) and b += swap(x) * dup(hi) over the terms, then
// addsub(a, b): re = sum xr hr - sum xi hi, im = sum xi hr + sum xr hi. The
// sums stay in registers across the terms, so each output float is written
// once and each term costs two loads and two FMAs per vector.

// Floats [k, end) one bin at a time: the vector versions' last bins, and
// the portable version.
inline void complex_products_scalar(float* out, const float* init, const float* const* x,
                                    const float* const* h, std::size_t terms, std::size_t k,
                                    std::size_t end) {
  for (; k < end; k += 2) {
    float re = init != nullptr ? init[k] : 0.0f, im = init != nullptr ? init[k + 1] : 0.0f;
    for (std::size_t t = 0; t < terms; ++t) {
      const float xr = x[t][k], xi = x[t][k + 1], hr = h[t][k], hi = h[t][k + 1];
      re += xr * hr - xi * hi;
      im += xr * hi + xi * hr;
    }
    out[k] = re;
    out[k + 1] = im;
  }
}

#if TAPSTREAM_X86_SIMD
__attribute__((target("avx512f"))) void complex_products_impl(float* out, const float* init,
                                                              const float* const* x,
                                                              const float* const* h,
                                                              std::size_t terms, std::size_t first,
                                                              std::size_t floats) {
  constexpr __mmask16 all = 0xFFFF;
  std::size_t k = first;
  const std::size_t end = first + floats;
  for (; k + 32 <= end; k += 32) {
    __m512 a0 = _mm512_setzero_ps(), b0 = _mm512_setzero_ps();
    __m512 a1 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
    for (std::size_t t = 0; t < terms; ++t) {
      const __m512 x0 = _mm512_loadu_ps(x[t] + k), x1 = _mm512_loadu_ps(x[t] + k + 16);
      const __m512 h0 = _mm512_loadu_ps(h[t] + k), h1 = _mm512_loadu_ps(h[t] + k + 16);
      a0 = _mm512_fmadd_ps(x0, _mm512_mask_moveldup_ps(h0, all, h0), a0);
      b0 = _mm512_fmadd_ps(_mm512_mask_permute_ps(x0, all, x0, 0xB1),
                           _mm512_mask_movehdup_ps(h0, all, h0), b0);
      a1 = _mm512_fmadd_ps(x1, _mm512_mask_moveldup_ps(h1, all, h1), a1);
      b1 = _mm512_fmadd_ps(_mm512_mask_permute_ps(x1, all, x1, 0xB1),
                           _mm512_mask_movehdup_ps(h1, all, h1), b1);
    }
    // addsub: even lanes a - b, odd lanes a + b.
    __m512 y0 = _mm512_fmaddsub_ps(_mm512_set1_ps(1.0f), a0, b0);
    __m512 y1 = _mm512_fmaddsub_ps(_mm512_set1_ps(1.0f), a1, b1);
    if (init != nullptr) {
      y0 = _mm512_add_ps(y0, _mm512_loadu_ps(init + k));
      y1 = _mm512_add_ps(y1, _mm512_loadu_ps(init + k + 16));
    }
    _mm512_storeu_ps(out + k, y0);
    _mm512_storeu_ps(out + k + 16, y1);
  }
  complex_products_scalar(out, init, x, h, terms, k, end);
}

__attribute__((target("avx2,fma"))) void complex_products_impl(float* out, const float* init,
                                                               const float* const* x,
                                                               const float* const* h,
                                                               std::size_t terms, std::size_t first,
                                                               std::size_t floats) {
  std::size_t k = first;
  const std::size_t end = first + floats;
  for (; k + 16 <= end; k += 16) {
    __m256 a0 = _mm256_setzero_ps(), b0 = _mm256_setzero_ps();
    __m256 a1 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
    for (std::size_t t = 0; t < terms; ++t) {
      const __m256 x0 = _mm256_loadu_ps(x[t] + k), x1 = _mm256_loadu_ps(x[t] + k + 8);
      const __m256 h0 = _mm256_loadu_ps(h[t] + k), h1 = _mm256_loadu_ps(h[t] + k + 8);
      a0 = _mm256_fmadd_ps(x0, _mm256_moveldup_ps(h0), a0);
      b0 = _mm256_fmadd_ps(_mm256_permute_ps(x0, 0xB1), _mm256_movehdup_ps(h0), b0);
      a1 = _mm256_fmadd_ps(x1, _mm256_moveldup_ps(h1), a1);
      b1 = _mm256_fmadd_ps(_mm256_permute_ps(x1, 0xB1), _mm256_movehdup_ps(h1), b1);
    }
    __m256 y0 = _mm256_addsub_ps(a0, b0), y1 = _mm256_addsub_ps(a1, b1);
    if (init != nullptr) {
      y0 = _mm256_add_ps(y0, _mm256_loadu_ps(init + k));
      y1 = _mm256_add_ps(y1, _mm256_loadu_ps(init + k + 8));
    }
    _mm256_storeu_ps(out + k, y0);
    _mm256_storeu_ps(out + k + 8, y1);
  }
  complex_products_scalar(out, init, x, h, terms, k, end);
}
#endif

TAPSTREAM_PORTABLE void complex_products_impl(float* out, const float* init, const float* const* x,
                                              const float* const* h, std::size_t terms,
                                              std::size_t first, std::size_t floats) {
  complex_products_scalar(out, init, x, h, terms, first, first + floats);
}

}  // namespace

void complex_products(float* out, const float* init, const float* const* x, const float* const* h,
                      std::size_t terms, std::size_t first_bin, std::size_t bins) {
  complex_products_impl(out, init, x, h, terms, 2 * first_bin, 2 * bins);
}

void direct_fir(const float* x, const float* reversed_taps, std::size_t taps, float* y,
                std::size_t frames) {
  direct_fir_impl(x, reversed_taps, taps, y, frames);
}

void to_blocks(const float* interleaved, float* dst, std::size_t stride, std::size_t blocks) {
  to_blocks_impl(interleaved, dst, stride, blocks);
}

void multiply_add(const float* x, std::size_t x_stride, const float* h, std::size_t h_stride,
                  const float* add, float* out_interleaved, std::size_t blocks) {
  multiply_add_impl(x, x_stride, h, h_stride, add, out_interleaved, blocks);
}

void delay_line_products(const float* x, std::size_t x_stride, std::size_t slots,
                         std::size_t first_slot, const float* h, std::size_t h_stride,
                         std::size_t terms, float* out, std::size_t blocks) {
  delay_line_products_impl(x, x_stride, slots, first_slot, h, h_stride, terms, out, blocks);
}

}  // namespace tapstream::simd

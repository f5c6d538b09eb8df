#pragma once
// The CPU engine's inner loops, compiled for AVX-512, AVX2+FMA and plain x86-64
// and chosen at run time for the machine (GCC function multi-versioning), so
// the build needs no -march flag and the binary runs everywhere.

#include <cstddef>

namespace tapstream::simd {

// Direct-form FIR over a contiguous history:
//   y[n] = sum_{j < taps} reversed_taps[j] * x[n + j]   for n < round_up(frames, 64)
// x must be readable for round_up(frames, 64) + taps - 1 floats and y writable
// for round_up(frames, 64) (the AVX-512 version computes only round_up(frames,
// 16) outputs, the others may compute up to 64). reversed_taps holds the filter
// back to front.
void direct_fir(const float* x, const float* reversed_taps, std::size_t taps, float* y,
                std::size_t frames);

// Split (re[], im[]) from interleaved (re, im) pairs, `bins` (a multiple of
// 16) of them: FFTW's r2c output into the engine's delay-line form.
void deinterleave(const float* interleaved, float* re, float* im, std::size_t bins);

// Spectral multiply-add over `bins` bins (a multiple of 16), inputs split,
// output interleaved for FFTW's c2r:
//   out = x * h + add   (complex, element-wise)
void multiply_add(const float* x_re, const float* x_im, const float* h_re, const float* h_im,
                  const float* add_re, const float* add_im, float* out_interleaved,
                  std::size_t bins);

// Sum of `terms` complex element-wise products (terms may be 0: out = 0):
//   out = sum_t x[t] * h[t]
// Accumulates in registers across terms, so each output bin is written once.
void sum_of_products(const float* const* x_re, const float* const* x_im, const float* const* h_re,
                     const float* const* h_im, std::size_t terms, float* out_re, float* out_im,
                     std::size_t bins);

}  // namespace tapstream::simd

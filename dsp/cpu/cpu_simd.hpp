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

// Spectra (half spectra of real FFTs) are kept in blocks of 32 bins, each
// block 64 floats: 32 real parts then 32 imaginary parts. Block b of a
// spectrum lies at base + b * stride, so that several spectra can share one
// array block by block (the delay line keeps all its slots of one block
// together: the products over all partitions then read two contiguous streams).
constexpr std::size_t kBlockBins = 32;
constexpr std::size_t kBlockFloats = 64;

// FFTW's interleaved (re, im) r2c output, `blocks` x 32 bins of it, into blocks.
void to_blocks(const float* interleaved, float* dst, std::size_t stride, std::size_t blocks);

// out = x * h + add (complex, element-wise), out interleaved for FFTW's c2r;
// add is a spectrum with stride 64 (contiguous blocks).
void multiply_add(const float* x, std::size_t x_stride, const float* h, std::size_t h_stride,
                  const float* add, float* out_interleaved, std::size_t blocks);

// The delay line's products: out (stride 64) = sum_{t < terms} X_t * h_t, where
// X_t is the spectrum in slot (first_slot - t) mod slots, slot s of block b at
// x + b * x_stride + s * 64, and h_t of block b at h + b * h_stride + t * 64.
// Accumulates in registers across terms, so each output bin is written once.
void delay_line_products(const float* x, std::size_t x_stride, std::size_t slots,
                         std::size_t first_slot, const float* h, std::size_t h_stride,
                         std::size_t terms, float* out, std::size_t blocks);

// Bins [first_bin, first_bin + bins) of out = init + sum_{t < terms} x[t] * h[t]
// (complex, FFTW's interleaved (re, im) order, the CPU matrix engine's
// spectra; init null: none): per bin re = xr hr - xi hi, im = xr hi + xi hr,
// with fused multiply-adds where the CPU has them. The sums are held in
// registers across the terms, so out is written once and never read: a
// read-modify-write pass of an accumulator per term did twice the memory
// traffic. No alignment needed; any bin count. out may be init; neither may
// alias an x or h.
void complex_products(float* out, const float* init, const float* const* x, const float* const* h,
                      std::size_t terms, std::size_t first_bin, std::size_t bins);

}  // namespace tapstream::simd

#pragma once
// RAII for FFTW3f (single precision) as the CPU engine uses it: aligned
// buffers, and a pair of real-to-complex / complex-to-real plans.
//
// Plans are made once per size per process with FFTW_MEASURE, cached, and
// shared by every engine (executing a plan on new arrays is thread safe; the
// planner is not, so planning is serialised by a mutex). Measured plans are
// kept as FFTW wisdom in a file (PlannerOptions::wisdom_file)
// so that only the first run on a machine pays for measuring (0.05 to 4 s per
// size, capped at 5 s per plan by FFTW's planner time limit). Where the
// wisdom file is, and whether plans are measured at all, is PlannerOptions:
// process-wide, as FFTW's planner and wisdom are, set by the program's entry.

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>

namespace tapstream::fftw {

// How this process makes its plans. Set it before the first plan; a change
// applies to sizes planned afterwards (plans already made are kept).
struct PlannerOptions {
  // FFTW_MEASURE (the fastest plans, paid for once per machine thanks to the
  // wisdom file); false: FFTW_ESTIMATE, no start-up cost (tests).
  bool measure = true;
  // Where measured plans are kept across runs; empty: nowhere.
  std::filesystem::path wisdom_file;
};
void set_planner_options(PlannerOptions options);
PlannerOptions planner_options();

// Frees memory from std::aligned_alloc.
struct Free {
  void operator()(float* p) const;
};

// A zero-filled float array aligned to 64 bytes (a cache line, an AVX-512
// vector, and more than FFTW's SIMD alignment).
class AlignedFloats {
 public:
  AlignedFloats() = default;
  explicit AlignedFloats(std::size_t count);
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  std::size_t size() const { return size_; }
  void zero() {
    if (size_ != 0) std::memset(data_.get(), 0, size_ * sizeof(float));
  }

 private:
  std::unique_ptr<float, Free> data_;
  std::size_t size_ = 0;
};

// Number of floats used for one half-spectrum array of an n-point real FFT:
// n/2 + 1 bins, rounded up to a multiple of 16 so that every array carved out
// of a larger buffer keeps 64-byte alignment and SIMD loops need no remainder.
constexpr std::size_t padded_bins(std::size_t n) {
  return (n / 2 + 1 + 15) / 16 * 16;
}

// Forward and inverse real FFT of one size, complex data interleaved (FFTW's
// fastest form here: about a quarter faster than its split-array plans).
// Immutable once made; arrays passed to execute must be 64-byte aligned like
// AlignedFloats. The engine keeps its delay line in split form and converts
// (dsp/cpu/cpu_simd), which costs less than the difference.
class RealFftPair {
 public:
  // The cached pair for size n (a power of two >= 16). Thread safe.
  static std::shared_ptr<const RealFftPair> get(std::size_t n);
  ~RealFftPair();
  RealFftPair(const RealFftPair&) = delete;
  RealFftPair& operator=(const RealFftPair&) = delete;

  std::size_t size() const { return n_; }
  // in: n samples -> spectrum: n/2 + 1 interleaved (re, im) pairs, unnormalised.
  void forward(const float* in, float* spectrum) const;
  // spectrum (destroyed) -> out: n samples, scaled by n (FFTW is unnormalised).
  void inverse(float* spectrum, float* out) const;

  explicit RealFftPair(std::size_t n);  // use get()

 private:
  std::size_t n_;
  void* forward_ = nullptr;  // fftwf_plan, kept opaque so fftw3.h stays out of headers
  void* inverse_ = nullptr;
};

}  // namespace tapstream::fftw

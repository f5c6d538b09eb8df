#pragma once
// Test support shared by the engine suites: random signals with printed seeds,
// a float64 reference convolution of the whole stream, the relative error
// used by every exactness test (norm of difference over norm of reference),
// and a stream cut into calls of random size run through an Engine.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "dsp/model/engine.hpp"

namespace tapstream::testing {

using Signals = std::vector<std::vector<float>>;  // one signal per channel

// Prints the seed of a randomised test, so that a failure can be replayed.
inline std::uint64_t announce(const std::string& what, std::uint64_t seed) {
  std::printf("[ seed     ] %s: %llu\n", what.c_str(), static_cast<unsigned long long>(seed));
  return seed;
}

inline std::vector<float> random_signal(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// One random signal per channel, channel c's from seed + 1000 c.
inline Signals random_signals(std::size_t channels, std::size_t frames, std::uint64_t seed) {
  Signals s;
  for (std::size_t c = 0; c < channels; ++c) s.push_back(random_signal(frames, seed + 1000 * c));
  return s;
}

// Block sizes summing to `frames`, random in 1..max_block (varying within the stream).
inline std::vector<std::size_t> random_block_sizes(std::size_t frames, std::size_t max_block,
                                                   std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> size(1, max_block);
  std::vector<std::size_t> sizes;
  for (std::size_t done = 0; done < frames;) {
    const std::size_t n = std::min(frames - done, size(rng));
    sizes.push_back(n);
    done += n;
  }
  return sizes;
}

// Causal convolution of x with h, first x.size() outputs, in float64.
// Direct form: O(N M); keep N * M below ~1e10 in tests.
inline std::vector<double> reference_convolution(std::span<const float> x,
                                                 std::span<const float> h) {
  std::vector<double> y(x.size(), 0.0);
  for (std::size_t n = 0; n < x.size(); ++n) {
    const std::size_t kmax = std::min(h.size() - 1, n);
    double acc = 0.0;
    for (std::size_t k = 0; k <= kmax; ++k) acc += double(h[k]) * double(x[n - k]);
    y[n] = acc;
  }
  return y;
}

// The same float64 sums as reference_convolution (each output's terms added in
// tap order), visiting only the non-zero taps, which makes sparse long filters
// cheap, and tap-major in blocks of outputs so that the inner loop vectorises.
inline std::vector<double> sparse_reference_convolution(std::span<const float> x,
                                                        std::span<const float> h) {
  const std::size_t n = x.size();
  std::vector<double> xd(x.begin(), x.end()), y(n, 0.0);
  constexpr std::size_t kBlock = 4096;
  for (std::size_t b = 0; b < n; b += kBlock) {
    const std::size_t e = std::min(n, b + kBlock);
    for (std::size_t k = 0; k < h.size() && k < e; ++k) {
      if (h[k] == 0.0f) continue;
      const double hk = h[k];
      const double* xk = xd.data() - k;
      for (std::size_t i = std::max(b, k); i < e; ++i) y[i] += hk * xk[i];
    }
  }
  return y;
}

// ||got - want|| / ||want|| (0 when both are zero).
inline double relative_error(std::span<const float> got, std::span<const double> want) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  if (den == 0.0) return std::sqrt(num);
  return std::sqrt(num / den);
}

inline double relative_error(std::span<const float> got, std::span<const float> want) {
  std::vector<double> w(want.begin(), want.end());
  return relative_error(got, std::span<const double>(w));
}

// One call of `frames` frames of `in` from frame `start`, in `layout`, through
// the buffers `a` (input) and `b` (output); the output lands in `out` at
// `start`. `b` is poisoned with NaN first: every output must be written.
inline void run_block(Engine& engine, const Signals& in, Signals& out, std::size_t start,
                      std::size_t frames, Layout layout, std::vector<float>& a,
                      std::vector<float>& b) {
  const std::size_t channels = in.size();
  a.resize(frames * channels);
  b.assign(frames * channels, std::nanf(""));
  for (std::size_t c = 0; c < channels; ++c)
    for (std::size_t f = 0; f < frames; ++f)
      (layout == Layout::planar ? a[c * frames + f] : a[f * channels + c]) = in[c][start + f];
  engine.process(a, b, frames, layout);
  for (std::size_t c = 0; c < channels; ++c)
    for (std::size_t f = 0; f < frames; ++f)
      out[c][start + f] = layout == Layout::planar ? b[c * frames + f] : b[f * channels + c];
}

// The same through pageable buffers of its own (a CUDA engine copies them
// through its staging).
inline void run_block(Engine& engine, const Signals& in, Signals& out, std::size_t start,
                      std::size_t frames, Layout layout) {
  std::vector<float> a, b;
  run_block(engine, in, out, start, frames, layout, a, b);
}

}  // namespace tapstream::testing

#pragma once
// Test support shared by the engine suites: random signals with printed seeds,
// a float64 reference convolution of the whole stream, and the relative error
// used by every exactness test (norm of difference over norm of reference).

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace tapstream::testing {

inline std::vector<float> random_signal(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
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

}  // namespace tapstream::testing

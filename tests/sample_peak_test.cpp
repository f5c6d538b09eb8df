// The peak scan of written samples (dsp/files/sample_peak): the integer
// maximum over masked bits is the float maximum of the finite magnitudes,
// bit for bit, whatever the samples (signed zeros, subnormals, the largest
// floats, infinities, NaNs of any payload) and however a stream is cut.

#include "dsp/files/sample_peak.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

namespace tapstream {
namespace {

// The scan as it was written before: a float comparison per sample.
float scalar_peak(std::span<const float> samples, float peak) {
  for (const float x : samples) {
    if (std::isfinite(x)) peak = std::max(peak, std::fabs(x));
  }
  return peak;
}

std::vector<float> samples_of_every_kind(std::size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<std::uint32_t> bits;
  std::uniform_int_distribution<int> kind(0, 9);
  std::vector<float> x(n);
  for (float& v : x) {
    switch (kind(rng)) {
      case 0:
        v = std::bit_cast<float>(0x7f800000u | (bits(rng) & 0x807fffffu));  // inf or NaN
        break;
      case 1:
        v = std::bit_cast<float>(bits(rng) & 0x807fffffu);  // subnormal or zero
        break;
      case 2:
        v = (bits(rng) & 1) ? -std::numeric_limits<float>::max() : -0.0f;
        break;
      default:
        v = std::bit_cast<float>(bits(rng));  // anything, mostly ordinary
    }
  }
  return x;
}

TEST(SamplePeak, IsTheLargestFiniteMagnitudeBitForBit) {
  const std::uint32_t seed = 20261126;
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  for (const std::size_t n : {0, 1, 2, 15, 16, 17, 63, 64, 65, 1000, 100003}) {
    for (int round = 0; round < 20; ++round) {
      const std::vector<float> x = samples_of_every_kind(n, rng);
      for (const float start : {0.0f, 0.5f, std::numeric_limits<float>::max()}) {
        const float want = scalar_peak(x, start);
        const float got = finite_peak(x, start);
        ASSERT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want))
            << n << " samples, round " << round << ", start " << start;
      }
    }
  }
}

TEST(SamplePeak, NaNsAndInfinitiesDoNotCountAndAStreamCutAnywhereGivesOnePeak) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {-0.0f, nan, -inf, 0.25f, inf, -0.75f, -nan, 1e-42f};
  EXPECT_EQ(finite_peak(x, 0.0f), 0.75f);
  const std::vector<float> none = {nan, inf, -inf, -0.0f};
  EXPECT_EQ(std::bit_cast<std::uint32_t>(finite_peak(none, 0.0f)), 0u);  // +0, not -0
  for (std::size_t cut = 0; cut <= x.size(); ++cut) {
    const std::span<const float> all(x);
    EXPECT_EQ(finite_peak(all.subspan(cut), finite_peak(all.first(cut), 0.0f)), 0.75f) << cut;
  }
}

}  // namespace
}  // namespace tapstream

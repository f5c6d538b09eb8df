// SampleQuantiser: round to nearest (halves up, as sox), explicit clipping
// with a count, TPDF dither that is repeatable and stays within one step.

#include "dsp/files/sample_quantiser.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace tapstream {
namespace {

// Values given in LSB of a `bits`-bit code, as floats.
std::vector<float> in_lsb(const std::vector<double>& lsb, int bits) {
  std::vector<float> out;
  for (const double x : lsb) out.push_back(float(x / std::ldexp(1.0, bits - 1)));
  return out;
}

std::vector<int> quantise(SampleQuantiser& q, const std::vector<float>& in, int bits) {
  std::vector<int> out(in.size());
  q.quantise(in, out);
  for (auto& code : out) code >>= (32 - bits);  // undo the left justification
  return out;
}

TEST(SampleQuantiser, RoundsToTheNearestCodeWithHalvesUpLikeSox) {
  for (const int bits : {8, 16, 24}) {
    SCOPED_TRACE(bits);
    SampleQuantiser q(bits, Dither::none);
    EXPECT_EQ(
        quantise(q, in_lsb({0.6, -0.4, 1.5, -1.5, 100.5, -100.5, 0.49, -0.51, 0.0}, bits), bits),
        (std::vector<int>{1, 0, 2, -1, 101, -100, 0, -1, 0}));
    EXPECT_EQ(q.clipped_samples(), 0u);
  }
}

TEST(SampleQuantiser, LeftJustifiesCodesAsLibsndfileTakesThem) {
  SampleQuantiser q16(16, Dither::none);
  std::vector<int> out(2);
  q16.quantise(in_lsb({1.0, -3.0}, 16), out);
  EXPECT_EQ(out, (std::vector<int>{1 << 16, -3 * (1 << 16)}));
  SampleQuantiser q32(32, Dither::none);
  q32.quantise(std::vector<float>{0.5f, -1.0f}, out);
  EXPECT_EQ(out, (std::vector<int>{1 << 30, std::numeric_limits<int>::min()}));
}

TEST(SampleQuantiser, ClipsToTheCodeRangeAndCountsEveryClippedSample) {
  SampleQuantiser q(16, Dither::none);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // +1.0 is 32768 LSB, one above the largest code; -1.0 is the lowest code.
  const std::vector<float> in = {
      1.0f, -1.0f, 1.5f, -2.0f, nan, 32767.49f / 32768.0f, 32767.5f / 32768.0f};
  EXPECT_EQ(quantise(q, in, 16), (std::vector<int>{32767, -32768, 32767, -32768, 0, 32767, 32767}));
  EXPECT_EQ(q.clipped_samples(), 5u);  // 1.0, 1.5, -2.0, NaN, and 32767.5 rounding to 32768
}

TEST(SampleQuantiser, TpdfDitherStaysWithinOneStepAndRemovesTheBias) {
  const std::size_t n = 200000;
  // A quarter step: plain rounding gives 0 for every sample (a bias of -0.25);
  // dithered, the mean comes back to 0.25 and the error is within +-1 step.
  const std::vector<float> in(n, float(0.25 / 32768.0));
  SampleQuantiser plain(16, Dither::none);
  SampleQuantiser dithered(16, Dither::tpdf);
  const std::vector<int> flat = quantise(plain, in, 16);
  const std::vector<int> codes = quantise(dithered, in, 16);
  double sum = 0.0, squares = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(flat[i], 0);
    ASSERT_GE(codes[i], -1);
    ASSERT_LE(codes[i], 1);
    sum += codes[i];
    squares += (codes[i] - 0.25) * (codes[i] - 0.25);
  }
  EXPECT_NEAR(sum / double(n), 0.25, 0.01);
  // TPDF adds 1/6 of a step squared to rounding's 1/12: a total error power of 1/4.
  EXPECT_NEAR(squares / double(n), 0.25, 0.02);
}

TEST(SampleQuantiser, DitherIsRepeatableForASeedAndDiffersBetweenSeeds) {
  const std::vector<float> in(1000, 0.001f);
  SampleQuantiser a(16, Dither::tpdf, 7), b(16, Dither::tpdf, 7), c(16, Dither::tpdf, 8);
  const auto first = quantise(a, in, 16);
  EXPECT_EQ(first, quantise(b, in, 16));
  EXPECT_NE(first, quantise(c, in, 16));
}

TEST(SampleQuantiser, RefusesWidthsItCannotHoldAndUnknownDitherNames) {
  EXPECT_THROW(SampleQuantiser(7, Dither::none), std::invalid_argument);
  EXPECT_THROW(SampleQuantiser(33, Dither::none), std::invalid_argument);
  EXPECT_EQ(parse_dither("tpdf"), Dither::tpdf);
  EXPECT_EQ(parse_dither("none"), Dither::none);
  EXPECT_THROW(parse_dither("shaped"), std::invalid_argument);
}

}  // namespace
}  // namespace tapstream

// The figures `tapstream info` prints, checked on filters whose answers are
// known in closed form.

#include "dsp/design/filter_response.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dsp/design/filter_design.hpp"

namespace tapstream {
namespace {

TEST(FilterResponse, AnImpulseIsFlatWithNoDelay) {
  const std::vector<float> taps = {1.0f};
  const FilterSummary summary = summarize_filter(taps, 48000);
  EXPECT_NEAR(summary.dc_gain_db, 0.0, 1e-12);
  EXPECT_NEAR(summary.peak_gain_db, 0.0, 1e-12);
  EXPECT_NEAR(summary.group_delay_dc_frames, 0.0, 1e-12);
  EXPECT_TRUE(summary.linear_phase);
  EXPECT_TRUE(summary.minus_3db_hz.empty());
}

TEST(FilterResponse, TwoTapAverageIsDownThreeDbAtAQuarterOfTheRate) {
  // |H(f)| = |cos(pi f / fs)|, which is 1/sqrt(2) at fs/4.
  const std::vector<float> taps = {0.5f, 0.5f};
  const FilterSummary summary = summarize_filter(taps, 48000);
  ASSERT_EQ(summary.minus_3db_hz.size(), 1u);
  EXPECT_NEAR(summary.minus_3db_hz[0], 12000.0, 20.0);
  EXPECT_NEAR(summary.group_delay_dc_frames, 0.5, 1e-12);
  EXPECT_TRUE(summary.linear_phase);
  EXPECT_DOUBLE_EQ(summary.linear_phase_latency_frames, 0.5);
}

TEST(FilterResponse, ADelayedImpulseHasThatGroupDelayAtEveryFrequency) {
  const std::vector<float> taps = {0.0f, 0.0f, 0.0f, 2.0f};
  const FrequencyResponse response = frequency_response(taps, 1000);
  for (std::size_t k = 0; k < response.value.size(); k += 97) {
    EXPECT_NEAR(response.group_delay_frames[k], 3.0, 1e-9) << response.frequency_hz[k];
    EXPECT_NEAR(std::abs(response.value[k]), 2.0, 1e-12);
  }
  const FilterSummary summary = summarize_filter(taps, 1000);
  EXPECT_NEAR(summary.dc_gain_db, 20.0 * std::log10(2.0), 1e-12);
  EXPECT_FALSE(summary.linear_phase);
}

TEST(FilterResponse, AllZeroTapsAreReportedAsSuch) {
  const std::vector<float> taps = {0.0f, 0.0f};
  const FilterSummary summary = summarize_filter(taps, 48000);
  EXPECT_TRUE(summary.all_zero);
  EXPECT_FALSE(summary.linear_phase);
  EXPECT_FALSE(std::isfinite(summary.group_delay_dc_frames));
}

TEST(FilterResponse, ADesignedLowpassIsDownThreeDbNearItsCutoff) {
  FilterSpec spec;
  spec.cutoff_hz = 4000;
  spec.taps = 255;
  const auto taps = design_fir(spec);
  const FilterSummary summary = summarize_filter(taps, spec.sample_rate);
  ASSERT_EQ(summary.minus_3db_hz.size(), 1u);
  EXPECT_NEAR(summary.minus_3db_hz[0], 4000.0, 100.0);
  EXPECT_NEAR(summary.dc_gain_db, 0.0, 0.01);
  EXPECT_TRUE(summary.linear_phase);
  EXPECT_NEAR(summary.group_delay_dc_frames, 127.0, 1e-6);
  EXPECT_FALSE(check_stopband(spec, taps).missed());
  spec.kaiser_beta = 20.0;  // promises -190 dB, beyond float32 taps
  EXPECT_TRUE(check_stopband(spec, design_fir(spec)).missed());
}

}  // namespace
}  // namespace tapstream

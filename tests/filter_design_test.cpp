// Windowed-sinc design, judged by the frequency response of the taps it
// returns (a direct DFT at chosen frequencies), not by the formulas used.

#include "dsp/design/filter_design.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsp/files/coefficient_file.hpp"

namespace tapstream {
namespace {

// |H(f)| of the taps, in float64.
double magnitude(const std::vector<float>& taps, double frequency_hz, double rate) {
  const double omega = 2.0 * std::numbers::pi * frequency_hz / rate;
  std::complex<double> sum = 0.0;
  for (std::size_t n = 0; n < taps.size(); ++n) {
    sum += static_cast<double>(taps[n]) * std::polar(1.0, -omega * static_cast<double>(n));
  }
  return std::abs(sum);
}

double decibels(double gain) {
  return 20.0 * std::log10(gain);
}

FilterSpec spec_of(FilterType type, double cutoff, double cutoff2, std::size_t taps,
                   WindowType window = WindowType::kaiser, double beta = 8.6) {
  FilterSpec spec;
  spec.type = type;
  spec.sample_rate = 48000.0;
  spec.cutoff_hz = cutoff;
  spec.cutoff2_hz = cutoff2;
  spec.taps = taps;
  spec.window = window;
  spec.kaiser_beta = beta;
  return spec;
}

void expect_symmetric(const std::vector<float>& taps) {
  for (std::size_t n = 0; n < taps.size() / 2; ++n) {
    ASSERT_EQ(taps[n], taps[taps.size() - 1 - n]) << "tap " << n << " of " << taps.size();
  }
}

TEST(FilterDesign, LowpassHasUnitGainAtDcAndSixtyDbStopband) {
  const auto spec = spec_of(FilterType::lowpass, 4000.0, 0.0, 255);
  const auto taps = design_fir(spec);
  ASSERT_EQ(taps.size(), 255u);
  expect_symmetric(taps);
  EXPECT_LT(std::fabs(decibels(magnitude(taps, 0.0, 48000.0))), 0.01);
  // Passband well inside the edge stays flat.
  for (double f : {500.0, 1500.0, 3000.0}) {
    EXPECT_LT(std::fabs(decibels(magnitude(taps, f, 48000.0))), 0.01) << f << " Hz";
  }
  // Kaiser beta 8.6 with 255 taps has a transition about 1 kHz wide.
  for (double f = 6000.0; f < 24000.0; f += 250.0) {
    EXPECT_LT(decibels(magnitude(taps, f, 48000.0)), -60.0) << f << " Hz";
  }
  // Half amplitude (-6 dB) at the cutoff, as windowed sinc puts it.
  EXPECT_NEAR(decibels(magnitude(taps, 4000.0, 48000.0)), -6.02, 0.1);
}

TEST(FilterDesign, HighpassHasUnitGainAtNyquistAndSixtyDbStopband) {
  const auto taps = design_fir(spec_of(FilterType::highpass, 2000.0, 0.0, 301));
  expect_symmetric(taps);
  EXPECT_LT(std::fabs(decibels(magnitude(taps, 24000.0, 48000.0))), 0.01);
  for (double f : {4000.0, 10000.0, 20000.0}) {
    EXPECT_LT(std::fabs(decibels(magnitude(taps, f, 48000.0))), 0.01) << f << " Hz";
  }
  for (double f = 0.0; f <= 1000.0; f += 100.0) {
    EXPECT_LT(decibels(magnitude(taps, f, 48000.0)), -60.0) << f << " Hz";
  }
}

TEST(FilterDesign, BandpassHasUnitGainAtBandCentreAndSixtyDbStopbands) {
  const auto taps = design_fir(spec_of(FilterType::bandpass, 6000.0, 12000.0, 400));
  ASSERT_EQ(taps.size(), 400u);  // even lengths are fine for bandpass
  expect_symmetric(taps);
  EXPECT_LT(std::fabs(decibels(magnitude(taps, 9000.0, 48000.0))), 0.01);
  for (double f : {0.0, 2000.0, 4500.0, 13500.0, 18000.0, 24000.0}) {
    EXPECT_LT(decibels(magnitude(taps, f, 48000.0)), -60.0) << f << " Hz";
  }
}

TEST(FilterDesign, BandstopHasUnitGainAtDcAndRejectsItsBand) {
  const auto taps = design_fir(spec_of(FilterType::bandstop, 6000.0, 12000.0, 401));
  expect_symmetric(taps);
  EXPECT_LT(std::fabs(decibels(magnitude(taps, 0.0, 48000.0))), 0.01);
  EXPECT_LT(std::fabs(decibels(magnitude(taps, 24000.0, 48000.0))), 0.01);
  for (double f : {7500.0, 9000.0, 10500.0}) {
    EXPECT_LT(decibels(magnitude(taps, f, 48000.0)), -60.0) << f << " Hz";
  }
}

TEST(FilterDesign, EveryWindowGivesASymmetricUnitGainLowpass) {
  for (const char* name : {"kaiser", "hann", "hamming", "blackman", "rectangular"}) {
    SCOPED_TRACE(name);
    const auto taps =
        design_fir(spec_of(FilterType::lowpass, 3000.0, 0.0, 128, parse_window_type(name), 5.0));
    expect_symmetric(taps);
    EXPECT_LT(std::fabs(decibels(magnitude(taps, 0.0, 48000.0))), 0.01);
    EXPECT_LT(decibels(magnitude(taps, 12000.0, 48000.0)), -20.0);
  }
}

TEST(FilterDesign, WindowsDifferAsTheyShould) {
  // The rectangular window's sidelobes (about -21 dB) sit far above
  // Blackman's (about -74 dB): a check that the window is really applied.
  const auto rectangular =
      design_fir(spec_of(FilterType::lowpass, 4000.0, 0.0, 201, WindowType::rectangular));
  const auto blackman =
      design_fir(spec_of(FilterType::lowpass, 4000.0, 0.0, 201, WindowType::blackman));
  double worst_rectangular = 0.0;
  double worst_blackman = 0.0;
  // Blackman's transition is about 1.3 kHz wide at 201 taps; rectangular's
  // first sidelobe sits just past its 0.2 kHz transition.
  for (double f = 4300.0; f < 24000.0; f += 17.0) {
    worst_rectangular = std::max(worst_rectangular, magnitude(rectangular, f, 48000.0));
    if (f > 6000.0) worst_blackman = std::max(worst_blackman, magnitude(blackman, f, 48000.0));
  }
  EXPECT_GT(decibels(worst_rectangular), -30.0);
  EXPECT_LT(decibels(worst_blackman), -70.0);
}

TEST(FilterDesign, KaiserBetaZeroIsTheRectangularWindow) {
  const auto kaiser =
      design_fir(spec_of(FilterType::lowpass, 5000.0, 0.0, 63, WindowType::kaiser, 0.0));
  const auto rectangular =
      design_fir(spec_of(FilterType::lowpass, 5000.0, 0.0, 63, WindowType::rectangular));
  ASSERT_EQ(kaiser.size(), rectangular.size());
  for (std::size_t n = 0; n < kaiser.size(); ++n) EXPECT_FLOAT_EQ(kaiser[n], rectangular[n]);
}

TEST(FilterDesign, SingleTapLowpassIsUnitGain) {
  const auto taps = design_fir(spec_of(FilterType::lowpass, 1000.0, 0.0, 1));
  ASSERT_EQ(taps.size(), 1u);
  EXPECT_FLOAT_EQ(taps[0], 1.0f);
}

void expect_rejected(const FilterSpec& spec, const std::string& must_mention) {
  try {
    design_fir(spec);
    FAIL() << "accepted a spec that should mention " << must_mention;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(must_mention), std::string::npos) << e.what();
  }
}

TEST(FilterDesign, LinkwitzRileyHalvesSumToAPureDelayAndCrossAtMinusSixDb) {
  for (const int order : {2, 4, 8}) {
    SCOPED_TRACE("order " + std::to_string(order));
    // Steeper slopes need longer filters to reach their depth an octave away.
    const std::size_t taps = order == 8 ? 2047 : 511;
    FilterSpec low = spec_of(FilterType::lr_lowpass, 2000.0, 0.0, taps);
    low.order = order;
    FilterSpec high = low;
    high.type = FilterType::lr_highpass;
    const auto lp = design_fir(low);
    const auto hp = design_fir(high);
    expect_symmetric(lp);
    expect_symmetric(hp);
    for (std::size_t n = 0; n < lp.size(); ++n) {
      EXPECT_NEAR(double(lp[n]) + double(hp[n]), n == taps / 2 ? 1.0 : 0.0, 1e-6) << "tap " << n;
    }
    // |H| = 1 / (1 + (f/fc)^order): -6.02 dB at the crossover for both halves,
    // and one octave away 1 / (1 + 2^order) (order 4: -24.6 dB).
    EXPECT_NEAR(decibels(magnitude(lp, 2000.0, 48000.0)), -6.02, 0.1);
    EXPECT_NEAR(decibels(magnitude(hp, 2000.0, 48000.0)), -6.02, 0.1);
    const double octave_db = decibels(1.0 / (1.0 + std::pow(2.0, order)));
    EXPECT_NEAR(decibels(magnitude(lp, 4000.0, 48000.0)), octave_db, 0.5);
    EXPECT_NEAR(decibels(magnitude(hp, 1000.0, 48000.0)), octave_db, 0.5);
    EXPECT_NEAR(magnitude(lp, 0.0, 48000.0), 1.0, 1e-6);
  }
  FilterSpec bad = spec_of(FilterType::lr_lowpass, 2000.0, 0.0, 511);
  bad.order = 3;
  EXPECT_THROW(design_fir(bad), std::invalid_argument);
  bad.order = 4;
  bad.taps = 512;
  EXPECT_THROW(design_fir(bad), std::invalid_argument);  // the pair needs a centre tap
}

TEST(FilterDesign, BadParametersAreRejectedNamingTheProblem) {
  auto bad_rate = spec_of(FilterType::lowpass, 1000.0, 0.0, 31);
  bad_rate.sample_rate = 0.0;
  expect_rejected(bad_rate, "sample rate");
  bad_rate.sample_rate = -48000.0;
  expect_rejected(bad_rate, "sample rate");
  expect_rejected(spec_of(FilterType::lowpass, 0.0, 0.0, 31), "cutoff");
  expect_rejected(spec_of(FilterType::lowpass, -5.0, 0.0, 31), "cutoff");
  expect_rejected(spec_of(FilterType::lowpass, 24000.0, 0.0, 31), "24000 Hz");
  expect_rejected(spec_of(FilterType::lowpass, 30000.0, 0.0, 31), "30000 Hz");
  expect_rejected(spec_of(FilterType::lowpass, NAN, 0.0, 31), "cutoff");
  expect_rejected(spec_of(FilterType::bandpass, 5000.0, 4000.0, 31), "second cutoff");
  expect_rejected(spec_of(FilterType::bandpass, 5000.0, 5000.0, 31), "second cutoff");
  expect_rejected(spec_of(FilterType::bandstop, 5000.0, 24000.0, 31), "second cutoff");
  expect_rejected(spec_of(FilterType::bandstop, 5000.0, 0.0, 31), "second cutoff");
  expect_rejected(spec_of(FilterType::lowpass, 1000.0, 0.0, 0), "taps");
  expect_rejected(spec_of(FilterType::highpass, 1000.0, 0.0, 64), "odd");
  expect_rejected(spec_of(FilterType::bandstop, 1000.0, 2000.0, 64), "odd");
  expect_rejected(spec_of(FilterType::lowpass, 1000.0, 0.0, 31, WindowType::kaiser, -1.0), "beta");
  // A negative beta means nothing to windows other than Kaiser.
  EXPECT_NO_THROW(
      design_fir(spec_of(FilterType::lowpass, 1000.0, 0.0, 31, WindowType::hann, -1.0)));
}

TEST(FilterDesign, ParseNamesAcceptsTheKnownAndNamesTheUnknown) {
  EXPECT_EQ(parse_filter_type("lowpass"), FilterType::lowpass);
  EXPECT_EQ(parse_filter_type("highpass"), FilterType::highpass);
  EXPECT_EQ(parse_filter_type("bandpass"), FilterType::bandpass);
  EXPECT_EQ(parse_filter_type("bandstop"), FilterType::bandstop);
  EXPECT_EQ(parse_window_type("kaiser"), WindowType::kaiser);
  EXPECT_EQ(parse_window_type("hann"), WindowType::hann);
  EXPECT_EQ(parse_window_type("hamming"), WindowType::hamming);
  EXPECT_EQ(parse_window_type("blackman"), WindowType::blackman);
  EXPECT_EQ(parse_window_type("rectangular"), WindowType::rectangular);
  try {
    parse_filter_type("notch");
    FAIL() << "accepted notch";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'notch'"), std::string::npos) << message;
    EXPECT_NE(message.find("bandstop"), std::string::npos) << message;
  }
  try {
    parse_window_type("gauss");
    FAIL() << "accepted gauss";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'gauss'"), std::string::npos) << message;
    EXPECT_NE(message.find("blackman"), std::string::npos) << message;
  }
}

// The shipped examples are what the design code makes, and meet their spec.
TEST(ShippedFilters, LowpassExampleIsTheDesignItClaims) {
  const std::string file = std::string(TAPSTREAM_SOURCE_DIR) + "/config/filters/lowpass-4k-48k.txt";
  CoefficientFileOptions options;
  options.channels = 2;
  const auto bank = load_filter_bank(file, options);
  const auto loaded = bank.taps(0);
  const auto designed = design_fir(spec_of(FilterType::lowpass, 4000.0, 0.0, 255));
  ASSERT_EQ(loaded.size(), designed.size());
  for (std::size_t n = 0; n < designed.size(); ++n) EXPECT_EQ(loaded[n], designed[n]) << n;
  const std::vector<float> taps(loaded.begin(), loaded.end());
  EXPECT_LT(std::fabs(decibels(magnitude(taps, 0.0, 48000.0))), 0.01);
  EXPECT_LT(decibels(magnitude(taps, 6000.0, 48000.0)), -60.0);
}

TEST(ShippedFilters, TelephoneBandpassExamplePassesVoiceAndStopsTheRest) {
  const std::string file =
      std::string(TAPSTREAM_SOURCE_DIR) + "/config/filters/telephone-300-3400-48k.wav";
  CoefficientFileOptions options;
  options.sample_rate = 48000;
  const auto bank = load_filter_bank(file, options);
  const auto loaded = bank.taps(0);
  const std::vector<float> taps(loaded.begin(), loaded.end());
  EXPECT_LT(std::fabs(decibels(magnitude(taps, 1850.0, 48000.0))), 0.01);
  for (double f : {1000.0, 2500.0}) {
    EXPECT_LT(std::fabs(decibels(magnitude(taps, f, 48000.0))), 0.1) << f << " Hz";
  }
  for (double f : {6000.0, 12000.0, 20000.0}) {
    EXPECT_LT(decibels(magnitude(taps, f, 48000.0)), -60.0) << f << " Hz";
  }
}

}  // namespace
}  // namespace tapstream

// Filters made for one rate, used at another: "$samplerate$" in a file name
// resolved for the rate in force, the nearest rate's file chosen when the
// exact one is missing, its taps resampled exactly enough (an impulse, a
// sine), and every refusal naming the file that is missing.

#include "dsp/design/filter_resampling.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "dsp/design/filter_response.hpp"
#include "dsp/files/coefficient_file.hpp"
#include "dsp/files/rate_file_name.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;

class RateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    directory_ = fs::temp_directory_path() / ("tapstream-rates-" + std::string(info->name()) + "-" +
                                              std::to_string(::getpid()));
    fs::create_directories(directory_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(directory_, ignored);
  }
  fs::path write(const std::string& name, const std::string& text) {
    const fs::path file = directory_ / name;
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
    return file;
  }
  fs::path directory_;
};

TEST(FilterResamplingTest, AnImpulseKeepsItsTimeAndItsLevelAcrossRates) {
  // A unit impulse 100 frames in at 44100 Hz is 100 * 48000 / 44100 frames
  // in at 48000 Hz: a band-limited impulse centred there, with a flat
  // response (0 dB) up to 20 kHz and that group delay.
  std::vector<float> taps(1024, 0.0f);
  taps[100] = 1.0f;
  const std::vector<float> resampled = resample_filter(taps, 44100.0, 48000.0);
  EXPECT_EQ(resampled.size(), std::size_t(std::ceil(1024.0 * 48000.0 / 44100.0)));
  const FrequencyResponse response = frequency_response(resampled, 48000.0, 8193);
  const double expected_delay = 100.0 * 48000.0 / 44100.0;
  for (std::size_t k = 1; k < response.frequency_hz.size(); ++k) {
    if (response.frequency_hz[k] > 20000.0) break;
    const double level_db = 20.0 * std::log10(std::abs(response.value[k]));
    ASSERT_NEAR(level_db, 0.0, 0.01) << "at " << response.frequency_hz[k] << " Hz";
    ASSERT_NEAR(response.group_delay_frames[k], expected_delay, 0.01)
        << "at " << response.frequency_hz[k] << " Hz";
  }
}

TEST(FilterResamplingTest, ASineResampledIsTheSameSineSampledAtTheNewRate) {
  // 1 kHz at 48000 Hz resampled to 96000 Hz is 1 kHz sampled at 96000 Hz
  // (scaled by 48000 / 96000, the level of a filter), away from the ends.
  constexpr double from = 48000.0;
  constexpr double to = 96000.0;
  std::vector<float> sine(4800);
  for (std::size_t n = 0; n < sine.size(); ++n) {
    sine[n] = float(std::sin(2.0 * std::numbers::pi * 1000.0 * double(n) / from));
  }
  const std::vector<float> resampled = resample_filter(sine, from, to);
  ASSERT_EQ(resampled.size(), 9600u);
  double worst = 0.0;
  for (std::size_t n = 2000; n < 7600; ++n) {
    const double expected =
        (from / to) * std::sin(2.0 * std::numbers::pi * 1000.0 * double(n) / to);
    worst = std::max(worst, std::abs(double(resampled[n]) - expected));
  }
  EXPECT_LT(worst, 1e-5);
}

TEST(FilterResamplingTest, ARateThatIsNotPositiveIsRefused) {
  const std::vector<float> taps = {1.0f};
  EXPECT_THROW(resample_filter(taps, 0.0, 48000.0), FilterResamplingError);
}

TEST_F(RateFileTest, TheTokenIsReplacedByTheRateInForceWhereverItIs) {
  EXPECT_EQ(file_for_rate("/f/$samplerate$/room_$samplerate$.wav", 44100),
            fs::path("/f/44100/room_44100.wav"));
  const fs::path exact = write("48000/room.txt", "1\n");
  const RateFile chosen = choose_rate_file(directory_ / "$samplerate$/room.txt", 48000, false);
  EXPECT_EQ(chosen.file, exact);
  EXPECT_EQ(chosen.named_rate, 48000);
  EXPECT_FALSE(chosen.other_rate());
}

TEST_F(RateFileTest, ANameWithoutTheTokenIsItself) {
  const RateFile chosen = choose_rate_file(directory_ / "plain.txt", 44100, false);
  EXPECT_EQ(chosen.file, directory_ / "plain.txt");
  EXPECT_EQ(chosen.named_rate, 0);
  EXPECT_FALSE(names_sample_rate(chosen.file));
}

TEST_F(RateFileTest, TheNearestRateByRatioIsChosenAndATieGoesHigher) {
  EXPECT_EQ(nearest_rate({32000, 44100, 96000}, 48000), 44100);
  EXPECT_EQ(nearest_rate({24000, 96000}, 48000), 96000);
  EXPECT_EQ(nearest_rate({44100, 192000}, 88200), 44100);
  write("f_44100.txt", "1\n");
  write("f_96000.txt", "1\n");
  const RateFile chosen = choose_rate_file(directory_ / "f_$samplerate$.txt", 48000, true);
  EXPECT_EQ(chosen.file, directory_ / "f_44100.txt");
  EXPECT_EQ(chosen.named_rate, 44100);
  EXPECT_TRUE(chosen.other_rate());
  EXPECT_EQ(rates_on_disk(directory_ / "f_$samplerate$.txt"), (std::vector<int>{44100, 96000}));
}

TEST_F(RateFileTest, AMissingRateWithoutResamplingNamesTheFileAndTheRatesThereAre) {
  write("f_44100.txt", "1\n");
  try {
    choose_rate_file(directory_ / "f_$samplerate$.txt", 48000, false);
    FAIL() << "a missing rate was accepted";
  } catch (const RateFileError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find((directory_ / "f_48000.txt").string() + " is missing"), std::string::npos)
        << what;
    EXPECT_NE(what.find("files for 44100 Hz"), std::string::npos) << what;
    EXPECT_NE(what.find("resample = false"), std::string::npos) << what;
  }
}

TEST_F(RateFileTest, NoFileForAnyRateNamesThePattern) {
  try {
    choose_rate_file(directory_ / "none_$samplerate$.wav", 48000, true);
    FAIL() << "a pattern with no file was accepted";
  } catch (const RateFileError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("none_$samplerate$.wav: no file for 48000 Hz"), std::string::npos) << what;
    EXPECT_NE(what.find("none_48000.wav"), std::string::npos) << what;
  }
}

TEST_F(RateFileTest, ATextFileNamedForAnotherRateIsResampledWhenAllowed) {
  std::string text;
  for (int n = 0; n < 64; ++n) text += (n == 10 ? "1\n" : "0\n");
  const fs::path file = write("f_44100.txt", text);
  CoefficientFileOptions options;
  options.sample_rate = 88200;
  options.resample = true;
  options.named_rate = 44100;
  const FilterBank bank = load_filter_bank(file, options);
  // Twice as many taps at twice the rate, the impulse at twice the frame,
  // its level (the sum of its taps, the DC gain) kept.
  const auto taps = bank.taps(0);
  ASSERT_EQ(taps.size(), 128u);
  EXPECT_EQ(std::max_element(taps.begin(), taps.end()) - taps.begin(), 20);
  double sum = 0.0;
  for (const float tap : taps) sum += tap;
  EXPECT_NEAR(sum, 1.0, 0.01);
  EXPECT_EQ(bank.source(0), file.string());
}

TEST_F(RateFileTest, AnImpulseResponseHeaderAtAnotherRateIsResampledOrRefused) {
  const fs::path file = write("ir.txt", "# sample_rate = 44100\n1\n0\n0\n0\n");
  CoefficientFileOptions options;
  options.sample_rate = 88200;
  options.resample = true;
  EXPECT_EQ(load_filter_bank(file, options).taps(0).size(), 8u);
  options.resample = false;
  EXPECT_THROW(load_filter_bank(file, options), CoefficientFileError);
  options.ignore_sample_rate = true;  // taken as it is
  EXPECT_EQ(load_filter_bank(file, options).taps(0).size(), 4u);
}

TEST_F(RateFileTest, AResampledFilterLongerThanTheMaximumIsRefusedNamingTheFile) {
  const fs::path file = write("ir.txt", "# sample_rate = 44100\n1\n0\n0\n0\n");
  CoefficientFileOptions options;
  options.sample_rate = 88200;
  options.resample = true;
  options.max_taps = 6;
  try {
    load_filter_bank(file, options);
    FAIL() << "a filter too long once resampled was accepted";
  } catch (const CoefficientFileError& e) {
    EXPECT_NE(std::string(e.what()).find(file.string() + ": resampled from 44100 to 88200 Hz"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tapstream

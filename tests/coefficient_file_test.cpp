// Coefficient files: every format loads the taps it holds, and every bad file
// is refused with one line naming the file (and the line, for text).

#include "dsp/files/coefficient_file.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "dsp/files/sound_file.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;

class CoefficientFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    directory_ =
        fs::temp_directory_path() / ("tapstream-coefficients-" + std::string(info->name()) + "-" +
                                     std::to_string(std::random_device{}()));
    fs::create_directories(directory_);
  }
  std::ostringstream log_;
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(directory_, ignored);
  }

  fs::path write_text(const std::string& name, const std::string& content) {
    const fs::path file = directory_ / name;
    std::ofstream(file, std::ios::binary) << content;
    return file;
  }

  template <typename Sample>
  fs::path write_raw(const std::string& name, const std::vector<Sample>& samples) {
    const fs::path file = directory_ / name;
    std::string bytes;
    for (const Sample s : samples) {
      using Bits = std::conditional_t<sizeof(Sample) == 4, std::uint32_t, std::uint64_t>;
      Bits bits;
      std::memcpy(&bits, &s, sizeof(s));
      for (std::size_t b = 0; b < sizeof(Sample); ++b) {
        bytes.push_back(static_cast<char>((bits >> (8 * b)) & 0xff));  // little-endian
      }
    }
    std::ofstream(file, std::ios::binary) << bytes;
    return file;
  }

  // Interleaved float WAV (exact, so loaded taps compare equal).
  fs::path write_wav(const std::string& name, int rate, int channels,
                     const std::vector<float>& interleaved) {
    const fs::path file = directory_ / name;
    SoundFileWriter writer(file, rate, channels, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
    writer.write(interleaved);
    writer.commit();
    return file;
  }

  fs::path directory_;
};

CoefficientFileOptions options_for(std::size_t channels, int rate = 0) {
  CoefficientFileOptions options;
  options.channels = channels;
  options.sample_rate = rate;
  return options;
}

std::vector<float> taps_of(const FilterBank& bank, std::size_t channel) {
  const auto taps = bank.taps(channel);
  return {taps.begin(), taps.end()};
}

// Loads `file` expecting failure; checks the message is one line that starts
// with `prefix` ("FILE: " or "FILE:LINE: ") and mentions `detail`.
void expect_error(const fs::path& file, const CoefficientFileOptions& options,
                  const std::string& prefix, const std::string& detail) {
  try {
    load_filter_bank(file, options);
    FAIL() << file << " was accepted; expected an error about " << detail;
  } catch (const CoefficientFileError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(prefix, 0), 0u) << "message: " << message;
    EXPECT_NE(message.find(detail), std::string::npos) << "message: " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "message: " << message;
  }
}

TEST_F(CoefficientFileTest, TextWithCommentsBlankLinesAndSpacesLoads) {
  const auto file = write_text("taps.txt",
                               "# a lowpass\n"
                               "\n"
                               "  0.25  \n"
                               "\t-0.5 # trailing comment\n"
                               "+1e-3\r\n"
                               "   \n"
                               "# the end\n"
                               "3\n"
                               "-.125");  // no final newline
  const auto bank = load_filter_bank(file, options_for(2));
  EXPECT_TRUE(bank.is_shared());
  EXPECT_EQ(bank.channels(), 2u);
  EXPECT_EQ(taps_of(bank, 1), (std::vector<float>{0.25f, -0.5f, 1e-3f, 3.0f, -0.125f}));
  EXPECT_EQ(bank.source(0), file.string());
}

TEST_F(CoefficientFileTest, FileWithoutKnownExtensionIsReadAsText) {
  const auto file = write_text("my-filter", "0.5\n0.5\n");
  EXPECT_EQ(taps_of(load_filter_bank(file, options_for(1)), 0), (std::vector<float>{0.5f, 0.5f}));
}

TEST_F(CoefficientFileTest, MissingFileIsNamed) {
  const auto file = directory_ / "absent.txt";
  expect_error(file, options_for(1), file.string() + ": ", "no such file");
}

TEST_F(CoefficientFileTest, DirectoryIsRefused) {
  expect_error(directory_, options_for(1), directory_.string() + ": ", "directory");
}

TEST_F(CoefficientFileTest, EmptyAndCommentOnlyFilesHaveNoTaps) {
  const auto empty = write_text("empty.txt", "");
  expect_error(empty, options_for(1), empty.string() + ": ", "no taps");
  const auto comments = write_text("comments.txt", "# nothing\n\n   # here\n");
  expect_error(comments, options_for(1), comments.string() + ": ", "no taps");
}

TEST_F(CoefficientFileTest, UnparsableLineIsNamedWithItsNumberAndText) {
  const auto file = write_text("bad.txt", "0.1\n# comment\n1.5abc\n0.2\n");
  expect_error(file, options_for(1), file.string() + ":3: ", "'1.5abc'");
  const auto two = write_text("two.txt", "0.1\n0.2 0.3\n");
  expect_error(two, options_for(1), two.string() + ":2: ", "'0.2 0.3'");
  const auto words = write_text("words.txt", "\n\n\n\nabc\n");
  expect_error(words, options_for(1), words.string() + ":5: ", "'abc'");
  const auto comma = write_text("comma.txt", "0,5\n");
  expect_error(comma, options_for(1), comma.string() + ":1: ", "'0,5'");
  const auto plus = write_text("plus.txt", "0.5\n+-1\n");
  expect_error(plus, options_for(1), plus.string() + ":2: ", "'+-1'");
}

TEST_F(CoefficientFileTest, NanAndInfInTextAreNamedWithTheirLine) {
  const auto nan = write_text("nan.txt", "0.5\nnan\n");
  expect_error(nan, options_for(1), nan.string() + ":2: ", "finite");
  const auto inf = write_text("inf.txt", "0.5\n0.25\n-inf # oops\n");
  expect_error(inf, options_for(1), inf.string() + ":3: ", "finite");
  const auto huge = write_text("huge.txt", "1e39\n");  // a double, but no float
  expect_error(huge, options_for(1), huge.string() + ":1: ", "range");
  const auto huger = write_text("huger.txt", "0\n1e400\n");  // not even a double
  expect_error(huger, options_for(1), huger.string() + ":2: ", "range");
}

TEST_F(CoefficientFileTest, MoreTapsThanTheMaximumIsRefused) {
  auto options = options_for(1);
  options.max_taps = 3;
  const auto three = write_text("three.txt", "1\n2\n3\n");
  EXPECT_EQ(load_filter_bank(three, options).max_taps(), 3u);
  const auto four = write_text("four.txt", "1\n2\n3\n\n4\n");
  expect_error(four, options, four.string() + ":5: ", "maximum of 3");
  const auto raw = write_raw<float>("four.f32", {1, 2, 3, 4});
  expect_error(raw, options, raw.string() + ": ", "maximum of 3");
  const auto wav = write_wav("four.wav", 48000, 1, {1, 2, 3, 4});
  expect_error(wav, options, wav.string() + ": ", "maximum of 3");
}

TEST_F(CoefficientFileTest, RawFloat32AndFloat64Load) {
  const std::vector<float> f32 = {0.1f, -0.2f, 1e-30f, 3.5f};
  EXPECT_EQ(taps_of(load_filter_bank(write_raw("taps.f32", f32), options_for(1)), 0), f32);
  const std::vector<double> f64 = {0.1, -0.2, 1e-30, 3.5};
  const auto bank = load_filter_bank(write_raw("taps.F64", f64), options_for(3));
  EXPECT_EQ(bank.channels(), 3u);
  EXPECT_EQ(taps_of(bank, 2), f32);  // the nearest floats of the doubles
}

TEST_F(CoefficientFileTest, RawFileOfWrongSizeOrBadValuesIsRefused) {
  const auto odd = write_text("odd.f32", "12345");
  expect_error(odd, options_for(1), odd.string() + ": ", "5 bytes is not a multiple of 4");
  const auto odd64 = write_text("odd.f64", "123456789012");
  expect_error(odd64, options_for(1), odd64.string() + ": ", "12 bytes is not a multiple of 8");
  const auto empty = write_text("empty.f32", "");
  expect_error(empty, options_for(1), empty.string() + ": ", "no taps");
  const auto nan = write_raw<float>("nan.f32", {0.5f, 0.25f, std::nanf("")});
  expect_error(nan, options_for(1), nan.string() + ": ", "tap 2");
  const auto inf = write_raw<double>("inf.f64", {std::numeric_limits<double>::infinity(), 0.0});
  expect_error(inf, options_for(1), inf.string() + ": ", "tap 0");
  const auto huge = write_raw<double>("huge.f64", {0.0, 1e300});
  expect_error(huge, options_for(1), huge.string() + ": ", "tap 1");
}

TEST_F(CoefficientFileTest, MonoWavImpulseResponseIsSharedByAllChannels) {
  const std::vector<float> ir = {1.0f, 0.5f, -0.25f, 0.125f};
  const auto file = write_wav("ir.wav", 48000, 1, ir);
  const auto bank = load_filter_bank(file, options_for(2, 48000));
  EXPECT_TRUE(bank.is_shared());
  EXPECT_EQ(bank.channels(), 2u);
  EXPECT_EQ(taps_of(bank, 0), ir);
  EXPECT_EQ(taps_of(bank, 1), ir);
}

TEST_F(CoefficientFileTest, StereoWavImpulseResponseGivesOneFilterPerChannel) {
  // Interleaved: left is 1, 2, 3; right is -1, -2, -3 (scaled to stay < 1).
  const std::vector<float> interleaved = {0.1f, -0.1f, 0.2f, -0.2f, 0.3f, -0.3f};
  const auto file = write_wav("stereo.wav", 48000, 2, interleaved);
  const auto bank = load_filter_bank(file, options_for(2, 48000));
  EXPECT_FALSE(bank.is_shared());
  EXPECT_EQ(bank.channels(), 2u);
  EXPECT_EQ(taps_of(bank, 0), (std::vector<float>{0.1f, 0.2f, 0.3f}));
  EXPECT_EQ(taps_of(bank, 1), (std::vector<float>{-0.1f, -0.2f, -0.3f}));
}

TEST_F(CoefficientFileTest, FlacAndIntegerImpulseResponsesLoadNormalised) {
  const fs::path file = directory_ / "ir.flac";
  {
    SoundFileWriter writer(file, 48000, 1, SF_FORMAT_FLAC | SF_FORMAT_PCM_16);
    writer.write(std::vector<float>{0.5f, -0.25f, 0.0f});
    writer.commit();
  }
  const auto taps = taps_of(load_filter_bank(file, options_for(1, 48000)), 0);
  ASSERT_EQ(taps.size(), 3u);
  EXPECT_NEAR(taps[0], 0.5f, 1.0 / 32768);
  EXPECT_NEAR(taps[1], -0.25f, 1.0 / 32768);
  EXPECT_EQ(taps[2], 0.0f);
}

TEST_F(CoefficientFileTest, ImpulseResponseChannelCountMustBeOneOrTheAudios) {
  const auto stereo = write_wav("stereo.wav", 48000, 2, {0.1f, 0.2f, 0.3f, 0.4f});
  expect_error(stereo, options_for(3), stereo.string() + ": ", "has 2 channels");
  expect_error(stereo, options_for(1), stereo.string() + ": ", "has 2 channels");
}

TEST_F(CoefficientFileTest, ImpulseResponseRateMustMatchUnlessIgnored) {
  const auto file = write_wav("ir-44k.wav", 44100, 1, {1.0f, 0.5f});
  expect_error(file, options_for(1, 48000), file.string() + ": ", "44100 Hz");
  expect_error(file, options_for(1, 48000), file.string() + ": ", "48000 Hz");
  auto ignoring = options_for(1, 48000);
  ignoring.ignore_sample_rate = true;
  EXPECT_EQ(load_filter_bank(file, ignoring).max_taps(), 2u);
  EXPECT_EQ(load_filter_bank(file, options_for(1, 0)).max_taps(), 2u);  // rate unknown
  EXPECT_EQ(load_filter_bank(file, options_for(1, 44100)).max_taps(), 2u);
}

TEST_F(CoefficientFileTest, ATextFileStartingWithAUtf8ByteOrderMarkLoads) {
  const auto file = write_text("bom.txt",
                               "\xef\xbb\xbf"
                               "0.25\n0.75\n");
  EXPECT_EQ(taps_of(load_filter_bank(file, options_for(1)), 0), (std::vector<float>{0.25f, 0.75f}));
  const auto bom_then_comment = write_text("bom2.txt", "\xef\xbb\xbf# made by hand\n1\n");
  EXPECT_EQ(taps_of(load_filter_bank(bom_then_comment, options_for(1)), 0),
            (std::vector<float>{1.0f}));
}

TEST_F(CoefficientFileTest, RawAndBinFilesAreLittleEndianFloat32) {
  const std::vector<float> taps = {0.5f, -0.25f, 0.125f};
  for (const std::string name : {"taps.raw", "taps.BIN"}) {
    const auto file = write_raw<float>(name, taps);
    EXPECT_EQ(taps_of(load_filter_bank(file, options_for(1)), 0), taps) << name;
  }
  // Text in a .raw file is refused as raw data, not parsed as text.
  const auto text = write_text("text.raw", "0.25\n");
  expect_error(text, options_for(1), text.string() + ": ", "not a multiple of 4");
}

TEST_F(CoefficientFileTest, ATextFilesDeclaredRateMustMatchTheSignalsUnlessIgnored) {
  const auto designed = write_text("designed.txt",
                                   "# tapstream design lowpass --rate 48000 --cutoff 4000\n"
                                   "# 2 taps, 48000 Hz sample rate\n0.5\n0.5\n");
  const auto by_key = write_text("key.txt", "# sample_rate = 48000\n0.5\n0.5\n");
  for (const auto& file : {designed, by_key}) {
    EXPECT_EQ(load_filter_bank(file, options_for(1, 48000)).max_taps(), 2u);
    EXPECT_EQ(load_filter_bank(file, options_for(1, 0)).max_taps(), 2u);  // rate unknown
    expect_error(file, options_for(1, 44100), file.string() + ":",
                 "48000 Hz differs from the audio's 44100 Hz");
    auto ignoring = options_for(1, 44100);
    ignoring.ignore_sample_rate = true;
    EXPECT_EQ(load_filter_bank(file, ignoring).max_taps(), 2u);
  }
  const auto undeclared = write_text("plain.txt", "# made at some rate\n0.5\n");
  EXPECT_EQ(load_filter_bank(undeclared, options_for(1, 44100)).max_taps(), 1u);
}

TEST_F(CoefficientFileTest, AnAllZeroFilterLoadsWithAWarningNamingIt) {
  const auto file = write_text("zeros.txt", "0\n0.0\n-0\n");
  const auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_);
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
  const auto bank = load_filter_bank(file, options_for(1));
  const auto nonzero = load_filter_bank(write_text("one.txt", "0\n1e-30\n"), options_for(1));
  spdlog::set_default_logger(previous);
  EXPECT_EQ(bank.max_taps(), 3u);
  const std::string log = log_.str();
  EXPECT_NE(log.find(file.string() + ": every tap is zero"), std::string::npos) << log;
  EXPECT_EQ(log.find("one.txt"), std::string::npos) << log;
}

TEST_F(CoefficientFileTest, BadImpulseResponsesAreRefused) {
  const auto nan = write_wav("nan.wav", 48000, 2, {0.1f, 0.2f, std::nanf(""), 0.4f});
  expect_error(nan, options_for(2), nan.string() + ": ", "frame 1");
  const auto empty = write_wav("empty.wav", 48000, 1, {});
  expect_error(empty, options_for(1), empty.string() + ": ", "no taps");
  const auto bogus = write_text("bogus.wav", "0.5\n0.5\n");
  expect_error(bogus, options_for(1), bogus.string() + ": ", "audio");
}

TEST_F(CoefficientFileTest, AudioWithAnUnknownExtensionIsStillReadAsAudio) {
  const auto wav = write_wav("ir.wav", 48000, 1, {0.75f, 0.25f});
  const auto renamed = directory_ / "ir.impulse";
  fs::rename(wav, renamed);
  EXPECT_EQ(taps_of(load_filter_bank(renamed, options_for(1)), 0),
            (std::vector<float>{0.75f, 0.25f}));
}

TEST_F(CoefficientFileTest, SavedTextTapsReadBackExactlyAndLeaveNoTemporary) {
  std::mt19937_64 rng(7);
  std::cout << "seed 7\n";
  std::normal_distribution<float> dist(0.0f, 0.3f);
  std::vector<float> taps(1000);
  for (auto& t : taps) t = dist(rng);
  taps[0] = std::numeric_limits<float>::denorm_min();
  taps[1] = std::numeric_limits<float>::max();
  taps[2] = -0.0f;
  const auto file = directory_ / "saved.txt";
  save_text_taps(file, taps, "lowpass 4000 Hz\nmade by a test");
  EXPECT_EQ(taps_of(load_filter_bank(file, options_for(1)), 0), taps);
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(directory_)) files.push_back(entry.path());
  EXPECT_EQ(files, std::vector<fs::path>{file});
  std::ifstream in(file);
  std::string first, second, third;
  std::getline(in, first);
  std::getline(in, second);
  std::getline(in, third);
  EXPECT_EQ(first, "# lowpass 4000 Hz");
  EXPECT_EQ(second, "# made by a test");
  EXPECT_FALSE(third.starts_with("#")) << third;
}

TEST_F(CoefficientFileTest, SavingIntoAMissingDirectoryFailsAndWritesNothing) {
  const auto file = directory_ / "missing" / "taps.txt";
  try {
    save_text_taps(file, {0.5f}, "");
    FAIL() << "saved into a missing directory";
  } catch (const CoefficientFileError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(file.string() + ": ", 0), 0u) << e.what();
  }
  EXPECT_TRUE(fs::is_empty(directory_));
  EXPECT_THROW(save_text_taps(directory_ / "nan.txt", {std::nanf("")}, ""), CoefficientFileError);
  EXPECT_TRUE(fs::is_empty(directory_));
}

}  // namespace
}  // namespace tapstream

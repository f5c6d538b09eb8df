// `tapstream info`: the figures of a filter whose answers are known, as text
// and JSON, and the exit codes when some or all files cannot be read.

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dsp/files/coefficient_file.hpp"
#include "tests/process_support.hpp"

namespace tapstream {
namespace {

using testing::Child;
using testing::read_text;
using testing::TempDir;

struct Result {
  int status = -1;
  std::string out, err;
};

Result info(const TempDir& dir, std::vector<std::string> args) {
  args.insert(args.begin(), {TAPSTREAM_BINARY, "info"});
  Result result;
  {
    Child child(args, dir / "out", dir / "err");
    result.status = child.wait_for(std::chrono::seconds(60));
  }
  result.out = read_text(dir / "out");
  result.err = read_text(dir / "err");
  return result;
}

TEST(InfoCommand, ReportsTheFiguresOfATwoTapAverage) {
  TempDir dir;
  // |H(f)| = cos(pi f / fs) is 3 dB down at fs / pi * acos(10^(-3/20)) = 1997.4 Hz
  // at fs = 8000 (half power, -3.01 dB, is at fs / 4); symmetric: latency 0.5 frames.
  save_text_taps(dir / "avg.txt", {0.5f, 0.5f}, "2 taps, 8000 Hz sample rate");
  const Result text = info(dir, {(dir / "avg.txt").string()});
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("8000 Hz (the file's)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("2 taps"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("linear phase: latency 0.5 frames"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("-3 dB at 1997."), std::string::npos) << text.out;

  const Result json = info(dir, {"--json", (dir / "avg.txt").string()});
  ASSERT_EQ(json.status, 0) << json.err;
  const auto parsed = nlohmann::json::parse(json.out);
  const auto& channel = parsed.at(0).at("channels").at(0);
  EXPECT_EQ(channel.at("taps"), 2);
  EXPECT_NEAR(channel.at("dc_gain_db").get<double>(), 0.0, 1e-9);
  EXPECT_NEAR(channel.at("group_delay_dc_frames").get<double>(), 0.5, 1e-9);
  EXPECT_NEAR(channel.at("minus_3db_hz").at(0).get<double>(), 1997.4, 0.5);
}

TEST(InfoCommand, AZeroAtDcIsNullInJsonAndAllZeroTapsAreSaid) {
  TempDir dir;
  save_text_taps(dir / "diff.txt", {1.0f, -1.0f}, "");
  save_text_taps(dir / "zero.txt", {0.0f, 0.0f}, "");
  const Result json = info(dir, {"--json", (dir / "diff.txt").string()});
  ASSERT_EQ(json.status, 0) << json.err;
  const auto channel = nlohmann::json::parse(json.out).at(0).at("channels").at(0);
  EXPECT_TRUE(channel.at("dc_gain_db").is_null());
  EXPECT_TRUE(channel.at("linear_phase").get<bool>());  // antisymmetric
  const Result zero = info(dir, {(dir / "zero.txt").string()});
  EXPECT_NE(zero.out.find("ALL ZERO"), std::string::npos) << zero.out;
}

TEST(InfoCommand, SomeUnreadableFilesExitThreeAllExitOne) {
  TempDir dir;
  save_text_taps(dir / "ok.txt", {1.0f}, "");
  const Result some = info(dir, {(dir / "ok.txt").string(), (dir / "missing.txt").string()});
  EXPECT_EQ(some.status, 3) << some.err;
  EXPECT_NE(some.err.find("missing.txt: no such file"), std::string::npos) << some.err;
  EXPECT_EQ(info(dir, {(dir / "missing.txt").string()}).status, 1);
}

}  // namespace
}  // namespace tapstream

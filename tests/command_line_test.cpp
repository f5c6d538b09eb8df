// The command line as a user meets it: --version, global options anywhere,
// the documented exit codes (0 ok, 1 runtime, 2 usage), range messages a
// person can read, and `design` writing the container its output names.

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "dsp/files/coefficient_file.hpp"
#include "process_support.hpp"

namespace tapstream {
namespace {

using testing::Child;
using testing::read_text;
using testing::TempDir;

struct Result {
  int status = -1;
  std::string out;
  std::string err;
};

Result tapstream(const std::vector<std::string>& arguments) {
  TempDir dir("tapstream-cli");
  std::vector<std::string> argv = {TAPSTREAM_BINARY};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  Result result;
  {
    Child child(argv, dir / "out", dir / "err");
    result.status = child.wait_for(std::chrono::seconds(60));
  }
  result.out = read_text(dir / "out");
  result.err = read_text(dir / "err");
  return result;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CommandLine, VersionPrintsTheVersionAndWhatTheBuildRunsOn) {
  const Result result = tapstream({"--version"});
  EXPECT_EQ(result.status, 0) << result.err;
  EXPECT_TRUE(contains(result.out, "tapstream ")) << result.out;
  EXPECT_TRUE(contains(result.out, "engine")) << result.out;
}

TEST(CommandLine, GlobalOptionsWorkAfterTheSubcommandToo) {
  TempDir dir;
  const std::string file = (dir / "f.txt").string();
  const std::vector<std::string> design = {"design", "lowpass", "-r", "48000", "-c",
                                           "1000",   "-n",      "31", "-o",    file};
  const Result loud = tapstream(design);
  EXPECT_EQ(loud.status, 0) << loud.err;
  EXPECT_TRUE(contains(loud.err, "wrote 31 taps")) << loud.err;
  std::vector<std::string> quiet_after = design;
  quiet_after.push_back("-q");
  const Result quiet = tapstream(quiet_after);
  EXPECT_EQ(quiet.status, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "") << "-q after the subcommand did not quieten it";
}

TEST(CommandLine, UsageErrorsExitTwoAndRuntimeErrorsOne) {
  TempDir dir;
  EXPECT_EQ(tapstream({}).status, 2);
  EXPECT_EQ(tapstream({"bogus"}).status, 2);
  EXPECT_EQ(tapstream({"design", "lowpass"}).status, 2);      // missing options
  EXPECT_EQ(tapstream({"process", "--nonsense"}).status, 2);  // unknown option
  const std::string out = (dir / "f.txt").string();
  EXPECT_EQ(
      tapstream({"design", "bandpass", "-r", "48000", "-c", "300", "-n", "31", "-o", out}).status,
      2);  // one edge where two are needed: CLI11 lets it through, design does not
  EXPECT_EQ(tapstream({"design", "lowpass", "-r", "48000", "-c", "1000", "-n", "31", "-o",
                       (dir / "missing" / "f.txt").string()})
                .status,
            1);  // a directory that does not exist is the job failing, not the command line
  EXPECT_EQ(tapstream({"--help"}).status, 0);
}

TEST(CommandLine, RangeMessagesNameTheRangeInPlainNumbers) {
  TempDir dir;
  const Result rate = tapstream(
      {"design", "lowpass", "-r", "0", "-c", "100", "-n", "11", "-o", (dir / "f.txt").string()});
  EXPECT_EQ(rate.status, 2);
  EXPECT_TRUE(contains(rate.err, "--rate: '0' is not between 1 and 10000000 Hz")) << rate.err;
  EXPECT_LT(rate.err.size(), 200u) << rate.err;
}

TEST(CommandLine, ProcessGainHasTheConfigurationsRange) {
  TempDir dir;
  const std::string in = (dir / "in.wav").string();
  std::ofstream(in) << "exists";  // so that the gain is the only thing wrong
  const Result result =
      tapstream({"process", in, (dir / "out.wav").string(), "-t", "x", "--gain", "50"});
  EXPECT_EQ(result.status, 2);
  EXPECT_TRUE(contains(result.err, "between -120 and 40 dB")) << result.err;
}

TEST(CommandLine, DesignWritesTheContainerItsExtensionNames) {
  TempDir dir;
  std::vector<float> reference;
  for (const std::string name : {"d.txt", "d.wav", "d.f32", "d.raw", "d.f64"}) {
    const std::string file = (dir / name).string();
    const Result result =
        tapstream({"design", "lowpass", "-r", "48000", "-c", "4000", "-n", "63", "-o", file});
    ASSERT_EQ(result.status, 0) << name << ": " << result.err;
    CoefficientFileOptions options;
    options.sample_rate = 48000;
    const FilterBank bank = load_filter_bank(file, options);
    const auto taps = bank.taps(0);
    ASSERT_EQ(taps.size(), 63u) << name;
    if (reference.empty()) reference.assign(taps.begin(), taps.end());
    for (std::size_t i = 0; i < taps.size(); ++i) EXPECT_EQ(taps[i], reference[i]) << name;
  }
  EXPECT_EQ(read_text(dir / "d.wav").substr(0, 4), "RIFF");
  EXPECT_EQ(read_text(dir / "d.f32").size(), 63u * 4);
  EXPECT_EQ(read_text(dir / "d.f64").size(), 63u * 8);
  EXPECT_EQ(read_text(dir / "d.txt").substr(0, 18), "# tapstream design");
  const Result flac = tapstream({"design", "lowpass", "-r", "48000", "-c", "4000", "-n", "63", "-o",
                                 (dir / "d.flac").string()});
  EXPECT_NE(flac.status, 0);
  EXPECT_TRUE(contains(flac.err, "can only write coefficients as text, .wav")) << flac.err;
}

TEST(CommandLine, DevicesPrintsOnlyTapstreamsLinesAndTheLibrariesChatterGoesToTheDebugLog) {
  // On a machine without sound cards or JACK server, ALSA and JACK each print
  // dozens of lines while PortAudio probes; none of them may reach stderr.
  const Result quiet = tapstream({"devices"});
  EXPECT_EQ(quiet.status, 0) << quiet.err;
  EXPECT_EQ(quiet.err.find("ALSA lib"), std::string::npos) << quiet.err;
  EXPECT_EQ(quiet.err.find("Cannot connect to server"), std::string::npos) << quiet.err;
  EXPECT_EQ(quiet.err.find("JackShm"), std::string::npos) << quiet.err;
  const Result debug = tapstream({"devices", "-v"});
  EXPECT_EQ(debug.err.find("ALSA lib"), std::string::npos) << "not as raw lines: " << debug.err;
}

TEST(CommandLine, DesignWarnsWhenItsStopbandFallsShortOfTheWindowsPromise) {
  TempDir dir;
  const std::string file = (dir / "f.txt").string();
  const Result good =
      tapstream({"design", "lowpass", "-r", "48000", "-c", "4000", "-n", "255", "-o", file});
  EXPECT_EQ(good.status, 0);
  EXPECT_FALSE(contains(good.err, "warning")) << good.err;
  // beta 20 promises -190 dB; float32 taps cannot get there.
  const Result deep = tapstream(
      {"design", "lowpass", "-r", "48000", "-c", "4000", "-n", "255", "--beta", "20", "-o", file});
  EXPECT_EQ(deep.status, 0);
  EXPECT_TRUE(contains(deep.err, "in its stopband where the kaiser window promises")) << deep.err;
  const Result short_filter =
      tapstream({"design", "lowpass", "-r", "48000", "-c", "4000", "-n", "7", "-o", file});
  EXPECT_TRUE(contains(short_filter.err, "too few for these edges")) << short_filter.err;
}

}  // namespace
}  // namespace tapstream

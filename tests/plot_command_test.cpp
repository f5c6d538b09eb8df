// `tapstream plot` and `design --plot`: the picture is drawn with every
// filter in each of its four panels, bad requests are refused with their exit
// code before anything is written, and nothing but the named picture is left
// behind (gnuplot's data and script live in a private directory). Tests that
// need gnuplot skip, saying so, where it is not installed.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dsp/files/coefficient_file.hpp"
#include "tests/process_support.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::Child;
using testing::read_text;
using testing::TempDir;

struct Result {
  int status = -1;
  std::string err;
};

// Runs `tapstream ARGS` with TMPDIR set to `scratch` (so that what it leaves
// there can be seen) and PATH as given ("" keeps this process's).
Result tapstream(const TempDir& dir, const fs::path& scratch, std::vector<std::string> args,
                 const std::string& path = "") {
  std::vector<std::string> argv = {"/usr/bin/env", "TMPDIR=" + scratch.string()};
  if (!path.empty()) argv.push_back("PATH=" + path);
  argv.push_back(TAPSTREAM_BINARY);
  argv.insert(argv.end(), args.begin(), args.end());
  Result result;
  {
    Child child(argv, dir / "stdout", dir / "stderr");
    result.status = child.wait_for(std::chrono::seconds(120));
  }
  result.err = read_text(dir / "stderr");
  return result;
}

bool have_gnuplot() {
  return std::system("gnuplot --version >/dev/null 2>&1") == 0;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

bool empty_dir(const fs::path& dir) {
  return fs::is_empty(dir);
}

const std::string shipped = std::string(TAPSTREAM_SOURCE_DIR) + "/config/filters/";

TEST(PlotCommand, DrawsEveryFilterInAllFourPanelsOfAnSvg) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot is not installed (tools/install-deps.sh)";
  TempDir dir;
  fs::create_directory(dir / "tmp");
  save_text_taps(dir / "two_tap.txt", {0.5f, 0.5f}, "8000 Hz sample rate");
  const fs::path svg = dir / "response.svg";
  const Result r =
      tapstream(dir, dir / "tmp",
                {"plot", shipped + "lowpass-4k-48k.txt", shipped + "telephone-300-3400-48k.wav",
                 (dir / "two_tap.txt").string(), "-o", svg.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string picture = read_text(svg);
  ASSERT_NE(picture.find("<svg"), std::string::npos);
  for (const char* label : {"lowpass-4k-48k.txt", "telephone-300-3400-48k.wav", "two_tap.txt"}) {
    // Each curve's key entry, once per panel.
    EXPECT_EQ(count(picture, std::string("<text>") + label + "</text>"), 4u) << label;
  }
  // gnuplot's SVG puts each curve in a group of its own (an opaque key draws
  // its samples again): at least 3 filters x 4 panels.
  EXPECT_GE(count(picture, "<g id=\"gnuplot_plot_"), 12u);
  for (const char* axis : {"magnitude (dB)", "phase (degrees)", "group delay (ms)", "time (ms)"}) {
    EXPECT_NE(picture.find(axis), std::string::npos) << axis;
  }
  EXPECT_TRUE(empty_dir(dir / "tmp")) << "the private data and script are removed";
}

TEST(PlotCommand, DrawsAPngAndEachChannelOfAMultichannelFile) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot is not installed (tools/install-deps.sh)";
  TempDir dir;
  fs::create_directory(dir / "tmp");
  const fs::path png = dir / "Picture.PNG";
  const Result r = tapstream(
      dir, dir / "tmp", {"plot", shipped + "lowpass-4k-48k.txt", "-o", png.string(), "--linear"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_text(png).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_TRUE(empty_dir(dir / "tmp"));
}

TEST(PlotCommand, AnUnknownPictureExtensionIsAUsageErrorAndNothingIsWritten) {
  TempDir dir;
  fs::create_directory(dir / "tmp");
  const Result r = tapstream(
      dir, dir / "tmp", {"plot", shipped + "lowpass-4k-48k.txt", "-o", (dir / "r.pdf").string()});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find(".svg or .png"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "r.pdf"));
  EXPECT_TRUE(empty_dir(dir / "tmp"));
}

TEST(PlotCommand, MissingGnuplotIsARuntimeErrorNamingThePackage) {
  TempDir dir;
  fs::create_directory(dir / "tmp");
  fs::create_directory(dir / "empty-path");
  const Result r = tapstream(
      dir, dir / "tmp", {"plot", shipped + "lowpass-4k-48k.txt", "-o", (dir / "r.svg").string()},
      (dir / "empty-path").string());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("gnuplot is not installed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gnuplot-nox"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "r.svg"));
  EXPECT_TRUE(empty_dir(dir / "tmp"));
}

TEST(PlotCommand, ABadCoefficientFileIsNamedAndNoPictureIsWritten) {
  TempDir dir;
  fs::create_directory(dir / "tmp");
  {
    std::ofstream bad(dir / "bad.txt");
    bad << "0.5\nnot-a-number\n";
  }
  const Result r = tapstream(dir, dir / "tmp",
                             {"plot", shipped + "lowpass-4k-48k.txt", (dir / "bad.txt").string(),
                              "-o", (dir / "r.svg").string()});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("bad.txt:2"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "r.svg"));
}

TEST(DesignPlot, DrawsWhatWasDesignedBesideTheCoefficientFile) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot is not installed (tools/install-deps.sh)";
  TempDir dir;
  fs::create_directory(dir / "tmp");
  const Result r =
      tapstream(dir, dir / "tmp",
                {"design", "bandpass", "--rate", "48000", "--cutoff", "300,3400", "--taps", "255",
                 "-o", (dir / "band.wav").string(), "--plot", (dir / "band.svg").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir / "band.wav"));
  const std::string picture = read_text(dir / "band.svg");
  EXPECT_EQ(count(picture, "<text>band.wav</text>"), 4u);
  EXPECT_GE(count(picture, "<g id=\"gnuplot_plot_"), 4u);
  EXPECT_NE(picture.find("tapstream design bandpass --rate 48000"), std::string::npos)
      << "the design's command is the picture's title";
  EXPECT_TRUE(empty_dir(dir / "tmp"));
}

TEST(DesignPlot, ABadPictureNameIsRefusedBeforeTheFilterIsWritten) {
  TempDir dir;
  fs::create_directory(dir / "tmp");
  const Result r =
      tapstream(dir, dir / "tmp",
                {"design", "lowpass", "--rate", "48000", "--cutoff", "1000", "--taps", "63", "-o",
                 (dir / "low.txt").string(), "--plot", (dir / "low.jpeg").string()});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_FALSE(fs::exists(dir / "low.txt"));
  EXPECT_FALSE(fs::exists(dir / "low.jpeg"));
}

TEST(DesignPlot, MissingGnuplotIsRefusedBeforeTheFilterIsWritten) {
  TempDir dir;
  fs::create_directory(dir / "tmp");
  fs::create_directory(dir / "empty-path");
  const Result r =
      tapstream(dir, dir / "tmp",
                {"design", "lowpass", "--rate", "48000", "--cutoff", "1000", "--taps", "63", "-o",
                 (dir / "low.txt").string(), "--plot", (dir / "low.svg").string()},
                (dir / "empty-path").string());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("gnuplot is not installed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gnuplot-nox"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "low.txt"));
  EXPECT_FALSE(fs::exists(dir / "low.svg"));
  EXPECT_TRUE(empty_dir(dir / "tmp"));
}

}  // namespace
}  // namespace tapstream

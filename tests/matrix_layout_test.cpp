// Impulse-response layouts as routing matrices: a true-stereo four-channel
// file (2 -> 2), a HeSuVi 14-channel file (8 -> 2) and a SOFA HRTF set with
// virtual sources (N -> 2). Each shipped example's matrix is compared with
// one built here by hand from the same file, read independently (libsndfile
// for the IRs, libmysofa for the SOFA set), and every kind of bad input is
// refused naming the file, the key and the problem.

#include <gtest/gtest.h>
#include <mysofa.h>
#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "daemon/config/matrix_config.hpp"
#include "daemon/config/toml_reader.hpp"
#include "process_support.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const fs::path kShipped = fs::path(TAPSTREAM_SOURCE_DIR) / "config/matrix";

// Each channel of a sound file.
std::vector<std::vector<float>> read_channels(const fs::path& file) {
  SF_INFO info{};
  SNDFILE* f = sf_open(file.c_str(), SFM_READ, &info);
  if (f == nullptr) {
    ADD_FAILURE() << "cannot read " << file;
    return {};
  }
  std::vector<float> interleaved(std::size_t(info.frames) * std::size_t(info.channels));
  sf_readf_float(f, interleaved.data(), info.frames);
  sf_close(f);
  std::vector<std::vector<float>> channels(std::size_t(info.channels));
  for (std::size_t n = 0; n < std::size_t(info.frames); ++n)
    for (std::size_t c = 0; c < channels.size(); ++c)
      channels[c].push_back(interleaved[n * channels.size() + c]);
  return channels;
}

// A matrix's paths by (input, output).
std::map<std::pair<std::size_t, std::size_t>, const MatrixPath*> by_pair(const RoutingMatrix& m) {
  std::map<std::pair<std::size_t, std::size_t>, const MatrixPath*> paths;
  for (const MatrixPath& p : m.paths()) paths[{p.input, p.output}] = &p;
  return paths;
}

struct Expected {
  std::size_t input, output;
  std::vector<float> taps;
};

void expect_paths(const RoutingMatrix& matrix, const std::vector<Expected>& expected,
                  double gain_db) {
  const auto paths = by_pair(matrix);
  ASSERT_EQ(matrix.paths().size(), expected.size());
  for (const Expected& e : expected) {
    SCOPED_TRACE("input " + std::to_string(e.input) + " -> output " + std::to_string(e.output));
    const auto it = paths.find({e.input, e.output});
    ASSERT_NE(it, paths.end()) << "missing path";
    EXPECT_EQ(it->second->taps, e.taps);
    EXPECT_EQ(it->second->gain_db, gain_db);
    EXPECT_EQ(it->second->delay_frames, 0u);
    EXPECT_FALSE(it->second->invert);
  }
}

TEST(MatrixLayout, TrueStereoFileIsLeftLeftLeftRightRightLeftRightRightAsATwoByTwoMatrix) {
  const RoutingMatrix matrix = load_matrix_file(kShipped / "true-stereo-reverb.toml", {});
  const auto ch = read_channels(kShipped / "true-stereo-room-48k.wav");
  ASSERT_EQ(ch.size(), 4u);
  EXPECT_EQ(matrix.inputs(), 2u);
  EXPECT_EQ(matrix.outputs(), 2u);
  // LL, LR, RL, RR: the first letter the input, the second the output.
  expect_paths(matrix, {{0, 0, ch[0]}, {0, 1, ch[1]}, {1, 0, ch[2]}, {1, 1, ch[3]}}, -6.0);
}

TEST(MatrixLayout, HesuviFileMapsHeSuViTrackOrderToSevenOneInputsAndTwoEars) {
  const RoutingMatrix matrix = load_matrix_file(kShipped / "hesuvi-7.1.toml", {});
  const auto ch = read_channels(kShipped / "hesuvi-synthetic-48k.wav");
  ASSERT_EQ(ch.size(), 14u);
  // HeSuVi's track order, and the WAVE/ALSA 7.1 input order.
  const std::vector<std::string> tracks = {
      "FL-left",  "FL-right", "SL-left",  "SL-right", "BL-left",  "BL-right", "FC-left",
      "FR-right", "FR-left",  "SR-right", "SR-left",  "BR-right", "BR-left",  "FC-right"};
  const std::vector<std::string> inputs = {"FL", "FR", "FC", "LFE", "BL", "BR", "SL", "SR"};
  std::vector<Expected> expected;
  for (std::size_t k = 0; k < tracks.size(); ++k) {
    const std::string speaker = tracks[k].substr(0, tracks[k].find('-'));
    const std::size_t ear = tracks[k].ends_with("left") ? 0 : 1;
    const std::size_t input =
        std::size_t(std::find(inputs.begin(), inputs.end(), speaker) - inputs.begin());
    expected.push_back({input, ear, ch[k]});
    if (speaker == "FC") expected.push_back({3, ear, ch[k]});  // the LFE takes the centre's
  }
  EXPECT_EQ(matrix.inputs(), 8u);
  EXPECT_EQ(matrix.outputs(), 2u);
  expect_paths(matrix, expected, -6.0);
}

struct MysofaDeleter {
  void operator()(MYSOFA_HRTF* h) const { mysofa_free(h); }
};

// The measurement of `file` at exactly (azimuth, elevation), found by libmysofa
// directly, and its two ears' responses.
std::pair<std::vector<float>, std::vector<float>> measured(const fs::path& file, double azimuth,
                                                           double elevation) {
  int err = 0;
  std::unique_ptr<MYSOFA_HRTF, MysofaDeleter> h(mysofa_load(file.c_str(), &err));
  if (!h) {
    ADD_FAILURE() << "libmysofa cannot read " << file << ": " << err;
    return {};
  }
  mysofa_tospherical(h.get());
  for (unsigned m = 0; m < h->M; ++m) {
    if (h->SourcePosition.values[3 * m] == float(azimuth) &&
        h->SourcePosition.values[3 * m + 1] == float(elevation)) {
      const float* ir = h->DataIR.values + std::size_t(m) * 2 * h->N;
      return {std::vector<float>(ir, ir + h->N), std::vector<float>(ir + h->N, ir + 2 * h->N)};
    }
  }
  ADD_FAILURE() << file << " has no measurement at " << azimuth << ", " << elevation;
  return {};
}

TEST(MatrixLayout, SofaSourcesTakeTheNearestMeasuredDirectionsResponsesForBothEars) {
  const RoutingMatrix matrix = load_matrix_file(kShipped / "sofa-5.0.toml", {});
  const fs::path sofa = kShipped / "tiny-hrtf-48k.sofa";
  // Sources at 30, -30, 0, 110, -110 degrees on a set measured every 30
  // degrees: 110 is nearest 120, -110 nearest 240.
  const std::vector<std::pair<double, double>> nearest = {
      {30, 0}, {330, 0}, {0, 0}, {120, 0}, {240, 0}};
  std::vector<Expected> expected;
  for (std::size_t i = 0; i < nearest.size(); ++i) {
    auto [left, right] = measured(sofa, nearest[i].first, nearest[i].second);
    expected.push_back({i, 0, std::move(left)});
    expected.push_back({i, 1, std::move(right)});
  }
  EXPECT_EQ(matrix.inputs(), 5u);
  EXPECT_EQ(matrix.outputs(), 2u);
  expect_paths(matrix, expected, -6.0);
}

TEST(MatrixLayout, SofaNearestDirectionCountsElevation) {
  const TempDir dir;
  std::ofstream(dir / "m.toml") << "inputs = 1\noutputs = 2\n[sofa]\nfile = \""
                                << (kShipped / "tiny-hrtf-48k.sofa").string()
                                << "\"\n[[sofa.source]]\ninput = 0\nazimuth = 80\nelevation = 50\n";
  MatrixFileOptions options;
  options.sample_rate = 48000;
  const RoutingMatrix matrix = load_matrix_file(dir / "m.toml", options);
  auto [left, right] = measured(kShipped / "tiny-hrtf-48k.sofa", 90, 60);
  expect_paths(matrix, {{0, 0, left}, {0, 1, right}}, 0.0);
}

TEST(MatrixLayout, SofaInterpolationWeighsTheThreeNearestByInverseAngleAndIsExactWhenMeasured) {
  const TempDir dir;
  const fs::path sofa = kShipped / "tiny-hrtf-48k.sofa";
  std::ofstream(dir / "m.toml") << "inputs = 2\noutputs = 2\n[sofa]\nfile = \"" << sofa.string()
                                << "\"\ninterpolate = true\n"
                                << "[[sofa.source]]\ninput = 0\nazimuth = 15\nelevation = 0\n"
                                << "[[sofa.source]]\ninput = 1\nazimuth = 30\nelevation = 0\n";
  const RoutingMatrix matrix = load_matrix_file(dir / "m.toml", {});
  const auto paths = by_pair(matrix);
  // (15, 0) lies 15 degrees from (0, 0) and (30, 0); the third nearest is
  // (60, 0), 45 degrees away (before (0, 45) and (0, -45), at acos(cos 45 cos 15) = 46.9).
  const std::vector<double> weights = {1 / 15.0, 1 / 15.0, 1 / 45.0};
  const double total = weights[0] + weights[1] + weights[2];
  const auto a = measured(sofa, 0, 0), b = measured(sofa, 30, 0), c = measured(sofa, 60, 0);
  for (std::size_t ear = 0; ear < 2; ++ear) {
    const auto& ra = ear == 0 ? a.first : a.second;
    const auto& rb = ear == 0 ? b.first : b.second;
    const auto& rc = ear == 0 ? c.first : c.second;
    const MatrixPath& p = *paths.at({0, ear});
    ASSERT_EQ(p.taps.size(), ra.size());
    for (std::size_t t = 0; t < ra.size(); ++t) {
      const double want = (weights[0] * ra[t] + weights[1] * rb[t] + weights[2] * rc[t]) / total;
      EXPECT_NEAR(p.taps[t], want, 1e-6) << "ear " << ear << ", tap " << t;
    }
    EXPECT_EQ(paths.at({1, ear})->taps, rb) << "a measured direction is its measurement exactly";
  }
}

struct Refusal {
  std::string toml;
  std::string culprit;  // besides the matrix file's name
  int sample_rate = 0;
};

TEST(MatrixLayout, BadLayoutsAndSofaSetsAreRefusedNamingTheFileTheKeyAndTheProblem) {
  const TempDir dir;
  const std::string ts = (kShipped / "true-stereo-room-48k.wav").string();
  const std::string hs = (kShipped / "hesuvi-synthetic-48k.wav").string();
  const std::string sofa = (kShipped / "tiny-hrtf-48k.sofa").string();
  std::ofstream(dir / "not.sofa") << "this is text, not HDF5\n";
  const std::string source = "[[sofa.source]]\ninput = 0\nazimuth = 0\nelevation = 0\n";
  const std::vector<Refusal> refusals{
      {"inputs = 2\noutputs = 2\n[dense]\nfile = \"" + hs + "\"\nlayout = \"true-stereo\"\n",
       "has 14 channels; layout \"true-stereo\" takes 4 (LL, LR, RL, RR)"},
      {"inputs = 8\noutputs = 2\n[dense]\nfile = \"" + ts + "\"\nlayout = \"hesuvi\"\n",
       "has 4 channels; layout \"hesuvi\" takes 14 (FL-left, FL-right"},
      {"inputs = 2\noutputs = 2\n[dense]\nfile = \"" + hs + "\"\nlayout = \"hesuvi\"\n",
       "dense.layout = 'hesuvi': layout \"hesuvi\" has 8 inputs and 2 outputs; the file says "
       "inputs = 2, outputs = 2"},
      {"inputs = 2\noutputs = 2\n[dense]\nfile = \"" + ts + "\"\nlayout = \"quad\"\n",
       "dense.layout = 'quad': unknown layout \"quad\" (known: \"dense\", \"true-stereo\", "
       "\"hesuvi\""},
      {"inputs = 1\noutputs = 2\n[sofa]\nfile = \"missing.sofa\"\n" + source, "missing.sofa"},
      {"inputs = 1\noutputs = 2\n[sofa]\nfile = \"not.sofa\"\n" + source,
       "sofa.file: " + (dir / "not.sofa").string() + ": cannot be read as a SOFA HRTF set"},
      {"inputs = 1\noutputs = 2\n[sofa]\nfile = \"" + sofa + "\"\n", "needs [[sofa.source]]"},
      {"inputs = 1\noutputs = 2\n[sofa]\nfile = \"" + sofa + "\"\n" + source,
       "is measured at 48000 Hz and the signal is at 44100 Hz", 44100},
      {"inputs = 1\noutputs = 3\n[sofa]\nfile = \"" + sofa + "\"\n" + source,
       "the file says outputs = 3"},
      {"inputs = 1\noutputs = 2\n[sofa]\nfile = \"" + sofa + "\"\n" + source + source,
       "sofa.source[1]: input 0 already has a source (sofa.source[0])"},
      {"inputs = 1\noutputs = 2\n[sofa]\nfile = \"" + sofa +
           "\"\n[[sofa.source]]\ninput = 0\nazimuth = 0\n",
       "sofa.source[0]: needs input, azimuth and elevation"},
      {"inputs = 1\noutputs = 2\n[sofa]\nfile = \"" + sofa +
           "\"\n[[sofa.source]]\ninput = 0\nazimuth = 0\nelevation = 95\n",
       "sofa.source[0].elevation = 95"},
  };
  for (std::size_t i = 0; i < refusals.size(); ++i) {
    const fs::path toml = dir / ("bad" + std::to_string(i) + ".toml");
    std::ofstream(toml) << refusals[i].toml;
    MatrixFileOptions options;
    options.sample_rate = refusals[i].sample_rate;
    try {
      load_matrix_file(toml, options);
      ADD_FAILURE() << "case " << i << " accepted; expected: " << refusals[i].culprit;
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(toml.string()), std::string::npos) << "case " << i << ": " << what;
      EXPECT_NE(what.find(refusals[i].culprit), std::string::npos) << "case " << i << ": " << what;
    }
  }
}

}  // namespace
}  // namespace tapstream

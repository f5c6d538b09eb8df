// `tapstream process IN OUT --matrix FILE.toml` end to end, through the real
// binary: the shipped examples and a random mixed-length matrix (gains,
// delays, inverted paths, absent pairs, a silent output) against a float64
// sum of the paths, at the default block and a small odd one; batches; and
// bad matrices and mismatched inputs refused, naming the culprit, with nothing
// written. The CUDA runs skip where there is no GPU.

#include <gtest/gtest.h>
#include <sndfile.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "daemon/config/matrix_config.hpp"
#include "matrix_support.hpp"
#include "process_support.hpp"
#include "reference.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::make_path;
using testing::random_signal;
using testing::read_text;
using testing::reference_output;
using testing::relative_error;
using testing::TempDir;

constexpr int kFloatWav = SF_FORMAT_WAV | SF_FORMAT_FLOAT;

// Channel-major samples written as an interleaved float WAV.
void write_wav(const fs::path& file, const std::vector<std::vector<float>>& channels, int rate) {
  SF_INFO info{};
  info.channels = int(channels.size());
  info.samplerate = rate;
  info.format = kFloatWav;
  SNDFILE* f = sf_open(file.c_str(), SFM_WRITE, &info);
  ASSERT_NE(f, nullptr) << file << ": " << sf_strerror(nullptr);
  std::vector<float> interleaved(channels.size() * channels[0].size());
  for (std::size_t c = 0; c < channels.size(); ++c)
    for (std::size_t n = 0; n < channels[c].size(); ++n)
      interleaved[n * channels.size() + c] = channels[c][n];
  const auto frames = sf_count_t(channels[0].size());
  EXPECT_EQ(sf_writef_float(f, interleaved.data(), frames), frames);
  sf_close(f);
}

// Each channel of a sound file (empty if it cannot be read).
std::vector<std::vector<float>> read_wav(const fs::path& file) {
  SF_INFO info{};
  SNDFILE* f = sf_open(file.c_str(), SFM_READ, &info);
  if (f == nullptr) {
    ADD_FAILURE() << "cannot read " << file << ": " << sf_strerror(nullptr);
    return {};
  }
  std::vector<float> interleaved(std::size_t(info.frames) * std::size_t(info.channels));
  EXPECT_EQ(sf_readf_float(f, interleaved.data(), info.frames), info.frames);
  sf_close(f);
  std::vector<std::vector<float>> channels(std::size_t(info.channels),
                                           std::vector<float>(std::size_t(info.frames)));
  for (std::size_t n = 0; n < std::size_t(info.frames); ++n)
    for (std::size_t c = 0; c < channels.size(); ++c)
      channels[c][n] = interleaved[n * channels.size() + c];
  return channels;
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct RunResult {
  int exit_code = -1;
  std::string err;
};

RunResult tapstream(const TempDir& dir, const std::vector<std::string>& args) {
  std::string command = quote(TAPSTREAM_BINARY);
  for (const auto& a : args) command += ' ' + quote(a);
  const fs::path err_file = dir / "stderr.txt";
  command += " </dev/null >/dev/null 2>" + quote(err_file.string());
  const int status = std::system(command.c_str());
  RunResult run{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                read_text(err_file)};
  fs::remove(err_file);
  return run;
}

std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

bool gpu_present() {
  return fs::exists("/dev/nvidia0") || fs::exists("/dev/dxg");
}

std::vector<std::string> backends() {
  return gpu_present() ? std::vector<std::string>{"cpu", "cuda"} : std::vector<std::string>{"cpu"};
}

// Every output of `got` against the float64 sum of the matrix's paths over
// `inputs` zero-padded to `got`'s length.
void expect_matches_matrix(const std::vector<std::vector<float>>& got, const RoutingMatrix& matrix,
                           std::vector<std::vector<float>> inputs, const std::string& what) {
  ASSERT_EQ(got.size(), matrix.outputs()) << what;
  for (auto& x : inputs) x.resize(got[0].size(), 0.0f);
  for (std::size_t o = 0; o < matrix.outputs(); ++o) {
    const std::vector<double> want = reference_output(matrix, inputs, o);
    bool silent = true;
    for (double w : want) silent = silent && w == 0.0;
    if (silent) {
      for (float y : got[o]) ASSERT_EQ(y, 0.0f) << what << ": output " << o << " must be silent";
    } else {
      EXPECT_LE(relative_error(got[o], want), 1e-5) << what << ": output " << o;
    }
  }
}

std::vector<std::vector<float>> random_inputs(std::size_t channels, std::size_t frames,
                                              std::uint64_t seed) {
  std::vector<std::vector<float>> inputs;
  for (std::size_t c = 0; c < channels; ++c) inputs.push_back(random_signal(frames, seed + c));
  return inputs;
}

TEST(ProcessMatrix, ShippedExamplesMatchTheSumOfTheirPathsInFloat64) {
  const TempDir dir;
  for (const char* name : {"crossover-2way.toml", "crossfeed-2x2.toml", "true-stereo-reverb.toml",
                           "hesuvi-7.1.toml", "sofa-5.0.toml"}) {
    const fs::path file = fs::path(TAPSTREAM_SOURCE_DIR) / "config/matrix" / name;
    const RoutingMatrix matrix = load_matrix_file(file, {});
    const auto inputs = random_inputs(matrix.inputs(), 20000, 11);
    write_wav(dir / "in.wav", inputs, 48000);
    for (const std::string& backend : backends()) {
      const RunResult run =
          tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "out.wav").string(),
                          "--matrix", file.string(), "--tail", "--backend", backend});
      ASSERT_EQ(run.exit_code, 0) << run.err;
      const auto got = read_wav(dir / "out.wav");
      ASSERT_EQ(got.size(), matrix.outputs());
      EXPECT_EQ(got[0].size(), 20000 + matrix.max_taps() - 1) << "the tail is the longest path's";
      expect_matches_matrix(got, matrix, inputs, std::string(name) + " on " + backend);
    }
  }
}

// A 3 -> 5 matrix of 1 to 9001 taps written as text files and a TOML file.
struct MatrixOnDisk {
  RoutingMatrix matrix;
  fs::path toml;
};

MatrixOnDisk write_mixed_matrix(const TempDir& dir, std::uint64_t seed) {
  std::vector<MatrixPath> paths;
  paths.push_back(make_path(0, 0, random_signal(1, seed + 1), -3.0));
  paths.push_back(make_path(1, 0, random_signal(4097, seed + 2), 0.0, 12, true));
  paths.push_back(make_path(2, 1, random_signal(9001, seed + 3), 6.0));
  paths.push_back(make_path(0, 2, random_signal(300, seed + 4), -20.0, 1000));
  paths.push_back(make_path(2, 2, random_signal(17, seed + 5), 0.0, 3, true));
  paths.push_back(make_path(1, 3, random_signal(2048, seed + 6)));
  RoutingMatrix matrix = RoutingMatrix::make(3, 5, paths);
  const fs::path toml = dir / "mixed.toml";
  std::ofstream out(toml);
  out << "inputs = 3\noutputs = 5\n";
  for (std::size_t p = 0; p < paths.size(); ++p) {
    const std::string taps = "path" + std::to_string(p) + ".txt";
    std::ofstream t(dir / taps);
    char line[64];
    for (float x : paths[p].taps) {
      std::snprintf(line, sizeof line, "%.9g\n", double(x));  // float round trip
      t << line;
    }
    out << "[[path]]\ninput = " << paths[p].input << "\noutput = " << paths[p].output
        << "\nfile = \"" << taps << "\"\ngain_db = " << paths[p].gain_db
        << "\ndelay_frames = " << paths[p].delay_frames
        << "\ninvert = " << (paths[p].invert ? "true" : "false") << "\n";
  }
  return {std::move(matrix), toml};
}

TEST(ProcessMatrix, RandomMixedLengthMatrixIsExactThroughTheWholeCommand) {
  const std::uint64_t seed = 20261123;
  std::cout << "seed " << seed << "\n";
  const TempDir dir;
  const MatrixOnDisk m = write_mixed_matrix(dir, seed);
  const auto inputs = random_inputs(3, 15000, seed + 100);
  write_wav(dir / "in.wav", inputs, 48000);
  for (const std::string& backend : backends()) {
    for (const std::string block : {"", "777"}) {
      std::vector<std::string> args{"process",
                                    (dir / "in.wav").string(),
                                    (dir / "out.wav").string(),
                                    "--matrix",
                                    m.toml.string(),
                                    "--tail",
                                    "--backend",
                                    backend};
      if (!block.empty()) args.insert(args.end(), {"--block", block});
      const RunResult run = tapstream(dir, args);
      ASSERT_EQ(run.exit_code, 0) << run.err;
      const std::string what = backend + (block.empty() ? "" : ", block " + block);
      expect_matches_matrix(read_wav(dir / "out.wav"), m.matrix, inputs, what);
      EXPECT_NE(run.err.find("3 -> 5 channels"), std::string::npos) << run.err;
    }
  }
}

TEST(ProcessMatrix, GainAppliesToEveryPath) {
  const TempDir dir;
  const MatrixOnDisk m = write_mixed_matrix(dir, 5);
  const auto inputs = random_inputs(3, 3000, 77);
  write_wav(dir / "in.wav", inputs, 48000);
  const RunResult run =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "out.wav").string(), "--matrix",
                      m.toml.string(), "--gain", "-6", "--backend", "cpu"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::vector<MatrixPath> paths = m.matrix.paths();
  for (MatrixPath& p : paths) p.gain_db -= 6.0;
  expect_matches_matrix(read_wav(dir / "out.wav"), RoutingMatrix::make(3, 5, paths), inputs,
                        "--gain -6");
}

TEST(ProcessMatrix, BatchWritesOutputsChannelsAndSkipsFilesOfAnotherChannelCount) {
  const TempDir dir;
  const MatrixOnDisk m = write_mixed_matrix(dir, 9);
  fs::create_directory(dir / "in");
  const auto inputs = random_inputs(3, 4000, 3);
  write_wav(dir / "in" / "a.wav", inputs, 48000);
  write_wav(dir / "in" / "b.wav", random_inputs(2, 1000, 4), 48000);
  const RunResult run =
      tapstream(dir, {"process", (dir / "in").string(), "--out-dir", (dir / "out").string(),
                      "--matrix", m.toml.string(), "--backend", "cpu"});
  EXPECT_EQ(run.exit_code, 3) << run.err;
  EXPECT_NE(run.err.find("b.wav"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("has 2 channels; the matrix " + m.toml.string() + " has 3 inputs"),
            std::string::npos)
      << run.err;
  EXPECT_EQ(entries(dir / "out"), std::set<std::string>{"a.wav"});
  expect_matches_matrix(read_wav(dir / "out" / "a.wav"), m.matrix, inputs, "batch");
}

struct Refusal {
  std::string toml;     // the matrix file's text
  std::string culprit;  // what the message must name
  int input_channels = 2;
};

TEST(ProcessMatrix, BadMatricesAndMismatchedInputsAreRefusedAndNothingIsWritten) {
  const TempDir dir;
  {
    std::ofstream t(dir / "f.txt");
    t << "1\n0.5\n";
  }
  const std::string head = "inputs = 2\noutputs = 2\n";
  const std::string good = "[[path]]\ninput = 0\noutput = 0\nfile = \"f.txt\"\n";
  const std::vector<Refusal> refusals{
      {head + good, "in.wav has 3 channels; the matrix", 3},
      {head + "[[path]]\ninput = 0\noutput = 1\nfile = \"missing.txt\"\n", "missing.txt"},
      {head + good + good, "path 1 (input 0 -> output 0)"},
      {head + "[[path]]\ninput = 2\noutput = 0\nfile = \"f.txt\"\n", "input"},
      {head + "[[path]]\ninput = 0\noutput = 0\nfile = \"f.txt\"\nchannel = 3\n", "channel 3"},
      {head + "[[path]]\ninput = 0\noutput = 0\nfile = \"f.txt\"\ndelay_frames = 4194305\n",
       "delay_frames"},
      {head + "[[path]]\ninput = 0\noutput = 0\nfile = \"f.txt\"\ncolour = 1\n", "colour"},
  };
  for (std::size_t i = 0; i < refusals.size(); ++i) {
    const Refusal& r = refusals[i];
    const fs::path toml = dir / ("bad" + std::to_string(i) + ".toml");
    std::ofstream(toml) << r.toml;
    write_wav(dir / "in.wav", random_inputs(std::size_t(r.input_channels), 100, i), 48000);
    const auto before = entries(dir.path());
    const RunResult run =
        tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "out.wav").string(),
                        "--matrix", toml.string(), "--backend", "cpu", "--max-taps", "4096"});
    EXPECT_EQ(run.exit_code, 1) << "case " << i << ": " << run.err;
    EXPECT_NE(run.err.find(toml.filename().string()), std::string::npos)
        << "case " << i << " must name the matrix file: " << run.err;
    EXPECT_NE(run.err.find(r.culprit), std::string::npos)
        << "case " << i << " must name '" << r.culprit << "': " << run.err;
    EXPECT_EQ(entries(dir.path()), before) << "case " << i << " wrote something";
  }
  // The batch refuses a bad matrix before it makes its output directory.
  const RunResult batch =
      tapstream(dir, {"process", (dir / "in.wav").string(), "--out-dir", (dir / "out").string(),
                      "--matrix", (dir / "bad1.toml").string()});
  EXPECT_EQ(batch.exit_code, 1) << batch.err;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST(ProcessMatrix, TapsAndMatrixTogetherOrNeitherIsAUsageError) {
  const TempDir dir;
  write_wav(dir / "in.wav", random_inputs(2, 100, 1), 48000);
  std::ofstream(dir / "f.txt") << "1\n";
  std::ofstream(dir / "m.toml") << "inputs = 2\noutputs = 1\n[[path]]\ninput = 0\noutput = 0\n"
                                   "file = \"f.txt\"\n";
  const std::string in = (dir / "in.wav").string(), out = (dir / "out.wav").string();
  EXPECT_EQ(tapstream(dir, {"process", in, out}).exit_code, 2);
  EXPECT_EQ(tapstream(dir, {"process", in, out, "--taps", (dir / "f.txt").string(), "--matrix",
                            (dir / "m.toml").string()})
                .exit_code,
            2);
  EXPECT_EQ(tapstream(dir, {"process", in, out, "--matrix", (dir / "m.toml").string(),
                            "--algorithm", "direct"})
                .exit_code,
            2);
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace tapstream

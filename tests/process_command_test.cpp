// `tapstream process` and `tapstream design` end to end, through the real
// binary: generated multichannel audio and a real recording against an
// independent float64 reference convolution; integer formats; the tail; the
// gain; and the promise that a run that fails (or would overwrite its input)
// leaves no output and no temporary file, exits non-zero and names the
// culprit. Test files are written and read with libsndfile directly, not
// through tapstream's own sound-file code.

#include <gtest/gtest.h>
#include <sndfile.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/process_support.hpp"
#include "tests/reference.hpp"
#include "tests/wait_for.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::random_signal;
using testing::read_text;
using testing::reference_convolution;
using testing::relative_error;
using testing::TempDir;

struct Sound {
  SF_INFO info{};
  std::vector<float> samples;  // interleaved
  std::size_t frames() const { return samples.size() / std::size_t(info.channels); }
  std::vector<float> channel(std::size_t c) const {
    std::vector<float> out(frames());
    for (std::size_t f = 0; f < out.size(); ++f) out[f] = samples[f * info.channels + c];
    return out;
  }
};

void write_sound(const fs::path& file, const std::vector<float>& samples, int channels, int rate,
                 int format) {
  SF_INFO info{};
  info.channels = channels;
  info.samplerate = rate;
  info.format = format;
  SNDFILE* f = sf_open(file.c_str(), SFM_WRITE, &info);
  ASSERT_NE(f, nullptr) << file << ": " << sf_strerror(nullptr);
  const sf_count_t frames = sf_count_t(samples.size() / std::size_t(channels));
  EXPECT_EQ(sf_writef_float(f, samples.data(), frames), frames);
  sf_close(f);
}

Sound read_sound(const fs::path& file) {
  Sound sound;
  SNDFILE* f = sf_open(file.c_str(), SFM_READ, &sound.info);
  if (f == nullptr) {
    ADD_FAILURE() << "cannot read " << file << ": " << sf_strerror(nullptr);
    return sound;
  }
  sound.samples.resize(std::size_t(sound.info.frames) * std::size_t(sound.info.channels));
  EXPECT_EQ(sf_readf_float(f, sound.samples.data(), sound.info.frames), sound.info.frames);
  sf_close(f);
  return sound;
}

void write_text_taps(const fs::path& file, const std::vector<float>& taps) {
  std::ofstream out(file);
  out << "# test filter\n";
  char line[64];
  for (float t : taps) {
    std::snprintf(line, sizeof line, "%.9g\n", double(t));
    out << line;
  }
}

std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

struct RunResult {
  int exit_code = -1;
  std::string err;  // everything the binary wrote to stderr
};

// Runs the tapstream binary with `args` (each quoted), capturing stderr.
RunResult tapstream(const TempDir& dir, const std::vector<std::string>& args) {
  std::string command = quote(TAPSTREAM_BINARY);
  for (const auto& a : args) {
    command += ' ';
    command += quote(a);
  }
  const fs::path err_file = dir.path().parent_path() / (dir.path().filename().string() + ".err");
  command += " </dev/null >/dev/null 2>";
  command += quote(err_file.string());
  const int status = std::system(command.c_str());
  RunResult run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.err = read_text(err_file);
  fs::remove(err_file);
  return run;
}

// Relative error of every channel of `got` against the float64 reference of
// `input` (zero-padded to `got`'s length) filtered by taps[c] (or taps[0]).
void expect_matches_reference(const Sound& got, const Sound& input,
                              const std::vector<std::vector<float>>& taps, double gain,
                              double bound) {
  ASSERT_EQ(got.info.channels, input.info.channels);
  for (int c = 0; c < input.info.channels; ++c) {
    std::vector<float> x = input.channel(std::size_t(c));
    x.resize(got.frames(), 0.0f);
    auto want = reference_convolution(x, taps[taps.size() == 1 ? 0 : std::size_t(c)]);
    for (auto& w : want) w *= gain;
    EXPECT_LE(relative_error(got.channel(std::size_t(c)), want), bound) << "channel " << c;
  }
}

fs::path real_recording() {
  const fs::path shipped = fs::path(TAPSTREAM_SOURCE_DIR) / "config/examples/Front_Center.wav";
  if (fs::exists(shipped)) return shipped;
  return "/usr/share/sounds/alsa/Front_Center.wav";
}

constexpr int kFloatWav = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
constexpr int kPcm16Wav = SF_FORMAT_WAV | SF_FORMAT_PCM_16;

std::vector<float> scaled(std::vector<float> v, float factor) {
  for (auto& x : v) x *= factor;
  return v;
}

TEST(ProcessCommand, FiltersGeneratedMultichannelAudioLikeTheReference) {
  TempDir dir;
  const std::uint64_t seed = 1001;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const int channels = 3, rate = 32000;
  write_sound(dir / "in.wav", scaled(random_signal(12000 * channels, seed), 0.5f), channels, rate,
              kFloatWav);
  const std::vector<float> taps = scaled(random_signal(257, seed + 1), 0.05f);
  write_text_taps(dir / "taps.txt", taps);

  const RunResult run =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "out.wav").string(), "--taps",
                      (dir / "taps.txt").string(), "--block", "1000", "--backend", "cpu"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Sound in = read_sound(dir / "in.wav");
  const Sound out = read_sound(dir / "out.wav");
  EXPECT_EQ(out.info.samplerate, rate);
  EXPECT_EQ(out.info.format, kFloatWav);
  EXPECT_EQ(out.frames(), in.frames());
  expect_matches_reference(out, in, {taps}, 1.0, 1e-5);
  EXPECT_EQ(entries(dir.path()), (std::set<std::string>{"in.wav", "out.wav", "taps.txt"}));
}

TEST(ProcessCommand, AppliesOneImpulseResponseChannelPerAudioChannel) {
  TempDir dir;
  const std::uint64_t seed = 1002;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const int rate = 48000;
  write_sound(dir / "in.wav", scaled(random_signal(9000 * 2, seed), 0.5f), 2, rate, kFloatWav);
  // A stereo impulse response: a short filter left, a long one (FFT-sized) right.
  const std::vector<float> left = scaled(random_signal(40, seed + 1), 0.1f);
  std::vector<float> right = scaled(random_signal(3000, seed + 2), 0.02f);
  std::vector<float> ir(2 * right.size(), 0.0f);
  for (std::size_t i = 0; i < right.size(); ++i) {
    ir[2 * i] = i < left.size() ? left[i] : 0.0f;
    ir[2 * i + 1] = right[i];
  }
  write_sound(dir / "ir.wav", ir, 2, rate, kFloatWav);
  std::vector<float> left_padded = left;
  left_padded.resize(right.size(), 0.0f);

  const RunResult run =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "out.wav").string(), "--taps",
                      (dir / "ir.wav").string(), "--block", "777"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  expect_matches_reference(read_sound(dir / "out.wav"), read_sound(dir / "in.wav"),
                           {left_padded, right}, 1.0, 1e-5);
}

TEST(ProcessCommand, FiltersARealRecordingLikeTheReference) {
  TempDir dir;
  const fs::path recording = real_recording();
  std::printf("recording %s\n", recording.c_str());
  const std::uint64_t seed = 1003;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const std::vector<float> taps = scaled(random_signal(1024, seed), 0.03f);
  write_text_taps(dir / "taps.txt", taps);

  const RunResult run =
      tapstream(dir, {"process", recording.string(), (dir / "out.wav").string(), "--taps",
                      (dir / "taps.txt").string(), "--format", "float"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Sound in = read_sound(recording);
  const Sound out = read_sound(dir / "out.wav");
  EXPECT_EQ(out.info.format, kFloatWav);
  EXPECT_EQ(out.info.samplerate, in.info.samplerate);
  EXPECT_EQ(out.frames(), in.frames());
  expect_matches_reference(out, in, {taps}, 1.0, 1e-5);
}

// Integer output against the float64 reference: every sample within two
// quantisation steps (libsndfile writes with 2^(b-1) - 1 and reads with
// 2^(b-1)) plus the engine's own float error.
void expect_within_quantisation(const Sound& got, const Sound& input,
                                const std::vector<float>& taps, int bits) {
  const double step = std::ldexp(1.0, -(bits - 1));
  for (int c = 0; c < input.info.channels; ++c) {
    const auto want = reference_convolution(input.channel(std::size_t(c)), taps);
    const auto have = got.channel(std::size_t(c));
    ASSERT_EQ(have.size(), want.size());
    double peak = 0.0, worst = 0.0;
    for (double w : want) peak = std::max(peak, std::abs(w));
    for (std::size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::abs(double(have[i]) - want[i]));
    }
    EXPECT_LE(worst, 2.0 * step + 1e-5 * peak) << bits << "-bit, channel " << c;
    EXPECT_GT(peak, 0.1);  // a real signal, not silence
  }
}

TEST(ProcessCommand, IntegerFormatsRoundTripWithinQuantisation) {
  TempDir dir;
  const std::uint64_t seed = 1004;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  write_sound(dir / "in.wav", scaled(random_signal(8000 * 2, seed), 0.9f), 2, 44100, kFloatWav);
  // Taps whose absolute sum is 1 keep every output sample inside [-0.9, 0.9].
  std::vector<float> taps = random_signal(100, seed + 1);
  double sum = 0.0;
  for (float t : taps) sum += std::abs(t);
  taps = scaled(taps, float(1.0 / (sum * 1.0001)));
  write_text_taps(dir / "taps.txt", taps);
  const Sound in = read_sound(dir / "in.wav");

  const struct {
    const char* name;
    int subtype;
    int bits;
  } formats[] = {{"pcm16", SF_FORMAT_PCM_16, 16},
                 {"pcm24", SF_FORMAT_PCM_24, 24},
                 {"pcm32", SF_FORMAT_PCM_32, 32}};
  for (const auto& format : formats) {
    SCOPED_TRACE(format.name);
    const fs::path out_file = dir / (std::string(format.name) + ".wav");
    const RunResult run =
        tapstream(dir, {"process", (dir / "in.wav").string(), out_file.string(), "--taps",
                        (dir / "taps.txt").string(), "--format", format.name});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(run.err.find("clipped"), std::string::npos) << run.err;
    const Sound out = read_sound(out_file);
    EXPECT_EQ(out.info.format, SF_FORMAT_WAV | format.subtype);
    expect_within_quantisation(out, in, taps, format.bits);
  }
}

TEST(ProcessCommand, WritesTheInputsOwnFormatUnlessToldOtherwise) {
  TempDir dir;
  const std::uint64_t seed = 1005;
  write_sound(dir / "in.wav", scaled(random_signal(5000, seed), 0.5f), 1, 22050, kPcm16Wav);
  const std::vector<float> taps = scaled(random_signal(30, seed + 1), 0.03f);
  write_text_taps(dir / "taps.txt", taps);
  const RunResult run =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "out.wav").string(), "--taps",
                      (dir / "taps.txt").string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Sound out = read_sound(dir / "out.wav");
  EXPECT_EQ(out.info.format, kPcm16Wav);
  EXPECT_EQ(out.info.samplerate, 22050);
  expect_within_quantisation(out, read_sound(dir / "in.wav"), taps, 16);
}

TEST(ProcessCommand, TailAddsTheDecayOfTheLongestFilter) {
  TempDir dir;
  const std::uint64_t seed = 1006;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const std::size_t frames = 1000, tap_count = 300;
  write_sound(dir / "in.wav", scaled(random_signal(frames * 2, seed), 0.5f), 2, 48000, kFloatWav);
  const std::vector<float> taps = scaled(random_signal(tap_count, seed + 1), 0.05f);
  write_text_taps(dir / "taps.txt", taps);
  const Sound in = read_sound(dir / "in.wav");

  const RunResult with_tail =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "tail.wav").string(), "--taps",
                      (dir / "taps.txt").string(), "--tail", "--block", "128"});
  ASSERT_EQ(with_tail.exit_code, 0) << with_tail.err;
  const Sound tail = read_sound(dir / "tail.wav");
  EXPECT_EQ(tail.frames(), frames + tap_count - 1);
  expect_matches_reference(tail, in, {taps}, 1.0, 1e-5);
  // The very last frame is the last tap times the last input sample.
  for (std::size_t c = 0; c < 2; ++c) {
    EXPECT_NEAR(tail.channel(c).back(), taps.back() * in.channel(c).back(), 1e-7);
  }

  const RunResult without_tail =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "plain.wav").string(), "--taps",
                      (dir / "taps.txt").string(), "--block", "128"});
  ASSERT_EQ(without_tail.exit_code, 0) << without_tail.err;
  EXPECT_EQ(read_sound(dir / "plain.wav").frames(), frames);
}

TEST(ProcessCommand, GainScalesTheOutputByItsDecibels) {
  TempDir dir;
  const std::uint64_t seed = 1007;
  write_sound(dir / "in.wav", scaled(random_signal(4000 * 2, seed), 0.5f), 2, 48000, kFloatWav);
  const std::vector<float> taps = scaled(random_signal(64, seed + 1), 0.05f);
  write_text_taps(dir / "taps.txt", taps);
  const Sound in = read_sound(dir / "in.wav");
  for (const double db : {-6.5, 12.0}) {
    SCOPED_TRACE(db);
    const std::string name = "gain" + std::to_string(int(db)) + ".wav";
    const RunResult run =
        tapstream(dir, {"process", (dir / "in.wav").string(), (dir / name).string(), "--taps",
                        (dir / "taps.txt").string(), "--gain=" + std::to_string(db)});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    expect_matches_reference(read_sound(dir / name), in, {taps}, std::pow(10.0, db / 20.0), 1e-5);
  }
}

TEST(ProcessCommand, TakesTheFilterForTheInputsRateAndResamplesTheNearestWhereThereIsNone) {
  TempDir dir;
  const std::uint64_t seed = 2024;
  const std::vector<float> taps48 = scaled(random_signal(64, seed), 0.05f);
  write_text_taps(dir / "taps_48000.txt", taps48);
  write_text_taps(dir / "taps_44100.txt", scaled(random_signal(64, seed + 1), 0.05f));
  const std::string pattern = (dir / "taps_$samplerate$.txt").string();
  write_sound(dir / "in48.wav", scaled(random_signal(4000 * 2, seed + 2), 0.5f), 2, 48000,
              kFloatWav);
  const RunResult exact = tapstream(dir, {"process", (dir / "in48.wav").string(),
                                          (dir / "out48.wav").string(), "--taps", pattern});
  ASSERT_EQ(exact.exit_code, 0) << exact.err;
  expect_matches_reference(read_sound(dir / "out48.wav"), read_sound(dir / "in48.wav"), {taps48},
                           1.0, 1e-5);

  // 96000 Hz has no file: 48000 is the nearest (by ratio), resampled, and said.
  write_sound(dir / "in96.wav", scaled(random_signal(4000 * 2, seed + 3), 0.5f), 2, 96000,
              kFloatWav);
  const RunResult nearest = tapstream(dir, {"process", (dir / "in96.wav").string(),
                                            (dir / "out96.wav").string(), "--taps", pattern});
  ASSERT_EQ(nearest.exit_code, 0) << nearest.err;
  EXPECT_NE(nearest.err.find("taps_48000.txt: resampling the filter from 48000 Hz to 96000 Hz"),
            std::string::npos)
      << nearest.err;
  EXPECT_EQ(read_sound(dir / "out96.wav").info.samplerate, 96000);

  // --no-resample refuses, naming the file it looked for; nothing is written.
  const RunResult refused =
      tapstream(dir, {"process", (dir / "in96.wav").string(), (dir / "refused.wav").string(),
                      "--taps", pattern, "--no-resample"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find((dir / "taps_96000.txt").string() + " is missing"), std::string::npos)
      << refused.err;
  EXPECT_FALSE(fs::exists(dir / "refused.wav"));
}

TEST(ProcessCommand, RefusesToWriteOverItsInputHoweverItIsSpelled) {
  TempDir dir;
  write_sound(dir / "in.wav", scaled(random_signal(1000, 8), 0.5f), 1, 48000, kFloatWav);
  write_text_taps(dir / "taps.txt", {0.5f, 0.25f});
  fs::create_hard_link(dir / "in.wav", dir / "link.wav");
  fs::create_directory(dir / "sub");
  const std::string before = read_text(dir / "in.wav");
  const auto listing = entries(dir.path());

  for (const fs::path& out :
       {dir / "in.wav", dir / "sub/../in.wav", dir / "./in.wav", dir / "link.wav"}) {
    SCOPED_TRACE(out.string());
    const RunResult run = tapstream(dir, {"process", (dir / "in.wav").string(), out.string(),
                                          "--taps", (dir / "taps.txt").string()});
    EXPECT_NE(run.exit_code, 0);
    EXPECT_NE(run.err.find("refusing to overwrite"), std::string::npos) << run.err;
    EXPECT_NE(run.err.find(out.string()), std::string::npos) << run.err;
    EXPECT_EQ(read_text(dir / "in.wav"), before);
    EXPECT_EQ(entries(dir.path()), listing);
  }
}

struct FailingCase {
  std::string what;
  std::vector<std::string> extra_args;  // after IN OUT
  std::string culprit;                  // must appear in stderr
};

TEST(ProcessCommand, AFailingRunLeavesNoOutputNoTemporaryFileAndNamesTheCulprit) {
  TempDir dir;
  write_sound(dir / "in.wav", scaled(random_signal(2000 * 2, 9), 0.5f), 2, 48000, kFloatWav);
  write_text_taps(dir / "taps.txt", {0.5f, 0.25f, 0.125f});
  {
    std::ofstream(dir / "unparsable_taps.txt") << "0.5\n0.25\nabc\n";
    std::ofstream(dir / "nan_taps.txt") << "0.5\nnan\n";
    std::ofstream(dir / "empty_taps.txt") << "# nothing here\n";
    std::ofstream(dir / "not_sound.wav") << "this is not a sound file\n";
    std::ofstream(dir / "a_file") << "a plain file, not a directory\n";
  }
  write_sound(dir / "three_channel_ir.wav", random_signal(3 * 10, 10), 3, 48000, kFloatWav);
  write_sound(dir / "ir_44100.wav", random_signal(10, 11), 1, 44100, kFloatWav);
  fs::create_directory(dir / "out_is_a_dir");
  const std::string taps = (dir / "taps.txt").string();

  const std::vector<FailingCase> cases = {
      {"unparsable taps",
       {"--taps", (dir / "unparsable_taps.txt").string()},
       "unparsable_taps.txt"},
      {"NaN tap", {"--taps", (dir / "nan_taps.txt").string()}, "nan_taps.txt"},
      {"no taps", {"--taps", (dir / "empty_taps.txt").string()}, "empty_taps.txt"},
      {"missing taps", {"--taps", (dir / "missing_taps.txt").string()}, "missing_taps.txt"},
      {"too many taps", {"--taps", taps, "--max-taps", "2"}, "taps.txt"},
      {"IR channel count",
       {"--taps", (dir / "three_channel_ir.wav").string()},
       "three_channel_ir.wav"},
      {"IR sample rate",
       {"--taps", (dir / "ir_44100.wav").string(), "--no-resample"},
       "ir_44100.wav"},
      {"block 0", {"--taps", taps, "--block", "0"}, "--block"},
      {"block too large", {"--taps", taps, "--block", "1048577"}, "--block"},
      {"block not a number", {"--taps", taps, "--block", "many"}, "--block"},
      {"gain NaN", {"--taps", taps, "--gain", "nan"}, "--gain"},
      {"gain infinite", {"--taps", taps, "--gain", "inf"}, "--gain"},
      {"gain not a number", {"--taps", taps, "--gain", "loud"}, "--gain"},
      {"unknown format", {"--taps", taps, "--format", "pcm8"}, "pcm8"},
      {"unknown backend", {"--taps", taps, "--backend", "gpu"}, "gpu"},
      {"unknown algorithm", {"--taps", taps, "--algorithm", "slow"}, "slow"},
      {"no taps option", {}, "--taps"},
      {"unknown option", {"--taps", taps, "--frobnicate"}, "--frobnicate"},
  };
  const auto listing = entries(dir.path());
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<std::string> args = {"process", (dir / "in.wav").string(),
                                     (dir / "out.wav").string()};
    args.insert(args.end(), c.extra_args.begin(), c.extra_args.end());
    const RunResult run = tapstream(dir, args);
    EXPECT_NE(run.exit_code, 0);
    EXPECT_NE(run.err.find(c.culprit), std::string::npos) << "stderr: " << run.err;
    EXPECT_EQ(entries(dir.path()), listing) << "stderr: " << run.err;
  }

  // Bad inputs and outputs.
  const std::vector<std::pair<std::vector<std::string>, std::string>> paths = {
      {{(dir / "missing.wav").string(), (dir / "out.wav").string()}, "missing.wav"},
      {{(dir / "not_sound.wav").string(), (dir / "out.wav").string()}, "not_sound.wav"},
      {{(dir / "in.wav").string(), (dir / "no_such_dir/out.wav").string()}, "no_such_dir"},
      {{(dir / "in.wav").string(), (dir / "a_file/out.wav").string()}, "a_file"},
      {{(dir / "in.wav").string(), (dir / "out_is_a_dir").string()}, "out_is_a_dir"},
  };
  for (const auto& [in_out, culprit] : paths) {
    SCOPED_TRACE(in_out[0] + " -> " + in_out[1]);
    const RunResult run = tapstream(dir, {"process", in_out[0], in_out[1], "--taps", taps});
    EXPECT_NE(run.exit_code, 0);
    EXPECT_NE(run.err.find(culprit), std::string::npos) << "stderr: " << run.err;
    EXPECT_EQ(entries(dir.path()), listing) << "stderr: " << run.err;
    EXPECT_TRUE(fs::is_empty(dir / "out_is_a_dir"));
  }
}

// Each of SIGHUP (the terminal closed), SIGINT and SIGTERM, sent while the
// temporary output is being written: no output, no temporary file, exit
// 128 + the signal, and a line that names it.
TEST(ProcessCommand, AnInterruptedRunLeavesNoOutputNoTemporaryFileAndExits128PlusTheSignal) {
  TempDir dir;
  // Direct form with a long filter: seconds of work, so the signal surely
  // lands while the output is being written.
  write_sound(dir / "in.wav", scaled(random_signal(48000 * 20, 16), 0.5f), 1, 48000, kFloatWav);
  write_text_taps(dir / "taps.txt", scaled(random_signal(16384, 17), 0.01f));
  const auto listing = entries(dir.path());
  for (const auto& [signal_number, name] : std::vector<std::pair<int, std::string>>{
           {SIGHUP, "SIGHUP"}, {SIGINT, "SIGINT"}, {SIGTERM, "SIGTERM"}}) {
    SCOPED_TRACE(name);
    const fs::path err_file = dir.path().string() + ".interrupt.err";
    testing::Child child({TAPSTREAM_BINARY, "process", (dir / "in.wav").string(),
                          (dir / "out.wav").string(), "--taps", (dir / "taps.txt").string(),
                          "--algorithm", "direct", "--backend", "cpu", "--block", "4096"},
                         "/dev/null", err_file);
    ASSERT_TRUE(child.started());
    bool writing = false;
    EXPECT_TRUE(testing::wait_until(
        testing::long_wait,
        [&] {
          for (const auto& name_in_dir : entries(dir.path())) {
            writing = writing || name_in_dir.rfind("out.wav.tapstream-tmp-", 0) == 0;
          }
          return writing || !child.running();
        },
        "the temporary output file, or the end of the run"));
    ASSERT_TRUE(writing) << "the run ended before its temporary file was seen";
    child.signal(signal_number);
    const int status = child.wait_for(std::chrono::seconds(30));
    const std::string err = read_text(err_file);
    fs::remove(err_file);
    EXPECT_EQ(status, 128 + signal_number) << err;
    EXPECT_NE(err.find("interrupted by " + name), std::string::npos) << err;
    EXPECT_EQ(entries(dir.path()), listing) << err;
  }
}

TEST(ProcessCommand, ABatchFiltersEveryFileLikeOneRunAndSkipsAnUnreadableOneByName) {
  TempDir dir;
  fs::create_directory(dir / "in");
  write_sound(dir / "in" / "a.wav", scaled(random_signal(2 * 3000, 40), 0.5f), 2, 48000, kFloatWav);
  write_sound(dir / "in" / "b.wav", scaled(random_signal(2 * 7000, 41), 0.5f), 2, 48000, kFloatWav);
  // Another channel count and rate: a second engine, in the same batch.
  write_sound(dir / "c.wav", scaled(random_signal(5000, 42), 0.5f), 1, 44100, kFloatWav);
  { std::ofstream(dir / "in" / "broken.wav") << "not a sound file"; }
  write_text_taps(dir / "taps.txt", scaled(random_signal(300, 43), 0.1f));
  const std::vector<std::string> common = {
      "--taps", (dir / "taps.txt").string(), "--backend", "cpu", "--block", "1024"};
  std::vector<std::string> args = {"process", (dir / "in").string(), (dir / "c.wav").string(),
                                   "--out-dir", (dir / "out").string()};
  args.insert(args.end(), common.begin(), common.end());
  const RunResult batch = tapstream(dir, args);
  EXPECT_EQ(batch.exit_code, 3) << batch.err;
  EXPECT_NE(batch.err.find("broken.wav"), std::string::npos) << batch.err;
  EXPECT_NE(batch.err.find("1 of 4 files failed"), std::string::npos) << batch.err;
  EXPECT_EQ(entries(dir / "out"), (std::set<std::string>{"a.wav", "b.wav", "c.wav"}));
  // Each file exactly as a run of its own gives it.
  for (const fs::path& input : {dir / "in" / "a.wav", dir / "in" / "b.wav", dir / "c.wav"}) {
    SCOPED_TRACE(input.string());
    std::vector<std::string> single = {"process", input.string(), (dir / "single.wav").string()};
    single.insert(single.end(), common.begin(), common.end());
    ASSERT_EQ(tapstream(dir, single).exit_code, 0);
    const Sound alone = read_sound(dir / "single.wav");
    const Sound batched = read_sound(dir / "out" / input.filename());
    EXPECT_EQ(batched.info.channels, alone.info.channels);
    EXPECT_EQ(batched.info.samplerate, alone.info.samplerate);
    EXPECT_EQ(batched.samples, alone.samples);
  }
}

TEST(ProcessCommand, ABatchOfOnlyBadFilesFailsAndWritesNothing) {
  TempDir dir;
  { std::ofstream(dir / "broken.wav") << "not a sound file"; }
  write_text_taps(dir / "taps.txt", {1.0f});
  const RunResult run = tapstream(
      dir, {"process", (dir / "broken.wav").string(), (dir / "missing.wav").string(), "--out-dir",
            (dir / "out").string(), "--taps", (dir / "taps.txt").string(), "--backend", "cpu"});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.err.find("missing.wav"), std::string::npos) << run.err;
  EXPECT_TRUE(fs::is_empty(dir / "out"));
}

TEST(ProcessCommand, ARunOnTheCpuEngineLoadsNoCudaLibrary) {
  // Loading cuFFT and NVRTC alone costs about 45 ms: only the CUDA engine may.
  TempDir dir;
  write_sound(dir / "in.wav", random_signal(480, 45), 1, 48000, kFloatWav);
  write_text_taps(dir / "taps.txt", {0.5f});
  const std::string log = (dir / "ld.log").string();
  const std::string command =
      "LD_DEBUG=libs LD_DEBUG_OUTPUT=" + quote(log) + " " + quote(TAPSTREAM_BINARY) +
      " -q process " + quote((dir / "in.wav").string()) + " " + quote((dir / "out.wav").string()) +
      " --taps " + quote((dir / "taps.txt").string()) + " --backend cpu";
  ASSERT_EQ(std::system(command.c_str()), 0);
  std::string loaded;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    if (entry.path().filename().string().rfind("ld.log", 0) == 0) loaded += read_text(entry.path());
  }
  ASSERT_NE(loaded.find("libsndfile"), std::string::npos) << "LD_DEBUG gave no log";
  EXPECT_EQ(loaded.find("libcufft"), std::string::npos);
  EXPECT_EQ(loaded.find("libnvrtc"), std::string::npos);
  EXPECT_EQ(loaded.find("libcudart"), std::string::npos);
}

TEST(ProcessCommand, OneFileNeedsExactlyAnInputAndAnOutput) {
  TempDir dir;
  write_sound(dir / "in.wav", random_signal(100, 44), 1, 48000, kFloatWav);
  write_text_taps(dir / "taps.txt", {1.0f});
  const RunResult run =
      tapstream(dir, {"process", (dir / "in.wav").string(), "--taps", (dir / "taps.txt").string()});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("expected IN OUT"), std::string::npos) << run.err;
}

TEST(ProcessCommand, ErrorsAreOneLine) {
  TempDir dir;
  write_sound(dir / "in.wav", random_signal(100, 12), 1, 48000, kFloatWav);
  std::ofstream(dir / "bad.txt") << "1\n2\nthree\n";
  const RunResult run =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "out.wav").string(), "--taps",
                      (dir / "bad.txt").string()});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  EXPECT_NE(run.err.find("bad.txt"), std::string::npos) << run.err;
}

TEST(ProcessCommand, ClippingIsCountedAndReported) {
  TempDir dir;
  const std::uint64_t seed = 1013;
  const std::vector<float> input = scaled(random_signal(3000, seed), 0.9f);
  write_sound(dir / "in.wav", input, 1, 48000, kFloatWav);
  write_text_taps(dir / "double.txt", {2.0f});
  std::size_t expected = 0;
  float peak = 0.0f;
  for (float x : read_sound(dir / "in.wav").samples) {
    if (std::abs(2.0f * x) > 1.0f) ++expected;
    peak = std::max(peak, std::abs(2.0f * x));
  }
  ASSERT_GT(expected, 0u);

  const RunResult run =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "out.wav").string(), "--taps",
                      (dir / "double.txt").string(), "--format", "pcm16"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("clipped " + std::to_string(expected) + " samples"), std::string::npos)
      << "expected " << expected << " clipped samples; stderr: " << run.err;
  char peak_text[32];
  std::snprintf(peak_text, sizeof peak_text, "peak %.2f dBFS", 20.0 * std::log10(double(peak)));
  EXPECT_NE(run.err.find(peak_text), std::string::npos) << peak_text << "; stderr: " << run.err;
  // Clipped, not wrapped around.
  const Sound out = read_sound(dir / "out.wav");
  for (std::size_t i = 0; i < out.samples.size(); ++i) {
    if (std::abs(2.0f * input[i]) > 1.0f) {
      ASSERT_GT(out.samples[i] * input[i], 0.0f) << "sample " << i << " wrapped around";
      ASSERT_GE(std::abs(out.samples[i]), 0.999f) << "sample " << i;
    }
  }

  // Float output keeps values above full scale: nothing is clipped, nothing said.
  const RunResult float_run =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "float.wav").string(), "--taps",
                      (dir / "double.txt").string()});
  ASSERT_EQ(float_run.exit_code, 0) << float_run.err;
  EXPECT_EQ(float_run.err.find("clipped"), std::string::npos) << float_run.err;
}

TEST(ProcessCommand, SaysWhatItDidInOneFinalLineAndNothingWhenQuiet) {
  TempDir dir;
  write_sound(dir / "in.wav", scaled(random_signal(4800 * 2, 14), 0.5f), 2, 48000, kFloatWav);
  write_text_taps(dir / "taps.txt", {0.5f, 0.25f});
  const std::string out = (dir / "out.wav").string();
  const RunResult run = tapstream(dir, {"process", (dir / "in.wav").string(), out, "--taps",
                                        (dir / "taps.txt").string(), "--backend", "cpu"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const std::string& part :
       {std::string("0.10 s of audio"), std::string("4800 frames"), std::string("2 channels"),
        std::string("real time"), std::string("cpu"), out}) {
    EXPECT_NE(run.err.find(part), std::string::npos) << part << "; stderr: " << run.err;
  }
  EXPECT_EQ(run.err.find('\r'), std::string::npos) << "no progress bar when not a terminal";

  const RunResult quiet = tapstream(dir, {"-q", "process", (dir / "in.wav").string(), out, "--taps",
                                          (dir / "taps.txt").string()});
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "");
}

TEST(ProcessCommand, AutoBackendFallsBackToTheCpuAndSaysSoOnce) {
  TempDir dir;
  write_sound(dir / "in.wav", scaled(random_signal(1000, 15), 0.5f), 1, 48000, kFloatWav);
  write_sound(dir / "in2.wav", scaled(random_signal(1000, 17), 0.5f), 1, 48000, kFloatWav);
  write_text_taps(dir / "taps.txt", {0.5f, 0.25f});
  // A batch (two files): auto decides by the GPU, not by a single job's size.
  const RunResult run = tapstream(
      dir, {"process", (dir / "in.wav").string(), (dir / "in2.wav").string(), "--out-dir",
            (dir / "out").string(), "--taps", (dir / "taps.txt").string(), "--backend", "auto"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string fallback = "using the CPU engine";
  const auto first = run.err.find(fallback);
  if (first == std::string::npos) GTEST_SKIP() << "a usable GPU: auto did not fall back";
  EXPECT_EQ(run.err.find(fallback, first + 1), std::string::npos) << run.err;

  // Without a GPU, asking for CUDA explicitly is an error, with no output.
  const RunResult cuda =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "cuda.wav").string(), "--taps",
                      (dir / "taps.txt").string(), "--backend", "cuda"});
  EXPECT_NE(cuda.exit_code, 0);
  EXPECT_NE(cuda.err.find("cuda"), std::string::npos) << cuda.err;
  EXPECT_FALSE(fs::exists(dir / "cuda.wav"));
}

TEST(ProcessCommand, AutoBackendTakesTheCpuEngineForAJobSmallerThanTheGpusStartUp) {
  TempDir dir;
  const std::size_t frames = 3000;
  write_sound(dir / "in.wav", scaled(random_signal(2 * frames, 16), 0.5f), 2, 48000, kFloatWav);
  write_text_taps(dir / "taps.txt", {0.5f, 0.25f});
  const RunResult run =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "out.wav").string(), "--taps",
                      (dir / "taps.txt").string(), "--backend", "auto", "-v"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // Chosen from the job's size, before any CUDA start-up, GPU or not.
  EXPECT_NE(run.err.find("using the CPU engine for a job of 6000 samples (3000 frames, 2 "
                         "channels)"),
            std::string::npos)
      << run.err;
  EXPECT_EQ(run.err.find("cuda start-up"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("engine: cpu"), std::string::npos) << run.err;
  EXPECT_TRUE(fs::exists(dir / "out.wav"));
}

// --- design ---------------------------------------------------------------

std::vector<double> read_taps(const fs::path& file, std::string* comments) {
  std::ifstream in(file);
  std::vector<double> taps;
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    if (line[first] == '#') {
      *comments += line + "\n";
      continue;
    }
    taps.push_back(std::stod(line));
  }
  return taps;
}

TEST(DesignCommand, WritesATapsFileThatRecordsHowItWasMadeAndThatProcessReads) {
  TempDir dir;
  const RunResult run = tapstream(dir, {"design", "lowpass", "--rate", "48000", "--cutoff", "2000",
                                        "--taps", "101", "-o", (dir / "lowpass.txt").string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::string comments;
  const std::vector<double> taps = read_taps(dir / "lowpass.txt", &comments);
  ASSERT_EQ(taps.size(), 101u);
  EXPECT_NE(comments.find("lowpass"), std::string::npos) << comments;
  EXPECT_NE(comments.find("--cutoff 2000"), std::string::npos) << comments;
  EXPECT_NE(comments.find("--rate 48000"), std::string::npos) << comments;
  double dc = 0.0;
  for (double t : taps) dc += t;
  EXPECT_NEAR(dc, 1.0, 0.01) << "a lowpass passes DC";
  for (std::size_t i = 0; i < taps.size(); ++i) {
    EXPECT_NEAR(taps[i], taps[taps.size() - 1 - i], 1e-6) << "linear phase: symmetric taps";
  }
  EXPECT_EQ(entries(dir.path()), std::set<std::string>{"lowpass.txt"});

  // The designed file filters a real recording.
  const RunResult process =
      tapstream(dir, {"process", real_recording().string(), (dir / "out.wav").string(), "--taps",
                      (dir / "lowpass.txt").string()});
  ASSERT_EQ(process.exit_code, 0) << process.err;
  EXPECT_TRUE(fs::exists(dir / "out.wav"));
}

TEST(DesignCommand, DesignsEachTypeAndWindow) {
  TempDir dir;
  const std::vector<std::vector<std::string>> designs = {
      {"highpass", "--cutoff", "500", "--taps", "63", "--window", "hann"},
      {"bandpass", "--cutoff", "300,3400", "--taps", "127", "--window", "hamming"},
      {"bandstop", "--cutoff", "900,1100", "--taps", "255", "--window", "blackman"},
      {"lowpass", "--cutoff", "4000", "--taps", "32", "--window", "rectangular"},
      {"lowpass", "--cutoff", "4000", "--taps", "65", "--window", "kaiser", "--beta", "5"},
  };
  for (std::size_t i = 0; i < designs.size(); ++i) {
    const auto& d = designs[i];
    SCOPED_TRACE(d[0] + " " + d[2]);
    const fs::path file = dir / ("design" + std::to_string(i) + ".txt");
    std::vector<std::string> args = {"design", d[0], "--rate", "16000"};
    args.insert(args.end(), d.begin() + 1, d.end());
    args.insert(args.end(), {"-o", file.string()});
    const RunResult run = tapstream(dir, args);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    std::string comments;
    EXPECT_EQ(read_taps(file, &comments).size(), std::stoul(d[4]));
    EXPECT_NE(comments.find(d[0]), std::string::npos) << comments;
  }
}

TEST(DesignCommand, BadOptionsAreNamedAndLeaveNoFile) {
  TempDir dir;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"lowpass", "--rate", "48000", "--cutoff", "abc", "--taps", "11"}, "--cutoff"},
      {{"lowpass", "--rate", "48000", "--cutoff", "30000", "--taps", "11"}, "--cutoff"},
      {{"lowpass", "--rate", "48000", "--cutoff", "-5", "--taps", "11"}, "--cutoff"},
      {{"lowpass", "--rate", "48000", "--cutoff", "100,200", "--taps", "11"}, "--cutoff"},
      {{"bandpass", "--rate", "48000", "--cutoff", "1000", "--taps", "11"}, "--cutoff"},
      {{"bandpass", "--rate", "48000", "--cutoff", "2000,1000", "--taps", "11"}, "--cutoff"},
      {{"lowpass", "--rate", "0", "--cutoff", "1000", "--taps", "11"}, "--rate"},
      {{"lowpass", "--rate", "48000", "--cutoff", "1000", "--taps", "0"}, "--taps"},
      {{"lowpass", "--rate", "48000", "--cutoff", "1000", "--taps", "11", "--window", "triangle"},
       "triangle"},
      {{"lowpass", "--rate", "48000", "--cutoff", "1000", "--taps", "11", "--window", "hann",
        "--beta", "5"},
       "--beta"},
      {{"notch", "--rate", "48000", "--cutoff", "1000", "--taps", "11"}, "notch"},
      {{"lowpass", "--cutoff", "1000", "--taps", "11"}, "--rate"},
  };
  for (const auto& [args, culprit] : cases) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    SCOPED_TRACE(joined);
    std::vector<std::string> full = {"design"};
    full.insert(full.end(), args.begin(), args.end());
    full.insert(full.end(), {"-o", (dir / "f.txt").string()});
    const RunResult run = tapstream(dir, full);
    EXPECT_NE(run.exit_code, 0);
    EXPECT_NE(run.err.find(culprit), std::string::npos) << "stderr: " << run.err;
    EXPECT_TRUE(fs::is_empty(dir.path())) << "stderr: " << run.err;
  }
}

// ---------------------------------------------------------------- files (issue 12)

// Runs a bash script in `dir` with $T the tapstream binary and pipefail on;
// stderr of the whole script is captured.
RunResult shell(const TempDir& dir, const std::string& script) {
  const fs::path err_file = dir.path().parent_path() / (dir.path().filename().string() + ".sh.err");
  const std::string body = "set -o pipefail; cd " + quote(dir.path().string()) +
                           " || exit 99; T=" + quote(TAPSTREAM_BINARY) + "; " + script;
  const int status =
      std::system(("bash -c " + quote(body) + " </dev/null 2>" + quote(err_file.string())).c_str());
  RunResult run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.err = read_text(err_file);
  fs::remove(err_file);
  return run;
}

// Integer codes of a PCM file (libsndfile's left-justified ints, shifted back).
std::vector<int> read_codes(const fs::path& file, int bits) {
  SF_INFO info{};
  SNDFILE* f = sf_open(file.c_str(), SFM_READ, &info);
  if (f == nullptr) {
    ADD_FAILURE() << "cannot read " << file;
    return {};
  }
  // Read to the end: a streamed FLAC does not say its length.
  std::vector<int> codes;
  std::vector<int> block(std::size_t(4096 * info.channels));
  for (sf_count_t got; (got = sf_readf_int(f, block.data(), 4096)) > 0;) {
    codes.insert(codes.end(), block.begin(), block.begin() + got * info.channels);
  }
  sf_close(f);
  for (auto& c : codes) c >>= (32 - bits);
  return codes;
}

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(ProcessFiles, StandardInputAndOutputWorkInPipelinesAndMatchAFileRun) {
  TempDir dir;
  // 300 frames go out whole at the end; 40000 stereo frames (over StreamOutput's
  // 64 KiB) go out as they come, with the lengths marked unknown.
  for (const std::size_t frames : {std::size_t(300), std::size_t(40000)}) {
    SCOPED_TRACE(frames);
    write_sound(dir / "in.wav", scaled(random_signal(frames * 2, 21), 0.5f), 2, 44100, kPcm16Wav);
    write_text_taps(dir / "taps.txt", {0.5f, 0.25f, -0.125f});
    const std::string taps = " --taps taps.txt --backend cpu";
    ASSERT_EQ(shell(dir, "$T process in.wav file.wav" + taps).exit_code, 0);
    const RunResult piped = shell(dir, "$T process in.wav -" + taps + " | cat > piped.wav");
    ASSERT_EQ(piped.exit_code, 0) << piped.err;
    EXPECT_NE(piped.err.find("-> standard output"), std::string::npos) << piped.err;
    const RunResult from_stdin = shell(dir, "cat in.wav | $T process - stdin.wav" + taps);
    ASSERT_EQ(from_stdin.exit_code, 0) << from_stdin.err;
    const RunResult both = shell(dir, "cat in.wav | $T process - -" + taps + " | cat > both.wav");
    ASSERT_EQ(both.exit_code, 0) << both.err;
    const RunResult raw = shell(dir, "$T process in.wav - --type raw" + taps + " | cat > out.raw");
    ASSERT_EQ(raw.exit_code, 0) << raw.err;
    for (const char* type : {"flac", "au"}) {
      const RunResult typed = shell(
          dir, "$T process in.wav - --type " + std::string(type) + taps + " | cat > piped." + type);
      ASSERT_EQ(typed.exit_code, 0) << typed.err;
    }

    const std::vector<int> want = read_codes(dir / "file.wav", 16);
    ASSERT_EQ(want.size(), frames * 2);
    for (const char* name : {"piped.wav", "stdin.wav", "both.wav", "piped.flac", "piped.au"}) {
      SCOPED_TRACE(name);
      EXPECT_EQ(read_codes(dir / name, 16), want);
    }
    EXPECT_EQ(fs::file_size(dir / "out.raw"), frames * 2 * 2) << "raw: samples only";
    // A streamed FLAC read back: its length is unknown, not "cut short".
    const RunResult again = shell(dir, "$T process piped.flac again.wav" + taps);
    EXPECT_EQ(again.exit_code, 0) << again.err;
    EXPECT_EQ(read_codes(dir / "again.wav", 16).size(), frames * 2);
    // sox, where installed, reads the streamed WAV to its end.
    if (std::system("command -v sox >/dev/null 2>&1") == 0) {
      const RunResult sox = shell(dir, "$T -q process in.wav -" + taps + " | sox - sox.flac");
      ASSERT_EQ(sox.exit_code, 0) << sox.err;
      EXPECT_EQ(sox.err, "");
      EXPECT_EQ(read_codes(dir / "sox.flac", 16), want);
    }
  }
}

TEST(ProcessFiles, RawSamplesGoInAndOutWithTheTypeNamed) {
  TempDir dir;
  const std::size_t frames = 5000;
  write_sound(dir / "in.wav", scaled(random_signal(frames * 2, 35), 0.5f), 2, 44100, kPcm16Wav);
  write_text_taps(dir / "taps.txt", {0.5f, 0.25f});
  const std::string taps = " --taps taps.txt --backend cpu --dither none";
  write_text_taps(dir / "one.txt", {1.0f});
  const RunResult piped = shell(
      dir, "$T process in.wav - --type raw" + taps +
               " | $T process - twice.wav --input-type raw --input-rate 44100 --input-channels 2"
               " --input-format pcm16 --format pcm16 --taps one.txt --dither none && "
               "$T process in.wav once.wav" +
               taps);
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  const Sound twice = read_sound(dir / "twice.wav");
  EXPECT_EQ(twice.info.samplerate, 44100);
  EXPECT_EQ(twice.info.channels, 2);
  EXPECT_EQ(read_codes(dir / "twice.wav", 16), read_codes(dir / "once.wav", 16));
  const RunResult missing =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "x.wav").string(), "--taps",
                      (dir / "one.txt").string(), "--input-type", "raw"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("--input-rate"), std::string::npos) << missing.err;
}

TEST(ProcessFiles, AFifoOutputIsWrittenThroughAndStaysAFifo) {
  TempDir dir;
  write_sound(dir / "in.wav", scaled(random_signal(30000, 22), 0.5f), 1, 48000, kFloatWav);
  write_text_taps(dir / "taps.txt", {0.5f, 0.5f});
  ASSERT_EQ(shell(dir, "mkfifo pipe.wav").exit_code, 0);
  const RunResult run = shell(dir,
                              "cat pipe.wav > got.wav & reader=$!; "
                              "$T process in.wav pipe.wav --taps taps.txt && wait $reader && "
                              "$T process in.wav file.wav --taps taps.txt");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(fs::is_fifo(dir / "pipe.wav"));
  EXPECT_EQ(read_sound(dir / "got.wav").samples, read_sound(dir / "file.wav").samples);
  EXPECT_EQ(entries(dir.path()),
            (std::set<std::string>{"file.wav", "got.wav", "in.wav", "pipe.wav", "taps.txt"}));
}

TEST(ProcessFiles, ASymlinkOutputWritesItsTargetAndKeepsTheLink) {
  TempDir dir;
  write_sound(dir / "in.wav", scaled(random_signal(1000, 23), 0.5f), 1, 48000, kFloatWav);
  write_text_taps(dir / "taps.txt", {0.5f});
  fs::create_directory(dir / "sub");
  std::ofstream(dir / "sub/target.wav") << "old";
  fs::create_symlink("sub/target.wav", dir / "link.wav");
  fs::create_symlink("sub/new.wav", dir / "dangling.wav");
  for (const char* link : {"link.wav", "dangling.wav"}) {
    const RunResult run =
        tapstream(dir, {"process", (dir / "in.wav").string(), (dir / link).string(), "--taps",
                        (dir / "taps.txt").string()});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_TRUE(fs::is_symlink(dir / link)) << link;
  }
  EXPECT_EQ(fs::read_symlink(dir / "link.wav"), "sub/target.wav");
  EXPECT_EQ(read_sound(dir / "sub/target.wav").frames(), 1000u);
  EXPECT_EQ(read_sound(dir / "sub/new.wav").frames(), 1000u);
  EXPECT_EQ(entries(dir / "sub"), (std::set<std::string>{"new.wav", "target.wav"}));
  // The type comes from the name of what is written: the link's target.
  fs::create_symlink("sub/take.flac", dir / "flac-link.wav");
  ASSERT_EQ(tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "flac-link.wav").string(),
                            "--taps", (dir / "taps.txt").string(), "--format", "pcm16"})
                .exit_code,
            0);
  EXPECT_EQ(read_sound(dir / "sub/take.flac").info.format, SF_FORMAT_FLAC | SF_FORMAT_PCM_16);
}

TEST(ProcessFiles, AnUnknownOutputTypeIsRefusedWithTheKnownOnesAndNothingIsWritten) {
  TempDir dir;
  write_sound(dir / "in.wav", scaled(random_signal(100, 24), 0.5f), 1, 48000, kFloatWav);
  write_text_taps(dir / "taps.txt", {0.5f});
  const auto listing = entries(dir.path());
  for (const std::vector<std::string>& out :
       {std::vector<std::string>{"out.mp3"}, {"out.xyz"}, {"out"}, {"out.wav", "--type", "xyz"}}) {
    SCOPED_TRACE(out[0]);
    std::vector<std::string> args = {"process", (dir / "in.wav").string(), (dir / out[0]).string(),
                                     "--taps", (dir / "taps.txt").string()};
    args.insert(args.end(), out.begin() + 1, out.end());
    const RunResult run = tapstream(dir, args);
    EXPECT_EQ(run.exit_code, 1) << run.err;
    EXPECT_NE(run.err.find("known: "), std::string::npos) << run.err;
    EXPECT_NE(run.err.find("flac"), std::string::npos) << run.err;
    EXPECT_EQ(entries(dir.path()), listing);
  }
}

TEST(ProcessFiles, IntegerOutputIsRoundedToNearestExactly) {
  TempDir dir;
  // Samples worth +0.6, -0.4, 1.5, -1.5, 100.5, -100.5 and 32767.4 LSB at 16 bits;
  // sox gives 1, 0, 2, -1, 101, -100, 32767.
  const std::vector<double> lsb = {0.6, -0.4, 1.5, -1.5, 100.5, -100.5, 32767.4};
  std::vector<float> input;
  for (const double x : lsb) input.push_back(float(x / 32768.0));
  write_sound(dir / "in.wav", input, 1, 48000, kFloatWav);
  write_text_taps(dir / "one.txt", {1.0f});
  const RunResult run =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "out.wav").string(), "--taps",
                      (dir / "one.txt").string(), "--format", "pcm16", "--dither", "none",
                      "--algorithm", "direct"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(read_codes(dir / "out.wav", 16), (std::vector<int>{1, 0, 2, -1, 101, -100, 32767}));
  EXPECT_EQ(run.err.find("clipped"), std::string::npos) << run.err;

  // 24 bits: no dither by default, the same rounding (x256 for the same values).
  std::vector<float> input24;
  for (const double x : lsb) input24.push_back(float(x / 8388608.0));
  write_sound(dir / "in24.wav", input24, 1, 48000, kFloatWav);
  const RunResult run24 =
      tapstream(dir, {"process", (dir / "in24.wav").string(), (dir / "out24.wav").string(),
                      "--taps", (dir / "one.txt").string(), "--format", "pcm24"});
  ASSERT_EQ(run24.exit_code, 0) << run24.err;
  EXPECT_EQ(read_codes(dir / "out24.wav", 24), (std::vector<int>{1, 0, 2, -1, 101, -100, 32767}));
}

TEST(ProcessFiles, SixteenBitOutputIsDitheredByDefaultWithinOneStep) {
  TempDir dir;
  const std::size_t n = 20000;
  // A constant a quarter step above zero: rounding alone gives 0 everywhere;
  // TPDF dither gives -1, 0 or 1 with a mean of a quarter.
  write_sound(dir / "in.wav", std::vector<float>(n, float(0.25 / 32768.0)), 1, 48000, kFloatWav);
  write_text_taps(dir / "one.txt", {1.0f});
  for (const std::string dither : {"auto", "tpdf", "none"}) {
    SCOPED_TRACE(dither);
    const RunResult run =
        tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "out.wav").string(), "--taps",
                        (dir / "one.txt").string(), "--format", "pcm16", "--dither", dither});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const std::vector<int> codes = read_codes(dir / "out.wav", 16);
    ASSERT_EQ(codes.size(), n);
    double sum = 0.0;
    for (const int c : codes) {
      ASSERT_GE(c, -1);
      ASSERT_LE(c, 1);
      sum += c;
    }
    if (dither == "none") {
      EXPECT_EQ(sum, 0.0);
    } else {
      EXPECT_NEAR(sum / double(n), 0.25, 0.02);
    }
  }
}

TEST(ProcessFiles, ACutShortInputIsFilteredAsFarAsItGoesWithExit3UnlessStrict) {
  TempDir dir;
  write_sound(dir / "full.wav", scaled(random_signal(10000 * 2, 25), 0.5f), 2, 48000, kPcm16Wav);
  write_text_taps(dir / "taps.txt", {0.5f});
  // Cut mid-file: 44 header bytes, then 4 bytes a frame; 6001 frames and 2 stray bytes remain.
  const std::string whole = read_text(dir / "full.wav");
  ASSERT_EQ(whole.size(), 44u + 10000u * 4u);
  std::ofstream(dir / "cut.wav", std::ios::binary) << whole.substr(0, 44 + 6001 * 4 + 2);
  fs::remove(dir / "full.wav");
  for (const bool quiet : {false, true}) {
    std::vector<std::string> args = {"process", (dir / "cut.wav").string(),
                                     (dir / "out.wav").string(), "--taps",
                                     (dir / "taps.txt").string()};
    if (quiet) args.insert(args.begin(), "-q");
    const RunResult run = tapstream(dir, args);
    EXPECT_EQ(run.exit_code, 3) << run.err;
    EXPECT_NE(run.err.find((dir / "cut.wav").string() +
                           ": cut short: the header promises 10000 frames, the file holds 6001"),
              std::string::npos)
        << run.err;
    EXPECT_EQ(read_sound(dir / "out.wav").frames(), 6001u);
  }
  fs::remove(dir / "out.wav");
  const auto listing = entries(dir.path());
  const RunResult strict =
      tapstream(dir, {"process", (dir / "cut.wav").string(), (dir / "out.wav").string(), "--taps",
                      (dir / "taps.txt").string(), "--strict"});
  EXPECT_EQ(strict.exit_code, 1) << strict.err;
  EXPECT_NE(strict.err.find("--strict"), std::string::npos) << strict.err;
  EXPECT_EQ(entries(dir.path()), listing);
}

TEST(ProcessFiles, ACutShortImpulseResponseIsUsedAsFarAsItGoesWithExit3UnlessStrict) {
  TempDir dir;
  write_sound(dir / "in.wav", scaled(random_signal(2000, 26), 0.5f), 1, 48000, kFloatWav);
  write_sound(dir / "ir_full.wav", scaled(random_signal(1000, 27), 0.1f), 1, 48000, kFloatWav);
  const std::string whole = read_text(dir / "ir_full.wav");
  const std::size_t header = whole.size() - 1000 * 4;
  std::ofstream(dir / "ir.wav", std::ios::binary) << whole.substr(0, header + 700 * 4);
  const RunResult run =
      tapstream(dir, {"-q", "process", (dir / "in.wav").string(), (dir / "out.wav").string(),
                      "--taps", (dir / "ir.wav").string(), "--tail"});
  EXPECT_EQ(run.exit_code, 3) << run.err;
  EXPECT_NE(run.err.find("ir.wav: cut short: the header promises 1000 frames, the file holds 700"),
            std::string::npos)
      << run.err;
  EXPECT_EQ(read_sound(dir / "out.wav").frames(), 2000u + 699u) << "the tail of 700 taps";
  const RunResult strict =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "strict.wav").string(), "--taps",
                      (dir / "ir.wav").string(), "--strict"});
  EXPECT_EQ(strict.exit_code, 1) << strict.err;
  EXPECT_FALSE(fs::exists(dir / "strict.wav"));
}

TEST(ProcessFiles, LevelsAboveFullScaleAreWarnedAndQuietKeepsOnlyDataChanges) {
  TempDir dir;
  std::vector<float> input = scaled(random_signal(4000, 28), 0.5f);
  input[100] = 0.75f;  // the peak: 0.75 x 4 = 3.0, +9.54 dBFS
  write_sound(dir / "in.wav", input, 1, 48000, kFloatWav);
  write_text_taps(dir / "four.txt", {4.0f});
  const auto run = [&](bool quiet, const std::string& format) {
    std::vector<std::string> args = {
        "process", (dir / "in.wav").string(),   (dir / "out.wav").string(),
        "--taps",  (dir / "four.txt").string(), "--format",
        format};
    if (quiet) args.insert(args.begin(), "-q");
    return tapstream(dir, args);
  };
  const RunResult loud = run(false, "float");
  ASSERT_EQ(loud.exit_code, 0) << loud.err;
  EXPECT_NE(loud.err.find("peak 9.54 dBFS is above full scale"), std::string::npos) << loud.err;
  EXPECT_EQ(run(true, "float").err, "") << "a level warning, not a data change";
  const RunResult clipped = run(true, "pcm16");
  ASSERT_EQ(clipped.exit_code, 0) << clipped.err;
  EXPECT_NE(clipped.err.find("warning: clipped"), std::string::npos) << clipped.err;
  EXPECT_NE(clipped.err.find("peak 9.54 dBFS"), std::string::npos) << clipped.err;
  EXPECT_EQ(std::count(clipped.err.begin(), clipped.err.end(), '\n'), 1) << clipped.err;
}

TEST(ProcessFiles, NormalizePutsThePeakAtTheAskedLevel) {
  TempDir dir;
  std::vector<float> input = scaled(random_signal(50000, 29), 0.5f);
  input[777] = -0.9f;
  write_sound(dir / "in.wav", input, 1, 48000, kFloatWav);
  write_text_taps(dir / "taps.txt", {3.0f, 1.0f});
  const RunResult run =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "out.wav").string(), "--taps",
                      (dir / "taps.txt").string(), "--normalize", "-6", "--block", "1000"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("normalize: peak"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("above full scale"), std::string::npos) << run.err;
  const Sound out = read_sound(dir / "out.wav");
  ASSERT_EQ(out.frames(), input.size());
  float peak = 0.0f;
  for (const float x : out.samples) peak = std::max(peak, std::abs(x));
  EXPECT_NEAR(peak, std::pow(10.0, -6.0 / 20.0), 1e-6);
  // The same as the plain run, scaled.
  ASSERT_EQ(tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "plain.wav").string(),
                            "--taps", (dir / "taps.txt").string()})
                .exit_code,
            0);
  const Sound plain = read_sound(dir / "plain.wav");
  for (std::size_t i = 0; i < out.samples.size(); i += 997) {
    EXPECT_NEAR(out.samples[i], plain.samples[i] * (out.samples[777] / plain.samples[777]), 1e-6)
        << i;
  }
  const RunResult both =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "x.wav").string(), "--taps",
                      (dir / "taps.txt").string(), "--normalize", "-1", "--gain", "3"});
  EXPECT_EQ(both.exit_code, 2) << "--normalize and --gain together are a usage error";
  EXPECT_NE(both.err.find("--normalize"), std::string::npos) << both.err;
  EXPECT_FALSE(fs::exists(dir / "x.wav"));
}

TEST(ProcessFiles, FlacFromFloatInputIs24BitWithANote) {
  TempDir dir;
  write_sound(dir / "in.wav", scaled(random_signal(1000, 30), 0.5f), 1, 48000, kFloatWav);
  write_text_taps(dir / "taps.txt", {0.5f});
  const RunResult run =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "out.flac").string(), "--taps",
                      (dir / "taps.txt").string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("writing pcm24"), std::string::npos) << run.err;
  EXPECT_EQ(read_sound(dir / "out.flac").info.format, SF_FORMAT_FLAC | SF_FORMAT_PCM_24);
}

TEST(ProcessFiles, ChannelMaskAndTagsAreCarriedToTheOutput) {
  TempDir dir;
  const std::vector<int> map = {SF_CHANNEL_MAP_LEFT,      SF_CHANNEL_MAP_RIGHT,
                                SF_CHANNEL_MAP_CENTER,    SF_CHANNEL_MAP_LFE,
                                SF_CHANNEL_MAP_REAR_LEFT, SF_CHANNEL_MAP_REAR_RIGHT};
  {
    SF_INFO info{};
    info.channels = 6;
    info.samplerate = 48000;
    info.format = SF_FORMAT_WAVEX | SF_FORMAT_PCM_16;
    SNDFILE* f = sf_open((dir / "in.wav").c_str(), SFM_WRITE, &info);
    ASSERT_NE(f, nullptr) << sf_strerror(nullptr);
    std::vector<int> m = map;
    ASSERT_EQ(sf_command(f, SFC_SET_CHANNEL_MAP_INFO, m.data(), int(m.size() * sizeof(int))),
              SF_TRUE);
    sf_set_string(f, SF_STR_TITLE, "Front and back");
    sf_set_string(f, SF_STR_ARTIST, "tapstream tests");
    sf_set_string(f, SF_STR_COMMENT, "5.1");
    const std::vector<float> samples = scaled(random_signal(600 * 6, 31), 0.5f);
    sf_writef_float(f, samples.data(), 600);
    sf_close(f);
  }
  write_text_taps(dir / "taps.txt", {0.5f});
  for (const std::string out : {"out.wav", "out.flac"}) {
    SCOPED_TRACE(out);
    const RunResult run =
        tapstream(dir, {"process", (dir / "in.wav").string(), (dir / out).string(), "--taps",
                        (dir / "taps.txt").string(), "--format", "pcm24"});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    SF_INFO info{};
    SNDFILE* f = sf_open((dir / out).c_str(), SFM_READ, &info);
    ASSERT_NE(f, nullptr);
    const char* title = sf_get_string(f, SF_STR_TITLE);
    const char* artist = sf_get_string(f, SF_STR_ARTIST);
    EXPECT_STREQ(title, "Front and back");
    EXPECT_STREQ(artist, "tapstream tests");
    if (out == "out.wav") {
      std::vector<int> got(6);
      EXPECT_EQ(sf_command(f, SFC_GET_CHANNEL_MAP_INFO, got.data(), int(got.size() * sizeof(int))),
                SF_TRUE);
      EXPECT_EQ(got, map);
      EXPECT_EQ(info.format, SF_FORMAT_WAVEX | SF_FORMAT_PCM_24);
    }
    sf_close(f);
  }
}

TEST(ProcessFiles, StaleTemporaryFilesOfEndedRunsAreRemovedWithALogLine) {
  TempDir dir;
  write_sound(dir / "in.wav", scaled(random_signal(100, 32), 0.5f), 1, 48000, kFloatWav);
  write_text_taps(dir / "taps.txt", {0.5f});
  // A process id that surely ended: a child we waited for.
  testing::Child ended({"true"}, "/dev/null", "/dev/null");
  const pid_t dead = ended.pid();
  ASSERT_EQ(ended.wait_for(std::chrono::seconds(10)), 0);
  const std::string stale = "out.wav.tapstream-tmp-" + std::to_string(dead) + "-abcdef";
  const std::string live = "out.wav.tapstream-tmp-" + std::to_string(::getpid()) + "-ghijkl";
  const std::string other = "other.wav.tapstream-tmp-" + std::to_string(dead) + "-mnopqr";
  for (const auto& name : {stale, live, other}) std::ofstream(dir / name) << "partial";
  const RunResult run =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "out.wav").string(), "--taps",
                      (dir / "taps.txt").string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("removed " + (dir / stale).string()), std::string::npos) << run.err;
  EXPECT_EQ(entries(dir.path()),
            (std::set<std::string>{"in.wav", "out.wav", "taps.txt", live, other}));
}

TEST(ProcessFiles, ABadFftwWisdomCacheWarnsOnceAndTheRunGoesOn) {
  TempDir dir;
  write_sound(dir / "in.wav", scaled(random_signal(20000, 33), 0.5f), 2, 48000, kFloatWav);
  write_text_taps(dir / "taps.txt", scaled(random_signal(3000, 34), 0.005f));
  std::ofstream(dir / "corrupt") << "(fftw-3.3.10 fftwf_wisdom #x garbage garbage\n";
  fs::create_directory(dir / "a-directory");
  std::ofstream(dir / "a-file") << "not a directory";
  for (const std::string wisdom : {"corrupt", "a-directory", "a-file/wisdom"}) {
    SCOPED_TRACE(wisdom);
    const RunResult run =
        shell(dir, "TAPSTREAM_FFTW_WISDOM=" + wisdom +
                       " TAPSTREAM_FFTW_PLANNER=estimate $T process "
                       "in.wav out.wav --taps taps.txt --backend cpu --algorithm fft --block 512");
    EXPECT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(count_of(run.err, "FFTW wisdom cache"), 1u) << run.err;
    EXPECT_NE(run.err.find(wisdom), std::string::npos) << run.err;
    EXPECT_EQ(read_sound(dir / "out.wav").frames(), 10000u);
  }
}

}  // namespace
}  // namespace tapstream

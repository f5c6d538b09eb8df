// Files a user, a configuration or a control client may name that are not
// what they claim: devices (/dev/zero), FIFOs, directories, files far larger
// than anything they could hold, samples that are NaN or infinite, and WAV
// headers that promise more than the file holds. Each is refused at once by
// name from every entrance that loads it (the loaders, `process`, the
// configuration, a matrix file, `ctl load`), or, for damaged sound, filtered
// as far as it is sound with a warning and exit status 3. `process` waiting
// on a FIFO ends on a signal.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sndfile.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/config/matrix_config.hpp"
#include "dsp/files/coefficient_file.hpp"
#include "dsp/files/sound_file.hpp"
#include "tests/process_support.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::Child;
using testing::read_text;
using testing::TempDir;
using Clock = std::chrono::steady_clock;

constexpr auto kAtOnce = std::chrono::seconds(2);  // "at once", generously for a loaded CI machine

std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

void write_float_wav(const fs::path& file, const std::vector<float>& samples, int channels) {
  SF_INFO info{};
  info.channels = channels;
  info.samplerate = 48000;
  info.format = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
  SNDFILE* f = sf_open(file.c_str(), SFM_WRITE, &info);
  ASSERT_NE(f, nullptr) << sf_strerror(nullptr);
  const auto frames = sf_count_t(samples.size() / std::size_t(channels));
  EXPECT_EQ(sf_writef_float(f, samples.data(), frames), frames);
  sf_close(f);
}

std::vector<float> read_samples(const fs::path& file, int* channels = nullptr) {
  SF_INFO info{};
  SNDFILE* f = sf_open(file.c_str(), SFM_READ, &info);
  if (f == nullptr) {
    ADD_FAILURE() << "cannot read " << file << ": " << sf_strerror(nullptr);
    return {};
  }
  std::vector<float> samples(std::size_t(info.frames) * std::size_t(info.channels));
  EXPECT_EQ(sf_readf_float(f, samples.data(), info.frames), info.frames);
  sf_close(f);
  if (channels != nullptr) *channels = info.channels;
  return samples;
}

// A quiet, deterministic test signal (seed printed by the tests that use it).
std::vector<float> signal_of(std::size_t samples, std::uint32_t seed) {
  std::vector<float> out(samples);
  std::uint32_t state = seed;
  for (auto& x : out) {
    state = state * 1664525u + 1013904223u;
    x = (float(state >> 8) / float(1u << 24) - 0.5f) * 0.5f;
  }
  return out;
}

struct RunResult {
  int exit_code = -1;
  std::string err;
};

// Runs `tapstream ARGS...` to its end (within a minute), stdin from /dev/null.
RunResult tapstream(const TempDir& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv{TAPSTREAM_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const fs::path err = dir.path().string() + ".err";
  RunResult run;
  {
    Child child(argv, "/dev/null", err);
    run.exit_code = child.wait_for(std::chrono::seconds(60));
  }
  run.err = read_text(err);
  fs::remove(err);
  return run;
}

// The hostile things, made fresh in `dir`.
struct Hostile {
  fs::path path;
  std::string what;  // how the refusal names it
};

std::vector<Hostile> hostile_paths(const TempDir& dir, const std::string& extension) {
  const fs::path fifo = dir / ("fifo" + extension);
  EXPECT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const fs::path directory = dir / ("directory" + extension);
  fs::create_directory(directory);
  return {{"/dev/zero", "character device"},
          {fifo, "FIFO"},
          {directory, "directory"},
          {"/dev/null", "character device"}};
}

void expect_names(const std::string& message, const Hostile& hostile) {
  EXPECT_NE(message.find(hostile.path.string()), std::string::npos) << message;
  EXPECT_NE(message.find(hostile.what), std::string::npos) << message;
}

// Runs `load`, which must throw at once; returns its message.
std::string refusal_of(const std::function<void()>& load) {
  const auto started = Clock::now();
  std::string message = "(nothing thrown)";
  try {
    load();
  } catch (const std::exception& e) {
    message = e.what();
  }
  EXPECT_LT(Clock::now() - started, kAtOnce) << message;
  return message;
}

TEST(HostileFiles, EveryLoaderRefusesDevicesFifosAndDirectoriesAtOnceByName) {
  TempDir dir{"tapstream-hostile"};
  for (const std::string extension : {"", ".txt", ".f32", ".f64", ".wav", ".toml"}) {
    TempDir scratch{"tapstream-hostile-kinds"};
    for (const Hostile& hostile : hostile_paths(scratch, extension)) {
      SCOPED_TRACE(hostile.path.string() + " as " + extension);
      CoefficientFileOptions options;
      options.channels = 2;
      expect_names(refusal_of([&] { load_filter_bank(hostile.path, options); }), hostile);
      expect_names(refusal_of([&] { read_coefficient_header(hostile.path); }), hostile);
      expect_names(refusal_of([&] { load_path_filter(hostile.path, {}); }), hostile);
      expect_names(refusal_of([&] { load_matrix_file(hostile.path, {}); }), hostile);
      expect_names(refusal_of([&] { read_matrix_shape(hostile.path); }), hostile);
      expect_names(refusal_of([&] { load_live_config(hostile.path); }), hostile);
    }
  }
}

TEST(HostileFiles, AConfigurationOrMatrixNamingADeviceOrFifoIsRefusedByItsKey) {
  TempDir dir{"tapstream-hostile"};
  ASSERT_EQ(::mkfifo((dir / "taps.txt").c_str(), 0600), 0);
  for (const std::string& file : {std::string("/dev/zero"), (dir / "taps.txt").string()}) {
    SCOPED_TRACE(file);
    const std::string config =
        "sample_rate = 48000\nchannels = 1\n[input]\ndevice = \"default\"\n"
        "[output]\ndevice = \"default\"\n[filter]\nfile = \"" +
        file + "\"\n";
    std::ofstream(dir / "live.toml") << config;
    const std::string message = refusal_of([&] { load_live_config(dir / "live.toml"); });
    EXPECT_NE(message.find("filter.file"), std::string::npos) << message;
    EXPECT_NE(message.find(file), std::string::npos) << message;

    std::ofstream(dir / "matrix.toml")
        << "inputs = 1\noutputs = 1\n[[path]]\ninput = 0\noutput = 0\nfile = \"" << file << "\"\n";
    const std::string matrix = refusal_of([&] { load_matrix_file(dir / "matrix.toml", {}); });
    EXPECT_NE(matrix.find(file), std::string::npos) << matrix;
  }
}

// ftruncate makes them without writing a byte: reading one whole would take
// hundreds of megabytes and seconds; the refusal takes neither.
TEST(HostileFiles, AFileLargerThanMaxTapsCouldNeedIsRefusedByItsSizeWithoutBeingRead) {
  TempDir dir{"tapstream-hostile"};
  const auto sparse = [&](const std::string& name, std::uint64_t bytes) {
    const fs::path file = dir / name;
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::ftruncate(fd, off_t(bytes)), 0);
    ::close(fd);
    return file;
  };
  CoefficientFileOptions options;
  options.max_taps = 1u << 20;
  const std::uint64_t big = 300u << 20;  // 300 MiB
  for (const std::string name : {"big.txt", "big.f32", "big.f64", "big.taps"}) {
    SCOPED_TRACE(name);
    const fs::path file = sparse(name, big);
    const std::string message = refusal_of([&] { load_filter_bank(file, options); });
    EXPECT_NE(message.find(file.string()), std::string::npos) << message;
    EXPECT_NE(message.find("without reading it"), std::string::npos) << message;
  }
  // Raw taps are bounded exactly: max_taps of them load, one more does not.
  options.max_taps = 1000;
  {
    std::vector<float> taps(1000, 0.001f);
    std::ofstream(dir / "exact.f32", std::ios::binary)
        .write(reinterpret_cast<const char*>(taps.data()), std::streamsize(taps.size() * 4));
    EXPECT_EQ(load_filter_bank(dir / "exact.f32", options).taps(0).size(), 1000u);
    taps.push_back(0.001f);
    std::ofstream(dir / "over.f32", std::ios::binary)
        .write(reinterpret_cast<const char*>(taps.data()), std::streamsize(taps.size() * 4));
    const std::string message = refusal_of([&] { load_filter_bank(dir / "over.f32", options); });
    EXPECT_NE(message.find("1001 taps"), std::string::npos) << message;
  }
  // An impulse response: by the frames its header declares, before a sample is read.
  write_float_wav(dir / "long.wav", std::vector<float>(2000, 0.001f), 1);
  const std::string message = refusal_of([&] { load_filter_bank(dir / "long.wav", options); });
  EXPECT_NE(message.find("2000 frames"), std::string::npos) << message;
  EXPECT_NE(message.find("before reading it"), std::string::npos) << message;

  const fs::path config = sparse("huge.toml", big);
  const std::string config_message = refusal_of([&] { load_live_config(config); });
  EXPECT_NE(config_message.find("without reading it"), std::string::npos) << config_message;
  const std::string matrix_message = refusal_of([&] { load_matrix_file(config, {}); });
  EXPECT_NE(matrix_message.find("without reading it"), std::string::npos) << matrix_message;
}

TEST(HostileFiles, ProcessRefusesAFifoOrDeviceAsTapsOrMatrixAtOnceAndWritesNothing) {
  TempDir dir{"tapstream-hostile"};
  write_float_wav(dir / "in.wav", signal_of(4800, 7), 1);
  for (const Hostile& hostile : hostile_paths(dir, ".txt")) {
    for (const std::string option : {"--taps", "--matrix"}) {
      SCOPED_TRACE(hostile.path.string() + " as " + option);
      const auto listing = entries(dir.path());
      const auto started = Clock::now();
      const RunResult run =
          tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "out.wav").string(), option,
                          hostile.path.string(), "--backend", "cpu"});
      EXPECT_LT(Clock::now() - started, std::chrono::seconds(10)) << run.err;
      EXPECT_EQ(run.exit_code, 1) << run.err;
      expect_names(run.err, hostile);
      EXPECT_EQ(entries(dir.path()), listing) << run.err;
    }
  }
}

// True once process `pid` holds `file` open (its signal handlers are
// installed before it opens its input).
bool holds_open(pid_t pid, const fs::path& file) {
  std::error_code error;
  for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", error)) {
    if (fs::read_symlink(fd.path(), error) == file) return true;
  }
  return false;
}

// A FIFO as the input is read by design (it is how a pipe is named); while
// it has no writer, or its writer stalls, `process` waits, and a signal ends
// the wait at once: exit 128 + the signal, no output.
TEST(HostileFiles, ProcessWaitingOnAFifoInputEndsOnASignalAndLeavesNoOutput) {
  TempDir dir{"tapstream-hostile"};
  std::ofstream(dir / "taps.txt") << "0.5\n";
  ASSERT_EQ(::mkfifo((dir / "in.wav").c_str(), 0600), 0);
  // A WAV header and a little audio, then nothing (the writer keeps the FIFO open).
  write_float_wav(dir / "header.wav", signal_of(480, 8), 1);
  const std::string stalled_start = read_text(dir / "header.wav");
  for (const bool writer_stalls : {false, true}) {
    for (const int signal_number : {SIGTERM, SIGINT, SIGHUP}) {
      SCOPED_TRACE(std::string(writer_stalls ? "stalled writer, " : "no writer, ") +
                   std::to_string(signal_number));
      const auto listing = entries(dir.path());
      const fs::path err = dir.path().string() + ".fifo.err";
      Child child(
          {TAPSTREAM_BINARY, "process", (dir / "in.wav").string(), (dir / "out.wav").string(),
           "--taps", (dir / "taps.txt").string(), "--backend", "cpu", "-v"},
          "/dev/null", err);
      ASSERT_TRUE(child.started());
      int writer = -1;
      if (writer_stalls) {
        // Blocks until `process` opens its end: then it has started reading.
        writer = ::open((dir / "in.wav").c_str(), O_WRONLY);
        ASSERT_GE(writer, 0) << std::strerror(errno);
        ASSERT_EQ(::write(writer, stalled_start.data(), stalled_start.size()),
                  ssize_t(stalled_start.size()));
        // Waiting for more: the header was read once the run says what its input is.
        ASSERT_TRUE(testing::wait_until(
            testing::long_wait, [&] { return read_text(err).find("engine:") != std::string::npos; },
            [&] { return read_text(err); }));
      } else {
        ASSERT_TRUE(testing::wait_until(
            testing::long_wait, [&] { return holds_open(child.pid(), dir / "in.wav"); },
            [&] { return "the input FIFO not open yet; " + read_text(err); }));
      }
      const auto signalled = Clock::now();
      child.signal(signal_number);
      const int status = child.wait_for(std::chrono::seconds(10));
      const auto took = Clock::now() - signalled;
      if (writer >= 0) ::close(writer);
      const std::string messages = read_text(err);
      fs::remove(err);
      EXPECT_EQ(status, 128 + signal_number) << messages;
      EXPECT_LT(took, kAtOnce) << messages;
      EXPECT_NE(messages.find("interrupted by"), std::string::npos) << messages;
      EXPECT_EQ(entries(dir.path()), listing) << messages;
    }
  }
}

// The same on the output side: a FIFO output with no reader yet, or one
// whose reader has stopped reading (more than a pipe holds is written).
TEST(HostileFiles, ProcessWaitingOnAFifoOutputEndsOnASignal) {
  TempDir dir{"tapstream-hostile"};
  std::ofstream(dir / "taps.txt") << "0.5\n";
  write_float_wav(dir / "in.wav", signal_of(48000 * 4, 12), 2);  // 1.5 MB of output
  ASSERT_EQ(::mkfifo((dir / "out.wav").c_str(), 0600), 0);
  for (const bool reader_stalls : {false, true}) {
    SCOPED_TRACE(reader_stalls ? "stalled reader" : "no reader");
    const fs::path err = dir.path().string() + ".out.err";
    Child child({TAPSTREAM_BINARY, "process", (dir / "in.wav").string(), (dir / "out.wav").string(),
                 "--taps", (dir / "taps.txt").string(), "--backend", "cpu", "-v"},
                "/dev/null", err);
    ASSERT_TRUE(child.started());
    int reader = -1;
    if (reader_stalls) {
      reader = ::open((dir / "out.wav").c_str(), O_RDONLY);  // waits for the writer
      ASSERT_GE(reader, 0) << std::strerror(errno);
      // The pipe fills (64 KiB) and the writer waits: seen as a full pipe.
      int queued = 0;
      ASSERT_TRUE(testing::wait_until(
          testing::long_wait,
          [&] { return ::ioctl(reader, FIONREAD, &queued) == 0 && queued >= 65536; },
          [&] { return std::to_string(queued) + " bytes in the pipe; " + read_text(err); }));
    } else {
      // Its engine is ready (-v says so) just before it opens its output.
      ASSERT_TRUE(testing::wait_for_daemon(
          child, [&] { return read_text(err).find("engine:") != std::string::npos; }, err));
    }
    const auto signalled = Clock::now();
    child.signal(SIGTERM);
    const int status = child.wait_for(std::chrono::seconds(10));
    const auto took = Clock::now() - signalled;
    if (reader >= 0) ::close(reader);
    const std::string messages = read_text(err);
    fs::remove(err);
    EXPECT_EQ(status, 128 + SIGTERM) << messages;
    EXPECT_LT(took, kAtOnce) << messages;
    EXPECT_NE(messages.find("interrupted by SIGTERM"), std::string::npos) << messages;
  }
}

// A pipe into `process` still works (it is how `-` and FIFOs are used).
TEST(HostileFiles, ProcessStillReadsAFifoInputToItsEnd) {
  TempDir dir{"tapstream-hostile"};
  std::ofstream(dir / "taps.txt") << "0.5\n";
  const std::vector<float> input = signal_of(48000, 9);
  write_float_wav(dir / "source.wav", input, 1);
  ASSERT_EQ(::mkfifo((dir / "in.wav").c_str(), 0600), 0);
  Child child({TAPSTREAM_BINARY, "process", (dir / "in.wav").string(), (dir / "out.wav").string(),
               "--taps", (dir / "taps.txt").string(), "--backend", "cpu"},
              "/dev/null", dir / "err.txt");
  std::thread feeder([&] {
    const std::string bytes = read_text(dir / "source.wav");
    const int fd = ::open((dir / "in.wav").c_str(), O_WRONLY);
    // Slowly, in pieces, so that the reader waits for data many times.
    for (std::size_t at = 0; fd >= 0 && at < bytes.size(); at += 20000) {
      const std::size_t n = std::min<std::size_t>(20000, bytes.size() - at);
      if (::write(fd, bytes.data() + at, n) != ssize_t(n)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the stimulus: a slow writer
    }
    if (fd >= 0) ::close(fd);
  });
  const int status = child.wait_for(std::chrono::seconds(60));
  feeder.join();
  EXPECT_EQ(status, 0) << read_text(dir / "err.txt");
  const std::vector<float> output = read_samples(dir / "out.wav");
  ASSERT_EQ(output.size(), input.size());
  for (std::size_t i = 0; i < input.size(); ++i) ASSERT_NEAR(output[i], 0.5f * input[i], 1e-6) << i;
}

TEST(HostileFiles, NonFiniteInputSamplesAreZeroedCountedAndReportedWithExit3UnlessStrict) {
  TempDir dir{"tapstream-hostile"};
  const std::uint32_t seed = 20261125;
  std::printf("seed %u\n", seed);
  const int channels = 2;
  const std::size_t frames = 20000;
  std::vector<float> clean = signal_of(frames * channels, seed);
  std::vector<float> damaged = clean;
  damaged[1000 * channels + 1] = std::numeric_limits<float>::quiet_NaN();
  damaged[3000 * channels + 0] = std::numeric_limits<float>::infinity();
  damaged[3001 * channels + 0] = -std::numeric_limits<float>::infinity();
  for (const std::size_t i : {1000 * channels + 1, 3000 * channels, 3001 * channels}) clean[i] = 0;
  write_float_wav(dir / "damaged.wav", damaged, channels);
  write_float_wav(dir / "clean.wav", clean, channels);
  std::vector<float> taps = signal_of(301, seed + 1);
  for (auto& t : taps) t *= 0.02f;  // well under full scale: any clip report would be the NaN's
  {
    std::ofstream out(dir / "taps.txt");
    for (const float t : taps) out << t << "\n";
  }
  const auto process = [&](const std::string& in, const std::string& out,
                           std::vector<std::string> more) {
    std::vector<std::string> args{"process", (dir / in).string(),         (dir / out).string(),
                                  "--taps",  (dir / "taps.txt").string(), "--backend",
                                  "cpu"};
    args.insert(args.end(), more.begin(), more.end());
    return tapstream(dir, args);
  };
  const RunResult reference = process("clean.wav", "clean-out.wav", {});
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  for (const bool quiet : {false, true}) {
    const RunResult run =
        process("damaged.wav", "out.wav",
                quiet ? std::vector<std::string>{"-q"} : std::vector<std::string>{});
    EXPECT_EQ(run.exit_code, 3) << run.err;
    EXPECT_NE(run.err.find((dir / "damaged.wav").string() +
                           ": 3 NaN or infinite samples replaced by 0, the first at frame 1000 "
                           "(counting from 0) of channel 2"),
              std::string::npos)
        << run.err;
    // Exactly the clean input's output: nothing spread beyond the bad samples.
    EXPECT_EQ(read_samples(dir / "out.wav"), read_samples(dir / "clean-out.wav"));
  }
  // 16-bit output: no clip report for samples that were never there.
  const RunResult pcm16 = process("damaged.wav", "out16.wav", {"--format", "pcm16"});
  EXPECT_EQ(pcm16.exit_code, 3) << pcm16.err;
  EXPECT_EQ(pcm16.err.find("clipped"), std::string::npos) << pcm16.err;
  // --normalize measures the finite output: its peak lands where asked.
  const RunResult normalized = process("damaged.wav", "norm.wav", {"--normalize", "-6"});
  EXPECT_EQ(normalized.exit_code, 3) << normalized.err;
  float peak = 0.0f;
  for (const float x : read_samples(dir / "norm.wav")) {
    ASSERT_TRUE(std::isfinite(x));
    peak = std::max(peak, std::fabs(x));
  }
  EXPECT_NEAR(20.0 * std::log10(double(peak)), -6.0, 0.01);

  const auto listing = entries(dir.path());
  const RunResult strict = process("damaged.wav", "strict.wav", {"--strict"});
  EXPECT_EQ(strict.exit_code, 1) << strict.err;
  EXPECT_NE(strict.err.find("frame 1000 (counting from 0) of channel 2"), std::string::npos)
      << strict.err;
  EXPECT_NE(strict.err.find("--strict"), std::string::npos) << strict.err;
  EXPECT_EQ(entries(dir.path()), listing) << strict.err;
}

TEST(HostileFiles, NonFiniteTapsAreRefusedByFileAndPosition) {
  TempDir dir{"tapstream-hostile"};
  CoefficientFileOptions options;
  std::ofstream(dir / "nan.txt") << "0.5\n0.25\nnan\n";
  std::string message = refusal_of([&] { load_filter_bank(dir / "nan.txt", options); });
  EXPECT_NE(message.find((dir / "nan.txt").string() + ":3:"), std::string::npos) << message;
  const std::vector<float> raw = {0.5f, std::numeric_limits<float>::infinity()};
  std::ofstream(dir / "inf.f32", std::ios::binary)
      .write(reinterpret_cast<const char*>(raw.data()), 8);
  message = refusal_of([&] { load_filter_bank(dir / "inf.f32", options); });
  EXPECT_NE(message.find("tap 1 (counting from 0) is infinite"), std::string::npos) << message;
  write_float_wav(dir / "nan.wav", {0.5f, 0.25f, std::numeric_limits<float>::quiet_NaN()}, 1);
  message = refusal_of([&] { load_filter_bank(dir / "nan.wav", options); });
  EXPECT_NE(message.find("frame 2 (counting from 0) of channel 1 is NaN"), std::string::npos)
      << message;
}

// A 16-bit stereo WAV whose data chunk declares `declared` bytes but holds 2000.
std::string wav_declaring(std::uint32_t declared) {
  const auto le32 = [](std::uint32_t v) {
    std::string s(4, '\0');
    for (int i = 0; i < 4; ++i) s[std::size_t(i)] = char((v >> (8 * i)) & 0xff);
    return s;
  };
  const auto le16 = [](std::uint16_t v) { return std::string{char(v & 0xff), char(v >> 8)}; };
  const std::uint32_t riff = declared > 0xffffffffu - 36 ? 0xffffffffu : declared + 36;
  std::string wav = "RIFF" + le32(riff) + "WAVE";
  wav += "fmt " + le32(16) + le16(1) + le16(2) + le32(48000) + le32(48000 * 4) + le16(4) + le16(16);
  wav += "data" + le32(declared);
  std::string data(2000, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = char((i * 37) & 0x3f);
  return wav + data;
}

TEST(HostileFiles, AHeaderDeclaringMoreDataThanTheFileHoldsIsDamagedButAPipesUnknownLengthIsNot) {
  TempDir dir{"tapstream-hostile"};
  std::ofstream(dir / "taps.txt") << "0.5\n";
  const auto process_file = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return tapstream(dir, {"process", (dir / name).string(), (dir / "out.wav").string(), "--taps",
                           (dir / "taps.txt").string(), "--backend", "cpu"});
  };
  const RunResult damaged = process_file("damaged.wav", wav_declaring(0xfffffff0u));
  EXPECT_EQ(damaged.exit_code, 3) << damaged.err;
  EXPECT_NE(damaged.err.find((dir / "damaged.wav").string() + ": cut short"), std::string::npos)
      << damaged.err;
  EXPECT_EQ(read_samples(dir / "out.wav").size(), 1000u);  // 500 frames of 2 channels, filtered
  // The lengths a writer to a pipe leaves (sox: 0x7ffff000 in whole frames;
  // ffmpeg: 0xffffffff) say "unknown", not "this much": no damage, in a file
  // saved from a pipe or through a pipe.
  for (const std::uint32_t unknown : {0x7ffff000u, 0xffffffffu}) {
    SCOPED_TRACE(unknown);
    const RunResult saved = process_file("saved.wav", wav_declaring(unknown));
    EXPECT_EQ(saved.exit_code, 0) << saved.err;
    EXPECT_EQ(saved.err.find("cut short"), std::string::npos) << saved.err;
  }
  // Through a pipe nothing says how long the stream is: never damage.
  const std::string command =
      "cat " + (dir / "damaged.wav").string() + " | '" + std::string(TAPSTREAM_BINARY) +
      "' process - " + (dir / "piped.wav").string() + " --taps " + (dir / "taps.txt").string() +
      " --backend cpu 2>" + (dir / "piped.err").string();
  const int status = std::system(command.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_text(dir / "piped.err");
  EXPECT_EQ(read_text(dir / "piped.err").find("cut short"), std::string::npos);
  EXPECT_EQ(read_samples(dir / "piped.wav").size(), 1000u);
}

// The daemon, as a user meets it: `ctl load` of a device or FIFO is refused
// at once (the control thread stays free: status answers, SIGTERM ends it),
// and NaN in its input is counted in `ctl status` and never reaches the output.
class HostileDaemonTest : public ::testing::Test {
 protected:
  void start(const std::vector<float>& input) {
    write_float_wav(dir_ / "in.wav", input, 2);
    std::ofstream(dir_ / "taps.txt") << "0.5\n0.25\n";
    std::ofstream(dir_ / "live.toml")
        << "sample_rate = 48000\nchannels = 2\n[input]\nfile = \"in.wav\"\nrealtime = true\n"
        << "[output]\nfile = \"out.wav\"\n[filter]\nfile = \"taps.txt\"\n[engine]\nbackend = "
           "\"cpu\"\n[control]\nsocket = \""
        << socket().string() << "\"\n";
    daemon_ = std::make_unique<Child>(std::vector<std::string>{TAPSTREAM_BINARY, "run", "--config",
                                                               (dir_ / "live.toml").string()},
                                      dir_ / "daemon.out", dir_ / "daemon.err");
    ASSERT_TRUE(testing::wait_for_daemon(
        *daemon_,
        [&] { return read_text(dir_ / "daemon.err").find("running:") != std::string::npos; },
        dir_ / "daemon.err"));
  }

  fs::path socket() const { return dir_ / "ctl" / "control.sock"; }

  nlohmann::json ctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv{TAPSTREAM_BINARY, "ctl", "--socket", socket().string()};
    argv.insert(argv.end(), args.begin(), args.end());
    {
      Child child(argv, dir_ / "ctl.out", dir_ / "ctl.err");
      EXPECT_NE(child.wait_for(std::chrono::seconds(20)), -2) << "ctl did not answer";
    }
    return nlohmann::json::parse(read_text(dir_ / "ctl.out"), nullptr, false);
  }

  TempDir dir_{"tapstream-hostile-daemon"};
  std::unique_ptr<Child> daemon_;
};

TEST_F(HostileDaemonTest, CtlLoadOfADeviceOrFifoIsRefusedAtOnceAndTheDaemonStaysResponsive) {
  ASSERT_NO_FATAL_FAILURE(start(std::vector<float>(48000 * 2 * 10, 0.0f)));
  ASSERT_EQ(::mkfifo((dir_ / "fifo.txt").c_str(), 0600), 0);
  for (const Hostile& hostile : std::vector<Hostile>{{"/dev/zero", "character device"},
                                                     {"/dev/urandom", "character device"},
                                                     {dir_ / "fifo.txt", "FIFO"}}) {
    SCOPED_TRACE(hostile.path.string());
    const auto started = Clock::now();
    const nlohmann::json reply = ctl({"load", "0", hostile.path.string()});
    EXPECT_LT(Clock::now() - started, std::chrono::seconds(5));
    EXPECT_FALSE(reply.value("ok", true)) << reply;
    expect_names(reply.value("error", ""), hostile);
  }
  EXPECT_TRUE(ctl({"status"}).value("ok", false));
  daemon_->signal(SIGTERM);
  EXPECT_EQ(daemon_->wait_for(std::chrono::seconds(10)), 143) << read_text(dir_ / "daemon.err");
}

TEST_F(HostileDaemonTest, NonFiniteInputIsCountedInStatusAndNeverReachesTheOutput) {
  std::vector<float> input = signal_of(48000 * 2 * 3, 11);
  input[2400 * 2 + 0] = std::numeric_limits<float>::quiet_NaN();
  input[2400 * 2 + 1] = std::numeric_limits<float>::infinity();
  ASSERT_NO_FATAL_FAILURE(start(input));
  // Until the bad samples were counted and 0.2 s of output (past them) made.
  nlohmann::json status;
  EXPECT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] {
        status = ctl({"status"});
        const auto frames = status.value("blocks", 0) * status.value("block_frames", 0);
        return status.value("nonfinite_inputs", 0) >= 2 && frames >= 9600;
      },
      [&] { return status.dump(); }, std::chrono::milliseconds(50)));
  EXPECT_EQ(status.value("nonfinite_inputs", -1), 2) << status;
  ctl({"stop"});
  EXPECT_EQ(daemon_->wait_for(std::chrono::seconds(20)), 0) << read_text(dir_ / "daemon.err");
  const std::vector<float> output = read_samples(dir_ / "out.wav");
  ASSERT_GT(output.size(), 2400u * 2u + 4800u) << "the output passes the bad samples";
  for (std::size_t i = 0; i < output.size(); ++i) ASSERT_TRUE(std::isfinite(output[i])) << i;
}

}  // namespace
}  // namespace tapstream

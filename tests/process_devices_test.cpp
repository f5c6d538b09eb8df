// `tapstream process --devices`: a batch or job list spread over several
// engines, one per GPU, each file handed to the next free engine. Here the
// GPUs are stood in for by CPU engines (run_batch with a list of devices and
// the CPU backend: one lane per "device", the same work queue), so the queue
// is tested on any machine: every file done exactly once and exactly as one
// engine does it, the lines in the batch's order, a bad row named and
// skipped (exit 3) with nothing half-written; and bad --devices lists are
// usage errors naming the culprit. tests/cuda_devices_test.cpp runs the
// same over real GPUs.

#include <gtest/gtest.h>
#include <sndfile.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/commands/process_batch.hpp"
#include "tests/process_support.hpp"
#include "tests/reference.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::random_signal;
using testing::read_text;
using testing::TempDir;

void write_sound(const fs::path& file, int channels, std::size_t frames, std::uint64_t seed) {
  std::vector<float> samples = random_signal(frames * std::size_t(channels), seed);
  for (float& x : samples) x *= 0.25f;
  SF_INFO info{};
  info.channels = channels;
  info.samplerate = 48000;
  info.format = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
  SNDFILE* f = sf_open(file.c_str(), SFM_WRITE, &info);
  ASSERT_NE(f, nullptr) << file;
  sf_writef_float(f, samples.data(), sf_count_t(frames));
  sf_close(f);
}

void write_taps(const fs::path& file, std::size_t taps, std::uint64_t seed) {
  std::ofstream out(file);
  for (const float t : random_signal(taps, seed)) out << double(t) * 0.1 << "\n";
}

// Every file under `dir` (relative name -> bytes).
std::map<std::string, std::string> contents_under(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = read_text(e.path());
  }
  return files;
}

// run_batch with its log captured.
struct BatchRun {
  int status = -1;
  std::string log;
};

BatchRun run_logged(const BatchSettings& settings) {
  std::ostringstream log;
  const auto previous = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>(
      "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log));
  logger->set_pattern("%l %v");
  spdlog::set_default_logger(logger);
  BatchRun run;
  try {
    run.status = run_batch(settings);
  } catch (...) {
    spdlog::set_default_logger(previous);
    throw;
  }
  spdlog::set_default_logger(previous);
  run.log = log.str();
  return run;
}

BatchSettings cpu_batch(const fs::path& taps) {
  BatchSettings settings;
  settings.filters.taps = taps;
  settings.filters.backend = Backend::cpu;
  settings.filters.block_frames = 512;
  return settings;
}

// The log's lines that report a file done ("IN -> OUT: ..."), in order.
std::vector<std::string> done_lines(const std::string& log) {
  std::vector<std::string> lines;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.find(" -> ") != std::string::npos) lines.push_back(line);
  }
  return lines;
}

TEST(ProcessDevices, ABatchOverThreeEnginesWritesEveryFileOnceExactlyAsOneEngineDoes) {
  TempDir dir("tapstream-devices");
  fs::create_directories(dir / "in");
  // Files of two channel counts (two groups) and very different lengths, so
  // that the lanes finish out of order.
  const std::vector<std::size_t> frames = {40000, 300, 9000, 1, 25000, 700, 3000, 12000, 5};
  for (std::size_t i = 0; i < frames.size(); ++i) {
    write_sound(dir / ("in/take" + std::to_string(i) + ".wav"), i % 3 == 2 ? 1 : 2, frames[i],
                100 + i);
  }
  write_taps(dir / "taps.txt", 1500, 7);

  BatchSettings one = cpu_batch(dir / "taps.txt");
  one.inputs = {dir / "in"};
  one.out_dir = dir / "one";
  const BatchRun by_one = run_logged(one);
  ASSERT_EQ(by_one.status, 0) << by_one.log;

  BatchSettings three = one;
  three.out_dir = dir / "three";
  three.devices = {0, 1, 2};
  const BatchRun by_three = run_logged(three);
  ASSERT_EQ(by_three.status, 0) << by_three.log;

  // Byte for byte the same files, nothing else (no temporary left behind).
  const auto want = contents_under(dir / "one");
  EXPECT_EQ(want.size(), frames.size());
  EXPECT_EQ(contents_under(dir / "three"), want);

  // One line per file, in the batch's order (group after group, each in
  // input order) whichever lane finished first, each naming its engine.
  const std::vector<std::string> lines_one = done_lines(by_one.log);
  const std::vector<std::string> lines_three = done_lines(by_three.log);
  ASSERT_EQ(lines_three.size(), lines_one.size()) << by_three.log;
  for (std::size_t i = 0; i < lines_one.size(); ++i) {
    const std::string input = lines_one[i].substr(0, lines_one[i].find(" -> "));
    EXPECT_EQ(lines_three[i].rfind(input + " -> ", 0), 0u) << lines_three[i];
    EXPECT_NE(lines_three[i].find(" on GPU "), std::string::npos) << lines_three[i];
    EXPECT_EQ(lines_one[i].find(" on GPU "), std::string::npos) << lines_one[i];
  }
  EXPECT_NE(by_three.log.find("9 files done"), std::string::npos) << by_three.log;
}

TEST(ProcessDevices, ABadRowIsNamedAndSkippedWhileTheOtherLanesDoTheRest) {
  TempDir dir("tapstream-devices");
  fs::create_directories(dir / "set");
  std::ofstream csv(dir / "set/jobs.csv");
  csv << "input,filter,output\n";
  for (int i = 0; i < 6; ++i) {
    write_sound(dir / ("set/in" + std::to_string(i) + ".wav"), 1, 2000 + 1000 * i, 40 + i);
    write_taps(dir / ("set/f" + std::to_string(i % 2) + ".txt"), 200 + 300 * (i % 2), 60 + i % 2);
    // Row 4 (line 5) names a filter that does not exist.
    csv << "in" << i << ".wav,";
    if (i == 3) {
      csv << "missing.txt";
    } else {
      csv << 'f' << i % 2 << ".txt";
    }
    csv << ",out/o" << i << ".wav\n";
  }
  csv.close();
  BatchSettings settings = cpu_batch({});
  settings.job_list = dir / "set/jobs.csv";
  settings.devices = {0, 1};
  const BatchRun run = run_logged(settings);
  EXPECT_EQ(run.status, 3) << run.log;
  EXPECT_NE(run.log.find("error " + (dir / "set/jobs.csv").string() + ":5: "), std::string::npos)
      << run.log;
  EXPECT_NE(run.log.find("missing.txt"), std::string::npos) << run.log;
  EXPECT_NE(run.log.find("1 of 6 rows failed"), std::string::npos) << run.log;
  std::set<std::string> outputs;
  for (const auto& [name, bytes] : contents_under(dir / "set/out")) outputs.insert(name);
  EXPECT_EQ(outputs, (std::set<std::string>{"o0.wav", "o1.wav", "o2.wav", "o4.wav", "o5.wav"}));
}

struct RunResult {
  int exit_code = -1;
  std::string err;
};

RunResult tapstream(const TempDir& dir, const std::vector<std::string>& args) {
  std::string command = TAPSTREAM_BINARY;
  for (const auto& a : args) command += " '" + a + "'";
  const fs::path err = dir / "stderr.txt";
  command += " </dev/null >/dev/null 2>'" + err.string() + "'";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), read_text(err)};
}

TEST(ProcessDevices, BadDeviceListsAreUsageErrorsNamingTheCulprit) {
  TempDir dir("tapstream-devices");
  fs::create_directories(dir / "in");
  write_sound(dir / "in/a.wav", 1, 100, 1);
  write_taps(dir / "taps.txt", 10, 2);
  const std::vector<std::string> batch = {"process",   (dir / "in").string(),
                                          "--out-dir", (dir / "out").string(),
                                          "--taps",    (dir / "taps.txt").string()};
  const auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = batch;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  RunResult run = tapstream(dir, with({"--devices", "0,0"}));
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("--devices 0,0: GPU 0 is named twice"), std::string::npos) << run.err;
  run = tapstream(dir, with({"--devices", "0,x"}));
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("'x' is not a GPU number"), std::string::npos) << run.err;
  run = tapstream(dir, with({"--devices", "0", "--backend", "cpu"}));
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("--backend cpu runs on the CPU engine"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(dir / "out"));
  // GPU 7: not there on a machine with fewer GPUs (a usage error), or no GPU
  // at all, where auto runs the CPU engine and says the list is ignored.
  run = tapstream(dir, with({"--devices", "7"}));
  if (run.exit_code == 2) {
    EXPECT_NE(run.err.find("--devices 7: GPU 7 does not exist: there"), std::string::npos)
        << run.err;
  } else {
    EXPECT_EQ(run.exit_code, 0) << run.err;
    EXPECT_NE(run.err.find("--devices 7 is ignored: the CPU engine runs"), std::string::npos)
        << run.err;
  }
}

}  // namespace
}  // namespace tapstream

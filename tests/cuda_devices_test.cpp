// Every GPU of the host: a matrix sharded by output over two GPUs
// (dsp/model/sharded_engine through the engine factory) filters as one GPU
// does, and as the float64 reference says, through swaps and reset; a call
// in two halves (start_process, finish_process) is the call; and a batch
// over two GPUs writes the same files as over one. Skipped without two GPUs
// (the split call also runs on one).

#include <gtest/gtest.h>
#include <sndfile.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "daemon/engine_factory.hpp"
#include "tests/cuda_test_support.hpp"
#include "tests/matrix_support.hpp"
#include "tests/process_support.hpp"
#include "tests/reference.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::announce;
using testing::make_path;
using testing::random_signal;
using testing::random_signals;
using testing::reference_output;
using testing::relative_error;
using testing::run_stream;

class TwoGpus : public testing::CudaDeviceTest {
 protected:
  void SetUp() override {
    testing::CudaDeviceTest::SetUp();
    if (IsSkipped()) return;
    if (cuda_device_count() < 2) {
      GTEST_SKIP() << "one GPU (" << cuda_device_count() << "): sharding needs two";
    }
  }
};

using OneGpu = testing::CudaDeviceTest;

RoutingMatrix diagonal_matrix(std::size_t channels, std::size_t taps, std::uint64_t seed) {
  std::vector<std::vector<float>> filters;
  for (std::size_t c = 0; c < channels; ++c) filters.push_back(random_signal(taps - c, seed + c));
  return RoutingMatrix::diagonal(FilterBank::per_channel(std::move(filters)));
}

RoutingMatrix dense_matrix(std::uint64_t seed) {
  std::vector<MatrixPath> paths;
  for (std::size_t o = 0; o < 6; ++o) {
    for (std::size_t i = 0; i < 4; ++i) {
      if ((o + i) % 3 == 0) continue;
      paths.push_back(make_path(i, o, random_signal(100 + 400 * i + 37 * o, seed + 10 * o + i),
                                -1.0 * double(o), i, (o + i) % 2 == 1));
    }
  }
  return RoutingMatrix::make(4, 6, std::move(paths));
}

EngineOptions on(std::vector<int> devices) {
  EngineOptions options;
  options.max_block_frames = 1024;
  options.devices = std::move(devices);
  return options;
}

void expect_reference(const RoutingMatrix& matrix, const std::vector<std::vector<float>>& inputs,
                      const std::vector<std::vector<float>>& got, const std::string& what) {
  for (std::size_t o = 0; o < matrix.outputs(); ++o) {
    EXPECT_LE(relative_error(got[o], reference_output(matrix, inputs, o)), 2e-5)
        << what << ", output " << o;
  }
}

TEST_F(TwoGpus, AShardedMatrixFiltersAsOneGpuDoesAndAsTheReferenceSays) {
  const std::uint64_t seed = announce("sharded CUDA engine", 26301);
  for (const bool diagonal : {true, false}) {
    const RoutingMatrix matrix = diagonal ? diagonal_matrix(48, 3000, seed) : dense_matrix(seed);
    const auto inputs = random_signals(matrix.inputs(), 20000, seed + 1);
    for (const Layout layout : {Layout::interleaved, Layout::planar}) {
      const std::string what = std::string(diagonal ? "diagonal" : "dense") +
                               (layout == Layout::planar ? ", planar" : ", interleaved");
      auto one = make_engine(Backend::cuda, matrix, on({}));
      auto two = make_engine(Backend::cuda, matrix, on({0, 1}));
      EXPECT_NE(two->description().find("sharded by output over 2 engines"), std::string::npos)
          << two->description();
      std::mt19937_64 rng_one(seed), rng_two(seed);
      const auto by_one = run_stream(*one, inputs, rng_one, layout);
      const auto by_two = run_stream(*two, inputs, rng_two, layout);
      expect_reference(matrix, inputs, by_two, what);
      for (std::size_t o = 0; o < matrix.outputs(); ++o) {
        EXPECT_LE(relative_error(by_two[o], by_one[o]), 1e-6) << what << ", output " << o;
      }
    }
  }
}

TEST_F(TwoGpus, ASwapAndAResetReachBothGpus) {
  const std::uint64_t seed = announce("sharded CUDA swaps", 26302);
  const RoutingMatrix before = diagonal_matrix(16, 2000, seed);
  const RoutingMatrix after = diagonal_matrix(16, 1500, seed + 100);
  const auto inputs = random_signals(16, 8000, seed + 1);
  auto one = make_engine(Backend::cuda, before, on({}));
  auto two = make_engine(Backend::cuda, before, on({1, 0}));
  std::mt19937_64 rng_one(seed), rng_two(seed);
  run_stream(*one, inputs, rng_one, Layout::interleaved);
  run_stream(*two, inputs, rng_two, Layout::interleaved);
  one->set_matrix(after, true);
  two->set_matrix(after, true);
  auto by_one = run_stream(*one, inputs, rng_one, Layout::interleaved);
  auto by_two = run_stream(*two, inputs, rng_two, Layout::interleaved);
  for (std::size_t c = 0; c < 16; ++c) {
    EXPECT_LE(relative_error(by_two[c], by_one[c]), 1e-6) << "after the swap, channel " << c;
  }
  one->reset();
  two->reset();
  std::mt19937_64 rng_reset(seed + 5);
  by_two = run_stream(*two, inputs, rng_reset, Layout::planar);
  expect_reference(after, inputs, by_two, "after reset");
}

TEST_F(OneGpu, ACallInTwoHalvesIsTheWholeCall) {
  const std::uint64_t seed = announce("split calls", 26303);
  const RoutingMatrix matrix = diagonal_matrix(8, 4096, seed);
  const auto inputs = random_signals(8, 6000, seed + 1);
  auto engine = make_engine(Backend::cuda, matrix, on({}));
  // Blocks small (zero-copy launches) and large (chunks), each started and
  // then finished, with other host work between.
  std::vector<std::vector<float>> got(8, std::vector<float>(6000));
  std::vector<float> in, out;
  const std::vector<std::size_t> sizes = {64, 1000, 7, 1024, 128, 1, 900};
  std::size_t start = 0;
  for (std::size_t k = 0; start < 6000; ++k) {
    const std::size_t frames = std::min(sizes[k % sizes.size()], 6000 - start);
    in.assign(8 * frames, 0.0f);
    out.assign(8 * frames, -1.0f);
    for (std::size_t c = 0; c < 8; ++c)
      for (std::size_t f = 0; f < frames; ++f) in[f * 8 + c] = inputs[c][start + f];
    engine->start_process(in, out, frames, Layout::interleaved);
    std::vector<float> busy(std::size_t(1) << 16, 1.0f);  // host work while the GPU runs
    engine->finish_process();
    for (std::size_t c = 0; c < 8; ++c)
      for (std::size_t f = 0; f < frames; ++f) got[c][start + f] = out[f * 8 + c];
    start += frames;
  }
  expect_reference(matrix, inputs, got, "split calls");
}

void write_sound(const fs::path& file, int channels, std::size_t frames, std::uint64_t seed) {
  std::vector<float> samples = random_signal(frames * std::size_t(channels), seed);
  SF_INFO info{};
  info.channels = channels;
  info.samplerate = 48000;
  info.format = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
  SNDFILE* f = sf_open(file.c_str(), SFM_WRITE, &info);
  ASSERT_NE(f, nullptr) << file;
  sf_writef_float(f, samples.data(), sf_count_t(frames));
  sf_close(f);
}

std::map<std::string, std::string> contents_under(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    files[e.path().filename().string()] = testing::read_text(e.path());
  }
  return files;
}

// The tapstream beside this test when there is one (a bundle carried to a
// GPU machine, where the build tree's path does not exist), else the build's.
std::string tapstream_binary() {
  std::error_code error;
  const fs::path beside = fs::read_symlink("/proc/self/exe", error).parent_path() / "tapstream";
  return !error && fs::exists(beside) ? beside.string() : std::string(TAPSTREAM_BINARY);
}

int tapstream(const std::vector<std::string>& args, const fs::path& err) {
  std::string command = tapstream_binary();
  for (const auto& a : args) command += " '" + a + "'";
  command += " </dev/null >/dev/null 2>'" + err.string() + "'";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST_F(TwoGpus, ABatchOverTwoGpusWritesTheSameFilesAsOverOne) {
  testing::TempDir dir("tapstream-cuda-devices");
  fs::create_directories(dir / "in");
  for (int i = 0; i < 8; ++i) {
    write_sound(dir / ("in/take" + std::to_string(i) + ".wav"), 4, 20000 + 7919 * i, 500 + i);
  }
  {
    std::ofstream taps(dir / "taps.txt");
    for (const float t : random_signal(8192, 9)) taps << double(t) * 0.05 << "\n";
  }
  const auto batch = [&](const std::string& devices, const std::string& out) {
    return std::vector<std::string>{"process",   (dir / "in").string(),
                                    "--out-dir", (dir / out).string(),
                                    "--taps",    (dir / "taps.txt").string(),
                                    "--backend", "cuda",
                                    "--devices", devices};
  };
  ASSERT_EQ(tapstream(batch("0", "one"), dir / "one.err"), 0)
      << testing::read_text(dir / "one.err");
  ASSERT_EQ(tapstream(batch("all", "two"), dir / "two.err"), 0)
      << testing::read_text(dir / "two.err");
  const std::string log = testing::read_text(dir / "two.err");
  EXPECT_NE(log.find(" on GPU 0"), std::string::npos) << log;
  const auto want = contents_under(dir / "one");
  EXPECT_EQ(want.size(), 8u);
  EXPECT_EQ(contents_under(dir / "two"), want);
}

}  // namespace
}  // namespace tapstream

// The CUDA engine's native routing matrix, with each of its MAC kernels (tiled,
// cuBLAS), against a float64 reference of each output as the sum of its paths:
// at random call sizes (mostly launched one by one), at fixed call sizes
// (replayed as CUDA graphs), and through a crossfaded swap; skips, with the
// reason, where there is no usable GPU. Per-path updates (set_paths from host
// taps, set_paths_device from device arrays) at every call against the
// float64 piecewise crossfaded reference (tests/path_updates_support.hpp).

#include "kernels/matrix/cuda_matrix_engine.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/engine_factory.hpp"
#include "dsp/cpu/cpu_matrix_engine.hpp"
#include "kernels/cuda_engine.hpp"
#include "matrix_support.hpp"
#include "path_updates_support.hpp"

namespace tapstream {
namespace {

using testing::make_path;
using testing::random_signal;
using testing::reference_output;
using testing::relative_error;
using testing::run_stream;

class CudaMatrixEngineTest : public ::testing::TestWithParam<CudaMatrixKernel> {
 protected:
  void SetUp() override {
    std::string reason;
    if (!cuda_device_available(&reason)) GTEST_SKIP() << "no usable CUDA device: " << reason;
  }
  static std::unique_ptr<MatrixEngine> make(const RoutingMatrix& m, std::size_t max_block) {
    EngineOptions options;
    options.max_block_frames = max_block;
    options.cuda.matrix_kernel = GetParam();
    return make_cuda_matrix_engine(m, options);
  }
};

TEST_P(CudaMatrixEngineTest, MixedLengthMatrixMatchesTheFloat64SumOfItsPathsAtAnyCallSize) {
  const std::uint64_t seed = 20261124;
  std::cout << "seed " << seed << "\n";
  std::mt19937_64 rng(seed);
  const RoutingMatrix matrix = testing::mixed_length_matrix(seed);
  // One-frame calls get a shorter stream: each frame is a call of its own.
  struct Case {
    std::size_t max_block, frames;
  };
  std::size_t stream_frames = 0;
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<double>> want;
  for (const Case c : {Case{1u << 16, 80000}, Case{128, 80000}, Case{1, 3000}}) {
    if (c.frames != stream_frames) {
      stream_frames = c.frames;
      inputs.clear();
      want.clear();
      for (std::size_t i = 0; i < 3; ++i) inputs.push_back(random_signal(c.frames, seed + 10 + i));
      for (std::size_t o = 0; o < 5; ++o) want.push_back(reference_output(matrix, inputs, o));
    }
    for (const Layout layout : {Layout::interleaved, Layout::planar}) {
      SCOPED_TRACE("blocks <= " + std::to_string(c.max_block) +
                   (layout == Layout::planar ? ", planar" : ", interleaved"));
      const auto engine = make(matrix, c.max_block);
      std::cout << engine->description() << "\n";
      const auto got = run_stream(*engine, inputs, rng, layout);
      for (std::size_t o = 0; o < 4; ++o) {
        EXPECT_LE(relative_error(got[o], want[o]), 1e-5) << "output " << o;
      }
      for (float v : got[4]) ASSERT_EQ(v, 0.0f) << "output 4 is reached by no path";
    }
  }
}

TEST_P(CudaMatrixEngineTest, FixedCallSizesReplayedAsGraphsMatchTheFloat64Sum) {
  const std::uint64_t seed = 20261125;
  std::cout << "seed " << seed << "\n";
  const RoutingMatrix matrix = testing::mixed_length_matrix(seed);
  // 128 in 128-frame segments: one chunk a call, each ending a segment; 96:
  // calls that cross segment boundaries at four different places; 1: one
  // frame a call in 64-frame segments.
  struct Case {
    std::size_t max_block, call, frames;
  };
  for (const Case c : {Case{128, 128, 20000}, Case{128, 96, 20000}, Case{1, 1, 2000}}) {
    SCOPED_TRACE("calls of " + std::to_string(c.call) + " frames");
    std::vector<std::vector<float>> inputs;
    for (std::size_t i = 0; i < 3; ++i) inputs.push_back(random_signal(c.frames, seed + 10 + i));
    const auto engine = make(matrix, c.max_block);
    std::vector<std::vector<float>> got(5, std::vector<float>(c.frames, -7.0f));
    std::vector<float> in(3 * c.call), out(5 * c.call);
    for (std::size_t start = 0; start < c.frames; start += c.call) {
      const std::size_t n = std::min(c.call, c.frames - start);
      for (std::size_t ch = 0; ch < 3; ++ch)
        for (std::size_t f = 0; f < n; ++f) in[f * 3 + ch] = inputs[ch][start + f];
      std::fill(out.begin(), out.end(), std::nanf(""));
      engine->process(in, out, n, Layout::interleaved);
      for (std::size_t ch = 0; ch < 5; ++ch)
        for (std::size_t f = 0; f < n; ++f) got[ch][start + f] = out[f * 5 + ch];
    }
    for (std::size_t o = 0; o < 4; ++o) {
      EXPECT_LE(relative_error(got[o], reference_output(matrix, inputs, o)), 1e-5)
          << "output " << o;
    }
    for (float v : got[4]) ASSERT_EQ(v, 0.0f) << "output 4 is reached by no path";
  }
}

TEST_P(CudaMatrixEngineTest, CrossfadedSwapMatchesTheCpuMatrixEngine) {
  const std::uint64_t seed = 91;
  std::cout << "seed " << seed << "\n";
  const auto [before, after] = testing::swap_pair(seed);
  const std::vector<float> in = random_signal(2 * 9000, seed + 6);
  EngineOptions options;
  options.max_block_frames = 1024;
  std::unique_ptr<MatrixEngine> engines[] = {make(before, 1024),
                                             make_cpu_matrix_engine(before, options)};
  std::vector<float> outs[2];
  for (int e = 0; e < 2; ++e) {
    outs[e].assign(in.size(), 0.0f);
    std::size_t start = 0;
    const auto run = [&](std::size_t n) {
      engines[e]->process(std::span<const float>(in).subspan(start * 2, n * 2),
                          std::span<float>(outs[e]).subspan(start * 2, n * 2), n,
                          Layout::interleaved);
      start += n;
    };
    while (start < 5003) run(std::min<std::size_t>(333, 5003 - start));
    engines[e]->set_matrix(after, /*crossfade=*/true);
    run(500);
    while (start < 9000) run(std::min<std::size_t>(1000, 9000 - start));
  }
  EXPECT_LE(relative_error(outs[0], outs[1]), 1e-5);
}

TEST_P(CudaMatrixEngineTest, ARerouteIsRefusedAndTheRunningMatrixKeepsFiltering) {
  const RoutingMatrix a = RoutingMatrix::make(2, 1, {make_path(0, 0, {1}), make_path(1, 0, {1})});
  const auto engine = make(a, 16);
  EXPECT_THROW(engine->set_matrix(
                   RoutingMatrix::make(2, 1, {make_path(1, 0, {1}), make_path(0, 0, {1})}), true),
               std::invalid_argument);
  const std::vector<float> in = {1, 2};
  std::vector<float> out(1);
  engine->process(in, out, 1, Layout::interleaved);
  EXPECT_NEAR(out[0], 3.0f, 1e-6);
}

// Delays from none to a second, on segment boundaries and off them, on paths
// of 1 to 3000 taps; two paths share an input and a delay; two outputs of
// one thread's pair (0 and 1) read one input at different delays.
RoutingMatrix delayed_matrix(std::uint64_t seed) {
  return RoutingMatrix::make(2, 5,
                             {make_path(0, 0, random_signal(3000, seed + 1), 0.0, 0),
                              make_path(1, 0, random_signal(1, seed + 2), -6.0, 24000, true),
                              make_path(0, 1, random_signal(700, seed + 3), 0.0, 4096),
                              make_path(1, 1, random_signal(65, seed + 4), 3.0, 48007),
                              make_path(0, 2, random_signal(512, seed + 5), 0.0, 511),
                              make_path(1, 2, random_signal(512, seed + 6), 0.0, 511),
                              make_path(0, 3, random_signal(2048, seed + 7), 0.0, 24000),
                              make_path(1, 3, random_signal(33, seed + 8), 0.0, 1),
                              make_path(1, 4, random_signal(100, seed + 9), 0.0, 64)});
}

TEST_P(CudaMatrixEngineTest, LongDelaysMatchTheFloat64ReferenceOfTheDelayedSignalAtAnyCallSize) {
  const std::uint64_t seed = 20261126;
  std::cout << "seed " << seed << "\n";
  std::mt19937_64 rng(seed);
  const RoutingMatrix matrix = delayed_matrix(seed);
  const std::vector<std::vector<float>> inputs = {random_signal(60000, seed + 20),
                                                  random_signal(60000, seed + 21)};
  std::vector<std::vector<double>> want;
  for (std::size_t o = 0; o < 5; ++o) want.push_back(reference_output(matrix, inputs, o));
  // 8192: one-partition segments of 8192 frames (delays under a segment and
  // over); 97: 128-frame segments, calls across their boundaries; 1: a frame
  // a call (graphs) in 64-frame segments, over a shorter stream.
  for (const std::size_t max_block : {std::size_t(8192), std::size_t(97), std::size_t(1)}) {
    SCOPED_TRACE("blocks <= " + std::to_string(max_block));
    const auto engine = make(matrix, max_block);
    std::cout << engine->description() << "\n";
    std::vector<std::vector<float>> in = inputs;
    std::vector<std::vector<double>> expected = want;
    if (max_block == 1) {
      for (auto& x : in) x.resize(52000);
      for (auto& y : expected) y.resize(52000);
    }
    const auto got = run_stream(*engine, in, rng, Layout::planar);
    for (std::size_t o = 0; o < 5; ++o)
      EXPECT_LE(relative_error(got[o], expected[o]), 1e-5) << "output " << o;
  }
}

TEST_P(CudaMatrixEngineTest, DelaysCostNoTapsNoMaxTapsAndNoPartitions) {
  // 2 -> 4, 4096 taps a path, with delays up to 24,000 frames and without.
  std::vector<MatrixPath> plain, delayed;
  for (std::size_t p = 0; p < 8; ++p) {
    plain.push_back(make_path(p % 2, p / 2, random_signal(4096, 300 + p)));
    delayed.push_back(make_path(p % 2, p / 2, random_signal(4096, 300 + p), 0.0, 3000 * p + 7));
  }
  const RoutingMatrix without = RoutingMatrix::make(2, 4, plain);
  const RoutingMatrix with = RoutingMatrix::make(2, 4, delayed, /*max_taps=*/4096);
  EngineOptions options;
  options.max_block_frames = 64;
  options.max_taps = 4096;
  options.cuda.matrix_kernel = GetParam();
  const auto a = make_cuda_matrix_engine(without, options);
  const auto b = make_cuda_matrix_engine(with, options);
  std::cout << a->description() << "\n" << b->description() << "\n";
  if (GetParam() == CudaMatrixKernel::cublas) {
    // One window for every output: the delays are folded into the taps.
    EXPECT_EQ(b->max_delay_frames(), 0u);
    EXPECT_EQ(b->max_taps(), 4096u + 21007u);
    EXPECT_NE(b->description().find("delays folded into taps"), std::string::npos);
    return;
  }
  EXPECT_EQ(b->max_taps(), 4096u) << "a delay is not taps";
  EXPECT_GE(b->max_delay_frames(), 21007u);
  EXPECT_NE(b->description().find("delays up to 65536 frames"), std::string::npos);
  // 64-frame partitions: 64 for the taps and one for a delay's remainder,
  // whatever the delays.
  EXPECT_NE(a->description().find(", 65 partitions"), std::string::npos) << a->description();
  EXPECT_NE(b->description().find(", 65 partitions"), std::string::npos) << b->description();
  // Any swap within the taps and the delay line is taken.
  std::vector<MatrixPath> farther = delayed;
  for (MatrixPath& path : farther) path.delay_frames = 65536 - path.delay_frames;
  EXPECT_NO_THROW(b->set_matrix(RoutingMatrix::make(2, 4, farther), true));
}

TEST_P(CudaMatrixEngineTest, SwapsThatMoveDelaysCrossfadeOneBlockAndAreExactAfter) {
  const std::uint64_t seed = 91;
  std::cout << "seed " << seed << "\n";
  const RoutingMatrix first =
      RoutingMatrix::make(2, 2,
                          {make_path(0, 0, random_signal(300, seed), 0.0, 0),
                           make_path(1, 0, random_signal(50, seed + 1), 0.0, 30000),
                           make_path(1, 1, random_signal(700, seed + 2), -3.0, 5)});
  const RoutingMatrix second =
      RoutingMatrix::make(2, 2,
                          {make_path(0, 0, random_signal(300, seed + 3), 0.0, 20000),
                           make_path(1, 0, random_signal(50, seed + 4), 0.0, 3),
                           make_path(1, 1, random_signal(1200, seed + 5), 2.0, 60001)});
  // first -> second -> first: fixed call sizes between the swaps (replayed
  // as graphs) and a fade call of another size at each.
  const std::size_t frames = 150000, fade = 700;
  const std::size_t swaps[] = {70001, 110003};
  const std::vector<std::vector<float>> inputs = {random_signal(frames, seed + 6),
                                                  random_signal(frames, seed + 7)};
  EngineOptions options;
  options.max_block_frames = 1024;
  options.max_taps = 1200;
  options.cuda.matrix_kernel = GetParam();
  // Folded delays need the room for them (the native engine does not).
  if (GetParam() == CudaMatrixKernel::cublas) options.max_taps = 1200 + 60001;
  const auto engine = make_cuda_matrix_engine(first, options);
  std::vector<float> in(2 * frames), out(2 * frames);
  for (std::size_t f = 0; f < frames; ++f)
    for (std::size_t c = 0; c < 2; ++c) in[f * 2 + c] = inputs[c][f];
  std::size_t start = 0;
  const auto run = [&](std::size_t n) {
    engine->process(std::span<const float>(in).subspan(start * 2, n * 2),
                    std::span<float>(out).subspan(start * 2, n * 2), n, Layout::interleaved);
    start += n;
  };
  while (start < swaps[0]) run(std::min<std::size_t>(333, swaps[0] - start));
  engine->set_matrix(second, /*crossfade=*/true);
  run(fade);
  while (start < swaps[1]) run(std::min<std::size_t>(1000, swaps[1] - start));
  engine->set_matrix(first, /*crossfade=*/true);
  run(fade);
  while (start < frames) run(std::min<std::size_t>(333, frames - start));
  for (std::size_t o = 0; o < 2; ++o) {
    const auto a = reference_output(first, inputs, o);
    const auto b = reference_output(second, inputs, o);
    std::vector<double> want(frames);
    for (std::size_t f = 0; f < frames; ++f) {
      // The weight of `second`.
      double w = 0.0;
      if (f >= swaps[0] + fade && f < swaps[1]) {
        w = 1.0;
      } else if (f >= swaps[0] && f < swaps[0] + fade) {
        w = double(f - swaps[0] + 1) / fade;
      } else if (f >= swaps[1] && f < swaps[1] + fade) {
        w = 1.0 - double(f - swaps[1] + 1) / fade;
      }
      want[f] = a[f] + w * (b[f] - a[f]);
    }
    std::vector<float> got(frames);
    for (std::size_t f = 0; f < frames; ++f) got[f] = out[f * 2 + o];
    EXPECT_LE(relative_error(got, want), 1e-5) << "output " << o;
  }
}

INSTANTIATE_TEST_SUITE_P(MacKernels, CudaMatrixEngineTest,
                         ::testing::Values(CudaMatrixKernel::tiled, CudaMatrixKernel::cublas),
                         [](const ::testing::TestParamInfo<CudaMatrixKernel>& info) {
                           return std::string(info.param == CudaMatrixKernel::tiled ? "Tiled"
                                                                                    : "Cublas");
                         });

TEST(CudaMatrixEngineDelays, SwapBeyondTheDelayLineIsRefusedNamingThePathAndKeepsTheRunningMatrix) {
  std::string reason;
  if (!cuda_device_available(&reason)) GTEST_SKIP() << "no usable CUDA device: " << reason;
  const RoutingMatrix running = RoutingMatrix::make(1, 1, {make_path(0, 0, {1}, 0, 100)});
  EngineOptions options;
  options.max_block_frames = 64;
  options.max_delay_frames = 70000;
  const auto engine = make_cuda_matrix_engine(running, options);
  const std::size_t reach = engine->max_delay_frames();
  EXPECT_GE(reach, 70000u);
  try {
    engine->set_matrix(RoutingMatrix::make(1, 1, {make_path(0, 0, {1}, 0, reach + 1)}), false);
    ADD_FAILURE() << "a delay beyond the delay line was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("path 0 (input 0 -> output 0): a delay of " +
                                         std::to_string(reach + 1)),
              std::string::npos)
        << e.what();
  }
  const std::vector<float> in(64, 1.0f);
  std::vector<float> out(64);
  for (int i = 0; i < 2; ++i) engine->process(in, out, 64, Layout::planar);
  EXPECT_NEAR(out[100 - 64 - 1], 0.0f, 1e-6);
  EXPECT_NEAR(out[100 - 64], 1.0f, 1e-6) << "the running matrix (delay 100) still runs";
  // The longest delay the line holds is taken, and exact: an impulse comes
  // out `reach` frames later.
  engine->reset();
  engine->set_matrix(RoutingMatrix::make(1, 1, {make_path(0, 0, {1}, 0, reach)}), false);
  std::vector<float> impulse(64, 0.0f);
  impulse[0] = 1.0f;
  const std::vector<float> silence(64, 0.0f);
  std::size_t peak = 0, peaks = 0;
  for (std::size_t start = 0; start < reach + 128; start += 64) {
    engine->process(start == 0 ? impulse : silence, out, 64, Layout::planar);
    for (std::size_t f = 0; f < 64; ++f)
      if (std::abs(out[f]) > 0.5f) {
        peak = start + f;
        ++peaks;
      }
  }
  EXPECT_EQ(peaks, 1u);
  EXPECT_EQ(peak, reach);
}

TEST(CudaMatrixEngineDelays, ManyInputsKeepLessSpareDelayLineButEveryDelayTheyHave) {
  std::string reason;
  if (!cuda_device_available(&reason)) GTEST_SKIP() << "no usable CUDA device: " << reason;
  // 4096 sources -> 2 ears: 65536 frames of spare room would be 4 GiB.
  std::vector<MatrixPath> paths;
  for (std::size_t i = 0; i < 4096; ++i) paths.push_back(make_path(i, i % 2, {1.0f}));
  paths.back().delay_frames = 3000;
  const RoutingMatrix matrix = RoutingMatrix::make(4096, 2, std::move(paths));
  EngineOptions options;
  options.max_block_frames = 64;
  const auto engine = make_cuda_matrix_engine(matrix, options);
  std::cout << engine->description() << "\n";
  EXPECT_EQ(engine->max_delay_frames(), 4096u) << "256 MiB / (16 B x 4096 inputs)";
  // The delays it has run: an impulse on the last input comes out 3000 frames later.
  std::vector<float> in(4096 * 64, 0.0f), out(2 * 64);
  in[4095] = 1.0f;  // interleaved: frame 0, input 4095
  std::size_t peak = 0, peaks = 0;
  for (std::size_t start = 0; start < 3200; start += 64) {
    engine->process(in, out, 64, Layout::interleaved);
    std::fill(in.begin(), in.end(), 0.0f);
    for (std::size_t f = 0; f < 64; ++f)
      if (std::abs(out[f * 2 + 1]) > 0.5f) {
        peak = start + f;
        ++peaks;
      }
  }
  EXPECT_EQ(peaks, 1u);
  EXPECT_EQ(peak, 3000u);
}

TEST(CudaMatrixEngineDelays, TheFactoryGivesTheMatrixEngineItsTapsAloneAndTheDelaysOnTop) {
  std::string reason;
  if (!cuda_device_available(&reason)) GTEST_SKIP() << "no usable CUDA device: " << reason;
  const RoutingMatrix matrix =
      RoutingMatrix::make(2, 2,
                          {make_path(0, 0, random_signal(512, 1), 0.0, 24000),
                           make_path(1, 0, {1}, 0.0, 3), make_path(0, 1, random_signal(100, 2))});
  EngineOptions options;
  options.max_block_frames = 128;
  options.max_taps = 1024;
  const auto engine = make_engine(Backend::cuda, matrix, options);
  std::cout << engine->description() << "\n";
  EXPECT_EQ(engine->max_taps(), 1024u);
  EXPECT_GE(engine->max_delay_frames(), 65536u);
  // Two GPUs where there are two, one engine each: the same room.
  if (cuda_device_count() >= 2) {
    options.devices = {0, 1};
    const auto sharded = make_engine(Backend::cuda, matrix, options);
    EXPECT_EQ(sharded->max_taps(), 1024u);
    EXPECT_GE(sharded->max_delay_frames(), 65536u);
  }
}

TEST(CudaMatrixEngineOptions, BlocksWithoutGraphsGiveTheSameOutputAsGraphs) {
  std::string reason;
  if (!cuda_device_available(&reason)) GTEST_SKIP() << "no usable CUDA device: " << reason;
  const std::uint64_t seed = 20261125;
  std::cout << "seed " << seed << "\n";
  const RoutingMatrix matrix = testing::mixed_length_matrix(seed);
  std::mt19937_64 signals(seed);
  std::vector<std::vector<float>> inputs(matrix.inputs());
  for (auto& x : inputs) x = random_signal(4096, signals());
  std::vector<std::vector<std::vector<float>>> outputs;
  for (bool graphs : {true, false}) {
    EngineOptions options;
    options.max_block_frames = 128;
    options.cuda.matrix_graphs = graphs;
    auto engine = make_cuda_matrix_engine(matrix, options);
    std::mt19937_64 blocks(seed + 1);  // the same call sizes for both
    outputs.push_back(run_stream(*engine, inputs, blocks, Layout::planar));
  }
  EXPECT_EQ(outputs[0], outputs[1]);
}

}  // namespace
}  // namespace tapstream

namespace tapstream {
namespace {

// Taps on the engine's GPU for set_paths_device, freed with the object.
class DeviceTaps {
 public:
  DeviceTaps(const MatrixEngine& engine, const std::vector<float>& host)
      : memory_(engine.device_memory()), size_(host.size()) {
    data_ = memory_.allocate(size_);
    memory_.copy_from_host(data_, host.data(), size_);
  }
  ~DeviceTaps() { memory_.free(data_); }
  DeviceTaps(const DeviceTaps&) = delete;
  DeviceTaps& operator=(const DeviceTaps&) = delete;
  std::span<const float> span() const { return {data_, size_}; }

 private:
  DeviceMemory memory_;
  float* data_ = nullptr;
  std::size_t size_ = 0;
};

// set_paths_device with copies of the updates' host taps on the GPU.
void update_from_device(MatrixEngine& engine, const std::vector<PathTaps>& host) {
  std::vector<std::unique_ptr<DeviceTaps>> copies;
  std::vector<PathTaps> updates;
  for (const PathTaps& u : host) {
    copies.push_back(
        std::make_unique<DeviceTaps>(engine, std::vector<float>(u.taps.begin(), u.taps.end())));
    updates.push_back({u.path, copies.back()->span()});
  }
  ASSERT_TRUE(engine.set_paths_device(updates, true, nullptr));
}

// 3 -> 2 with gains, delays, a polarity and output 1 reached by one path.
RoutingMatrix update_matrix(std::uint64_t seed) {
  std::vector<MatrixPath> paths;
  paths.push_back(make_path(0, 0, random_signal(700, seed + 1), -3.0));
  paths.push_back(make_path(1, 0, random_signal(37, seed + 2), 0.0, 5, true));
  paths.push_back(make_path(2, 0, random_signal(300, seed + 3), 6.0, 300));
  paths.push_back(make_path(2, 1, random_signal(150, seed + 4), -1.0, 3));
  return RoutingMatrix::make(3, 2, std::move(paths));
}

constexpr std::size_t kUpdateMaxTaps = 1000;  // taps alone: this engine delays natively

// Every call a random set of paths among the first `updated` takes random
// taps, up to kUpdateMaxTaps whatever the path's delay (path 2's 300 frames
// would not have left room for them when delays were taps).
testing::Schedule random_updates(std::size_t calls, std::size_t updated, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  testing::Schedule schedule;
  for (std::size_t call = 1; call < calls; ++call)
    for (std::size_t p = 0; p < updated; ++p) {
      if (rng() % 3 == 0) continue;
      schedule[call][p] = random_signal(1 + rng() % kUpdateMaxTaps, seed + 100 * call + p);
    }
  return schedule;
}

class CudaPathUpdates : public ::testing::TestWithParam<bool> {  // from device memory?
 protected:
  void SetUp() override {
    std::string reason;
    if (!cuda_device_available(&reason)) GTEST_SKIP() << "no usable CUDA device: " << reason;
  }
  static std::unique_ptr<MatrixEngine> make(const RoutingMatrix& m, std::size_t block) {
    EngineOptions options;
    options.max_block_frames = block;
    options.max_taps = kUpdateMaxTaps;
    return make_cuda_matrix_engine(m, options);
  }
  static std::function<void(MatrixEngine&, const std::vector<PathTaps>&)> updater() {
    if (!GetParam()) return {};
    return [](MatrixEngine& e, const std::vector<PathTaps>& u) { update_from_device(e, u); };
  }
};

TEST_P(CudaPathUpdates, UpdatesAtEveryCallMatchTheFloat64PiecewiseCrossfadedReference) {
  const std::uint64_t seed = 2521;
  std::cout << "seed " << seed << "\n";
  const RoutingMatrix matrix = update_matrix(seed);
  for (const std::size_t block : {64, 128, 200}) {
    SCOPED_TRACE("calls of " + std::to_string(block) + " frames");
    const std::size_t calls = 50;
    const std::vector<std::size_t> sizes(calls, block);
    std::vector<std::vector<float>> inputs;
    for (std::size_t c = 0; c < 3; ++c)
      inputs.push_back(random_signal(calls * block, seed + 7 + c));
    const testing::Schedule schedule = random_updates(calls, 3, seed + block);
    const auto engine = make(matrix, block);
    const auto got = testing::run_with_updates(*engine, inputs, sizes, schedule, updater());
    const auto want = testing::piecewise_reference(matrix, inputs, sizes, schedule);
    for (std::size_t o = 0; o < 2; ++o) EXPECT_LE(relative_error(got[o], want[o]), 1e-5) << o;
    // Output 1's one path never changed: its output is the plain convolution.
    EXPECT_LE(relative_error(got[1], reference_output(matrix, inputs, 1)), 1e-5);
  }
}

TEST_P(CudaPathUpdates, CallsOfAnySizeFadeOverTheCallAfterTheUpdate) {
  const std::uint64_t seed = 2522;
  std::cout << "seed " << seed << "\n";
  const RoutingMatrix matrix = update_matrix(seed);
  const std::vector<std::size_t> sizes = testing::random_block_sizes(8000, 300, seed);
  std::vector<std::vector<float>> inputs;
  for (std::size_t c = 0; c < 3; ++c) inputs.push_back(random_signal(8000, seed + 7 + c));
  const testing::Schedule schedule = random_updates(sizes.size(), 4, seed + 1);
  const auto engine = make(matrix, 300);
  const auto got = testing::run_with_updates(*engine, inputs, sizes, schedule, updater());
  const auto want = testing::piecewise_reference(matrix, inputs, sizes, schedule);
  for (std::size_t o = 0; o < 2; ++o) EXPECT_LE(relative_error(got[o], want[o]), 1e-5) << o;
}

TEST_P(CudaPathUpdates, ManyPathsReplacedEveryBlockMatchTheCpuMatrixEngine) {
  const std::uint64_t seed = 2523;
  std::cout << "seed " << seed << "\n";
  // 48 sources x 2 ears, 2048 taps each, every path replaced every block.
  std::vector<MatrixPath> paths;
  for (std::size_t p = 0; p < 96; ++p)
    paths.push_back(make_path(p / 2, p % 2, random_signal(2048, seed + p)));
  const RoutingMatrix matrix = RoutingMatrix::make(48, 2, std::move(paths));
  const std::size_t block = 128, calls = 40;
  std::vector<std::vector<float>> inputs;
  for (std::size_t c = 0; c < 48; ++c)
    inputs.push_back(random_signal(calls * block, seed + 500 + c));
  testing::Schedule schedule;
  for (std::size_t call = 1; call < calls; ++call)
    for (std::size_t p = 0; p < 96; ++p)
      schedule[call][p] = random_signal(2048, seed + 1000 * call + p);
  EngineOptions options;
  options.max_block_frames = block;
  options.max_taps = 2048;
  const auto cuda = make_cuda_matrix_engine(matrix, options);
  const auto cpu = make_cpu_matrix_engine(matrix, options);
  const std::vector<std::size_t> sizes(calls, block);
  const auto got = testing::run_with_updates(*cuda, inputs, sizes, schedule, updater());
  const auto want = testing::run_with_updates(*cpu, inputs, sizes, schedule);
  for (std::size_t o = 0; o < 2; ++o) EXPECT_LE(relative_error(got[o], want[o]), 1e-5) << o;
}

TEST_P(CudaPathUpdates, BadTapsAreRefusedNamingThePathAndNothingChanges) {
  const std::uint64_t seed = 2524;
  std::cout << "seed " << seed << "\n";
  const RoutingMatrix matrix = update_matrix(seed);
  const std::size_t block = 64, calls = 20;
  std::vector<std::vector<float>> inputs;
  for (std::size_t c = 0; c < 3; ++c) inputs.push_back(random_signal(calls * block, seed + 7 + c));
  const auto engine = make(matrix, block);
  std::vector<float> bad = random_signal(40, seed + 9);
  bad[17] = std::numeric_limits<float>::infinity();
  const std::vector<float> good = random_signal(40, seed + 10);
  // Path 2 is delayed by 300 frames: its delay does not count, its taps do.
  const std::vector<float> too_long(kUpdateMaxTaps + 1, 0.1f);
  const auto refuse = [&](const std::vector<std::pair<std::size_t, const std::vector<float>*>>& u,
                          const std::string& says) {
    std::vector<PathTaps> host;
    for (const auto& [p, taps] : u) host.push_back({p, *taps});
    try {
      if (GetParam()) {
        update_from_device(*engine, host);
      } else {
        engine->set_paths(host, true);
      }
      ADD_FAILURE() << "accepted; expected " << says;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refuse({{0, &good}, {1, &bad}}, "path 1 (input 1 -> output 0)");
  refuse({{2, &too_long}},
         "path 2 (input 2 -> output 0): 1001 taps; the running engine holds at most 1000");
  refuse({{4, &good}}, "path 4: no such path");
  refuse({{3, &good}, {3, &good}}, "named twice");
  const auto got =
      testing::run_with_updates(*engine, inputs, std::vector<std::size_t>(calls, block), {});
  for (std::size_t o = 0; o < 2; ++o)
    EXPECT_LE(relative_error(got[o], reference_output(matrix, inputs, o)), 1e-5) << o;
}

// A few paths of many changing at every call: the call after each update
// fades only the changed paths (their spectra's differences, kept at
// install), and the spare set, which lags the running one by the paths of
// the update before, is brought up to it path by path. Mixed in: updates of
// most paths (the whole old set fades), two updates before one call (the
// later taps of a path named in both win), and whole-matrix swaps.
void few_paths_of_many_changed_every_call(std::uint64_t seed, bool from_device,
                                          std::size_t (*delay_of)(std::mt19937_64&)) {
  std::cout << "seed " << seed << "\n";
  std::mt19937_64 rng(seed);
  std::vector<MatrixPath> paths;
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t o = 0; o < 3; ++o) {
      std::vector<float> taps = random_signal(1 + rng() % 400, seed + 10 * i + o);
      const double gain_db = double(rng() % 7) - 3.0;
      const std::size_t delay = delay_of(rng);
      paths.push_back(make_path(i, o, std::move(taps), gain_db, delay, rng() % 5 == 0));
    }
  const RoutingMatrix matrix = RoutingMatrix::make(8, 3, std::move(paths));
  const std::size_t block = 96, calls = 60, all = matrix.paths().size();
  std::vector<std::vector<float>> inputs;
  for (std::size_t c = 0; c < 8; ++c) inputs.push_back(random_signal(calls * block, seed + 50 + c));
  testing::Schedule schedule;
  for (std::size_t call = 1; call < calls; ++call) {
    const std::size_t count = call % 10 == 0 ? 20 : rng() % 4;  // at most 3 of 24: the deltas
    std::vector<std::size_t> order(all);
    for (std::size_t p = 0; p < all; ++p) order[p] = p;
    std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t p = order[k];
      schedule[call][p] = random_signal(1 + rng() % (kUpdateMaxTaps - 50), seed + 1000 * call + p);
    }
  }
  const auto want = testing::piecewise_reference(matrix, inputs,
                                                 std::vector<std::size_t>(calls, block), schedule);
  for (const CudaMatrixKernel kernel : {CudaMatrixKernel::tiled, CudaMatrixKernel::cublas}) {
    SCOPED_TRACE(kernel == CudaMatrixKernel::tiled ? "tiled MAC" : "cuBLAS MAC");
    EngineOptions options;
    options.max_block_frames = 128;
    options.max_taps = kUpdateMaxTaps;
    options.cuda.matrix_kernel = kernel;
    const auto engine = make_cuda_matrix_engine(matrix, options);
    RoutingMatrix current = matrix;
    std::size_t updates = 0;
    const std::vector<float> garbage = random_signal(33, seed + 7);
    const auto update = [&](MatrixEngine& e, const std::vector<PathTaps>& u) {
      ++updates;
      // As the engine counts: its taps and its delay line (cuBLAS folds delays).
      current = with_path_taps(current, u, e.max_taps(), e.max_delay_frames());
      if (updates % 9 == 0) {
        e.set_matrix(current, true);
        return;
      }
      if (updates % 4 == 0 && !u.empty()) {
        // First other taps for the first path, then the update itself.
        const std::vector<PathTaps> first{{u[0].path, garbage}};
        if (from_device) {
          update_from_device(e, first);
        } else {
          e.set_paths(first, true);
        }
      }
      if (from_device) {
        update_from_device(e, u);
      } else {
        e.set_paths(u, true);
      }
    };
    const auto got = testing::run_with_updates(
        *engine, inputs, std::vector<std::size_t>(calls, block), schedule, update);
    for (std::size_t o = 0; o < 3; ++o) EXPECT_LE(relative_error(got[o], want[o]), 1e-5) << o;
  }
}

TEST_P(CudaPathUpdates, FewPathsOfManyChangedEveryCallFadeOnlyThoseAndMatchTheFloat64Reference) {
  few_paths_of_many_changed_every_call(
      2526, GetParam(), [](std::mt19937_64& rng) { return std::size_t(rng() % 50); });
}

// The same with delays of whole segments (128-frame partitions here): the
// fade of the changed paths reads each one's window its segments back, as
// the MAC does.
TEST_P(CudaPathUpdates, ChangedPathsWithLongDelaysFadeFromTheirDelayedWindows) {
  few_paths_of_many_changed_every_call(2527, GetParam(), [](std::mt19937_64& rng) {
    return std::size_t(rng() % 2 == 0 ? rng() % 50 : 128 + rng() % 5000);
  });
}

INSTANTIATE_TEST_SUITE_P(TapsFrom, CudaPathUpdates, ::testing::Values(false, true),
                         [](const auto& info) {
                           return std::string(info.param ? "Device" : "Host");
                         });

TEST(CudaPathUpdatesMemory, HostTapsGivenAsDeviceTapsAreRefusedNamingThePath) {
  std::string reason;
  if (!cuda_device_available(&reason)) GTEST_SKIP() << "no usable CUDA device: " << reason;
  const RoutingMatrix matrix = update_matrix(2525);
  EngineOptions options;
  options.max_block_frames = 64;
  const auto engine = make_cuda_matrix_engine(matrix, options);
  const std::vector<float> host = random_signal(10, 1);
  const std::vector<PathTaps> updates{{3, host}};
  try {
    engine->set_paths_device(updates, true, nullptr);
    ADD_FAILURE() << "host memory accepted as device taps";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("path 3 (input 2 -> output 1)'s taps"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tapstream

namespace tapstream {
namespace {

TEST(CudaPathUpdatesMemory, DeviceTapsRunningPastTheirAllocationAreRefusedNamingThePath) {
  std::string reason;
  if (!cuda_device_available(&reason)) GTEST_SKIP() << "no usable CUDA device: " << reason;
  const RoutingMatrix matrix = update_matrix(2527);
  EngineOptions options;
  options.max_block_frames = 64;
  options.max_taps = kUpdateMaxTaps;
  const auto engine = make_cuda_matrix_engine(matrix, options);
  // Many paths in one allocation pass (looked up once); one running past it does not.
  const DeviceTaps taps(*engine, random_signal(40, 3));
  const std::span<const float> all = taps.span();
  const std::vector<PathTaps> fine{
      {0, all.subspan(0, 10)}, {1, all.subspan(10, 10)}, {3, all.subspan(20, 20)}};
  EXPECT_TRUE(engine->set_paths_device(fine, true, nullptr));
  const std::vector<PathTaps> past{{0, all.subspan(0, 10)}, {3, {all.data() + 30, 900}}};
  try {
    engine->set_paths_device(past, true, nullptr);
    ADD_FAILURE() << "taps past their allocation accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("path 3 (input 2 -> output 1)'s taps"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tapstream

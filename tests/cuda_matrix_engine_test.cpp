// The CUDA engine's native routing matrix, with each of its MAC kernels (tiled,
// cuBLAS), against a float64 reference of each output as the sum of its paths:
// at random call sizes (mostly launched one by one), at fixed call sizes
// (replayed as CUDA graphs), and through a crossfaded swap; skips, with the
// reason, where there is no usable GPU.

#include "kernels/matrix/cuda_matrix_engine.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "dsp/cpu/cpu_matrix_engine.hpp"
#include "kernels/cuda_engine.hpp"
#include "matrix_support.hpp"

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

INSTANTIATE_TEST_SUITE_P(MacKernels, CudaMatrixEngineTest,
                         ::testing::Values(CudaMatrixKernel::tiled, CudaMatrixKernel::cublas),
                         [](const ::testing::TestParamInfo<CudaMatrixKernel>& info) {
                           return std::string(info.param == CudaMatrixKernel::tiled ? "Tiled"
                                                                                    : "Cublas");
                         });

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

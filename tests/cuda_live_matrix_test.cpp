// The live pipeline running the CUDA matrix engine, as `tapstream run` with
// [filter] matrix and backend = "cuda" builds it (through the engine
// factory): its output is the CPU matrix engine's after exactly the reported
// latency, in both latency modes, and a posted matrix crossfades in over one
// block with no sample lost. Skips where there is no usable GPU.

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "daemon/engine_factory.hpp"
#include "tests/live_matrix_support.hpp"

namespace tapstream {
namespace {

using testing::block;
using testing::crossfade;
using testing::expect_delayed_equal;
using testing::LiveRun;
using testing::offline;
using testing::random_signal;
using testing::stream;
using testing::two_to_three;

// The CUDA matrix engine for the pipeline's blocks, or null with the reason.
std::unique_ptr<MatrixEngine> cuda_engine_for(const RoutingMatrix& matrix, std::string* reason) {
  EngineOptions options;
  options.max_block_frames = block;
  options.max_taps = 4096;
  try {
    return make_engine(Backend::cuda, matrix, options);
  } catch (const std::exception& e) {
    *reason = e.what();
    return nullptr;
  }
}

TEST(CudaLiveMatrix, TheCudaMatrixEngineLiveEqualsTheCpuOneAfterTheReportedLatency) {
  const std::uint64_t seed = 1121;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const RoutingMatrix matrix = two_to_three(seed);
  const std::vector<float> in = random_signal(2 * 20000, seed + 10);
  const std::vector<float> want = offline(matrix, in);
  for (const LatencyMode mode : {LatencyMode::buffered, LatencyMode::zero}) {
    std::string reason;
    auto engine = cuda_engine_for(matrix, &reason);
    if (!engine) GTEST_SKIP() << "no usable GPU: " << reason;
    const LiveRun run =
        stream(std::move(engine), matrix, in, mode, [](LivePipeline&, std::size_t) {});
    EXPECT_EQ(run.latency, mode == LatencyMode::zero ? 0u : block + 64);
    const std::size_t frames = run.output.size() / 3 - run.latency;
    ASSERT_GT(frames, 19000u);
    expect_delayed_equal(run, want, 3, 0, frames,
                         mode == LatencyMode::zero ? "zero mode" : "buffered mode");
  }
}

TEST(CudaLiveMatrix, APostedMatrixCrossfadesOverOneBlockAndNoSampleIsLost) {
  const std::uint64_t seed = 1122;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const RoutingMatrix before = two_to_three(seed);
  const RoutingMatrix after = two_to_three(seed + 100, -4.0);
  const std::vector<float> in = random_signal(2 * 30000, seed + 10);
  std::string reason;
  auto engine = cuda_engine_for(before, &reason);
  if (!engine) GTEST_SKIP() << "no usable GPU: " << reason;
  bool posted = false;
  const LiveRun run = stream(std::move(engine), before, in, LatencyMode::buffered,
                             [&](LivePipeline& p, std::size_t at) {
                               if (posted || at < 12000) return;
                               posted = true;
                               p.mailbox().post(std::make_shared<const RoutingMatrix>(after));
                             });
  ASSERT_TRUE(posted);
  EXPECT_EQ(run.stats.swaps, 1u);
  const std::size_t swap = run.stats.last_swap_block * block;
  const std::size_t frames = run.output.size() / 3 - run.latency;
  ASSERT_GT(swap, 0u);
  ASSERT_LT(swap + block, frames);
  const std::vector<float> old_out = offline(before, in), new_out = offline(after, in);
  expect_delayed_equal(run, old_out, 3, 0, swap, "before the swap");
  expect_delayed_equal(run, crossfade(old_out, new_out, swap, 3), 3, swap, swap + block,
                       "the crossfade");
  expect_delayed_equal(run, new_out, 3, swap + block, frames, "after the swap");
}

}  // namespace
}  // namespace tapstream

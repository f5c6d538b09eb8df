// The live pipeline running a routing matrix (its inputs in, its outputs
// out), driven as the file endpoints drive it, unpaced (offer_input /
// take_output, so nothing depends on the machine's speed): in both latency
// modes the output is the matrix of the input after exactly the reported
// latency; a matrix posted to the mailbox crossfades in over one block with
// no sample lost; a matrix the engine refuses leaves the running one.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "tests/live_matrix_support.hpp"

namespace tapstream {
namespace {

using testing::block;
using testing::cpu_engine_for;
using testing::crossfade;
using testing::expect_delayed_equal;
using testing::LiveRun;
using testing::make_path;
using testing::offline;
using testing::random_signal;
using testing::stream;
using testing::two_to_three;

TEST(LiveMatrixPipeline, BufferedOutputIsTheMatrixOfTheInputAfterTheReportedLatency) {
  const std::uint64_t seed = 1101;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const RoutingMatrix matrix = two_to_three(seed);
  const std::vector<float> in = random_signal(2 * 20000, seed + 10);
  const LiveRun run = stream(cpu_engine_for(matrix), matrix, in, LatencyMode::buffered,
                             [](LivePipeline&, std::size_t) {});
  EXPECT_EQ(run.latency, block + 64);
  for (std::size_t i = 0; i < run.latency * 3; ++i) ASSERT_EQ(run.output[i], 0.0f);
  const std::size_t frames = run.output.size() / 3 - run.latency;
  ASSERT_GT(frames, 19000u);
  expect_delayed_equal(run, offline(matrix, in), 3, 0, frames, "buffered");
}

TEST(LiveMatrixPipeline, ZeroModeOutputIsTheMatrixOfTheInputWithNothingAdded) {
  const std::uint64_t seed = 1102;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const RoutingMatrix matrix = two_to_three(seed);
  const std::vector<float> in = random_signal(2 * 20000, seed + 10);
  const LiveRun run = stream(cpu_engine_for(matrix), matrix, in, LatencyMode::zero,
                             [](LivePipeline&, std::size_t) {});
  EXPECT_EQ(run.latency, 0u);
  const std::size_t frames = run.output.size() / 3;
  ASSERT_GT(frames, 19000u);
  expect_delayed_equal(run, offline(matrix, in), 3, 0, frames, "zero");
}

TEST(LiveMatrixPipeline, APostedMatrixCrossfadesOverOneBlockAndNoSampleIsLost) {
  const std::uint64_t seed = 1103;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const RoutingMatrix before = two_to_three(seed);
  const RoutingMatrix after = two_to_three(seed + 100, -4.0);
  const std::vector<float> in = random_signal(2 * 30000, seed + 10);
  bool posted = false;
  const LiveRun run =
      stream(cpu_engine_for(before), before, in, LatencyMode::buffered,
             [&](LivePipeline& p, std::size_t at) {
               if (posted || at < 12000) return;
               posted = true;  // taken at the next block boundary, while the stream goes on
               p.mailbox().post(std::make_shared<const RoutingMatrix>(after));
             });
  ASSERT_TRUE(posted);
  EXPECT_EQ(run.stats.swaps, 1u);
  EXPECT_EQ(run.stats.rejected_swaps, 0u);
  const std::size_t swap_frame = run.stats.last_swap_block * block;
  std::printf("swapped at block %llu (frame %zu)\n",
              static_cast<unsigned long long>(run.stats.last_swap_block), swap_frame);
  ASSERT_GT(swap_frame, 0u);
  const std::size_t frames = run.output.size() / 3 - run.latency;
  ASSERT_LT(swap_frame + block, frames);
  const std::vector<float> old_out = offline(before, in), new_out = offline(after, in);
  expect_delayed_equal(run, old_out, 3, 0, swap_frame, "before the swap");
  // The swap's block fades linearly from the old matrix's output to the new one's.
  expect_delayed_equal(run, crossfade(old_out, new_out, swap_frame, 3), 3, swap_frame,
                       swap_frame + block, "the crossfade");
  expect_delayed_equal(run, new_out, 3, swap_frame + block, frames, "after the swap");
}

TEST(LiveMatrixPipeline, PostedPathUpdatesCrossfadeOverOneBlockAndNoSampleIsLost) {
  const std::uint64_t seed = 1105;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const RoutingMatrix before = two_to_three(seed);
  // Paths 0 and 2 get new taps (the engine transforms those alone); path 1 stays.
  const std::vector<float> taps0 = random_signal(900, seed + 50),
                           taps2 = random_signal(60, seed + 51);
  const auto after = std::make_shared<const RoutingMatrix>(
      with_path_taps(before, std::vector<PathTaps>{{0, taps0}, {2, taps2}}, 4096, 65536));
  const std::vector<float> in = random_signal(2 * 30000, seed + 10);
  bool posted = false;
  const LiveRun run =
      stream(cpu_engine_for(before), before, in, LatencyMode::buffered,
             [&](LivePipeline& p, std::size_t at) {
               if (posted || at < 12000) return;
               posted = true;
               p.mailbox().post(after, {{0, after->paths()[0].taps}, {2, after->paths()[2].taps}});
             });
  ASSERT_TRUE(posted);
  EXPECT_EQ(run.stats.swaps, 1u);
  EXPECT_EQ(run.stats.rejected_swaps, 0u);
  const std::size_t swap_frame = run.stats.last_swap_block * block;
  ASSERT_GT(swap_frame, 0u);
  const std::size_t frames = run.output.size() / 3 - run.latency;
  ASSERT_LT(swap_frame + block, frames);
  const std::vector<float> old_out = offline(before, in), new_out = offline(*after, in);
  expect_delayed_equal(run, old_out, 3, 0, swap_frame, "before the update");
  expect_delayed_equal(run, crossfade(old_out, new_out, swap_frame, 3), 3, swap_frame,
                       swap_frame + block, "the crossfade");
  expect_delayed_equal(run, new_out, 3, swap_frame + block, frames, "after the update");
}

TEST(LiveMatrixPipeline, AMatrixTheEngineRefusesLeavesTheRunningOne) {
  const std::uint64_t seed = 1104;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const RoutingMatrix running = two_to_three(seed);
  // Output 2 reached: another set of paths, which a running engine cannot take.
  const RoutingMatrix rerouted = RoutingMatrix::make(
      2, 3,
      {make_path(0, 0, random_signal(10, seed)), make_path(0, 1, random_signal(10, seed + 1)),
       make_path(1, 2, random_signal(10, seed + 2))});
  const std::vector<float> in = random_signal(2 * 12000, seed + 10);
  bool posted = false;
  const LiveRun run = stream(cpu_engine_for(running), running, in, LatencyMode::buffered,
                             [&](LivePipeline& p, std::size_t at) {
                               if (posted || at < 5000) return;
                               posted = true;
                               p.mailbox().post(std::make_shared<const RoutingMatrix>(rerouted));
                             });
  EXPECT_EQ(run.stats.swaps, 0u);
  EXPECT_EQ(run.stats.rejected_swaps, 1u);
  expect_delayed_equal(run, offline(running, in), 3, 0, run.output.size() / 3 - run.latency,
                       "with the refused matrix");
}

}  // namespace
}  // namespace tapstream

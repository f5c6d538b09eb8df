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

#include "daemon/pipeline/live_pipeline.hpp"
#include "dsp/cpu_matrix_engine.hpp"
#include "tests/matrix_support.hpp"

namespace tapstream {
namespace {

using testing::make_path;
using testing::random_signal;

constexpr std::size_t block = 128;

// 2 -> 3: output 1 sums both inputs, output 2 is reached by no path.
RoutingMatrix two_to_three(std::uint64_t seed, double gain_db = 0.0) {
  return RoutingMatrix::make(
      2, 3,
      {make_path(0, 0, random_signal(700, seed)), make_path(0, 1, random_signal(33, seed + 1)),
       make_path(1, 1, random_signal(1500, seed + 2), gain_db, 7, true)});
}

std::unique_ptr<MatrixEngine> engine_for(const RoutingMatrix& matrix) {
  EngineOptions options;
  options.max_block_frames = block;
  options.max_taps = 4096;
  return make_cpu_matrix_engine(matrix, options);
}

// The whole stream through `matrix` alone, interleaved (in blocks, as the pipeline calls).
std::vector<float> offline(const RoutingMatrix& matrix, const std::vector<float>& in) {
  auto engine = engine_for(matrix);
  const std::size_t frames = in.size() / matrix.inputs();
  std::vector<float> out(frames * matrix.outputs());
  for (std::size_t f = 0; f < frames; f += block) {
    const std::size_t n = std::min(block, frames - f);
    engine->process(std::span<const float>(in).subspan(f * matrix.inputs(), n * matrix.inputs()),
                    std::span<float>(out).subspan(f * matrix.outputs(), n * matrix.outputs()), n,
                    Layout::interleaved);
  }
  return out;
}

struct LiveRun {
  std::vector<float> output;  // interleaved, latency_frames() of it before the input's first
  std::size_t latency = 0;
  LiveStats stats;
};

// Streams `in` through a pipeline running `matrix`; `at_frame(pipeline,
// frames offered)` is called between chunks (to post swaps).
template <typename Hook>
LiveRun stream(const RoutingMatrix& matrix, const std::vector<float>& in, LatencyMode mode,
               Hook at_frame) {
  LivePipelineOptions options;
  options.latency = mode;
  options.block_frames = block;
  options.margin_frames = 64;
  options.realtime = false;
  LivePipeline pipeline(engine_for(matrix), options);
  EXPECT_EQ(pipeline.input_channels(), matrix.inputs());
  EXPECT_EQ(pipeline.output_channels(), matrix.outputs());
  pipeline.start();
  const std::size_t n_in = matrix.inputs(), n_out = matrix.outputs();
  const std::size_t frames = in.size() / n_in;
  LiveRun run;
  run.latency = pipeline.latency_frames();
  run.output.assign((frames + run.latency) * n_out, 0.0f);
  std::size_t offered = 0, taken = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  // Whole blocks only: a buffered pipeline leaves a partial last block in its ring.
  const std::size_t wanted_out = frames + run.latency - (frames % block);
  while (taken < wanted_out && std::chrono::steady_clock::now() < deadline) {
    if (offered < frames) {
      const std::size_t chunk = std::min<std::size_t>(97, frames - offered);  // not a block
      offered += pipeline.offer_input(in.data() + offered * n_in, chunk);
      at_frame(pipeline, offered);
    }
    taken += pipeline.take_output(run.output.data() + taken * n_out, wanted_out - taken);
    if (offered == frames) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  pipeline.stop();
  EXPECT_EQ(taken, wanted_out) << "the pipeline stalled";
  run.output.resize(taken * n_out);
  run.stats = pipeline.stats();
  return run;
}

void expect_delayed_equal(const LiveRun& run, const std::vector<float>& want, std::size_t outputs,
                          std::size_t from_frame, std::size_t to_frame, const char* what) {
  for (std::size_t f = from_frame; f < to_frame; ++f) {
    for (std::size_t c = 0; c < outputs; ++c) {
      const float got = run.output[(run.latency + f) * outputs + c];
      const float expected = want[f * outputs + c];
      ASSERT_NEAR(got, expected, 1e-5f * (1.0f + std::abs(expected)))
          << what << ": frame " << f << " output " << c;
    }
  }
}

TEST(LiveMatrixPipeline, BufferedOutputIsTheMatrixOfTheInputAfterTheReportedLatency) {
  const std::uint64_t seed = 1101;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const RoutingMatrix matrix = two_to_three(seed);
  const std::vector<float> in = random_signal(2 * 20000, seed + 10);
  const LiveRun run = stream(matrix, in, LatencyMode::buffered, [](LivePipeline&, std::size_t) {});
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
  const LiveRun run = stream(matrix, in, LatencyMode::zero, [](LivePipeline&, std::size_t) {});
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
      stream(before, in, LatencyMode::buffered, [&](LivePipeline& p, std::size_t at) {
        if (posted || at < 12000) return;
        posted = true;  // taken at the next block boundary, while the stream goes on
        p.matrix_mailbox().post(std::make_shared<const RoutingMatrix>(after));
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
  std::vector<float> blend(old_out.size());
  for (std::size_t f = 0; f < block; ++f) {
    const float w = float(f + 1) / float(block);
    for (std::size_t c = 0; c < 3; ++c) {
      const std::size_t i = (swap_frame + f) * 3 + c;
      blend[i] = old_out[i] + w * (new_out[i] - old_out[i]);
    }
  }
  expect_delayed_equal(run, blend, 3, swap_frame, swap_frame + block, "the crossfade");
  expect_delayed_equal(run, new_out, 3, swap_frame + block, frames, "after the swap");
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
  const LiveRun run =
      stream(running, in, LatencyMode::buffered, [&](LivePipeline& p, std::size_t at) {
        if (posted || at < 5000) return;
        posted = true;
        p.matrix_mailbox().post(std::make_shared<const RoutingMatrix>(rerouted));
      });
  EXPECT_EQ(run.stats.swaps, 0u);
  EXPECT_EQ(run.stats.rejected_swaps, 1u);
  expect_delayed_equal(run, offline(running, in), 3, 0, run.output.size() / 3 - run.latency,
                       "with the refused matrix");
}

}  // namespace
}  // namespace tapstream

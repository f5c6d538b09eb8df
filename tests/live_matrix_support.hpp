#pragma once
// Test support for the live pipeline running a routing matrix, driven as the
// file endpoints drive it, unpaced (offer_input / take_output), so nothing
// depends on the machine's speed: a small 2 -> 3 matrix, its output offline,
// a stream through the pipeline with a hook to post swaps, and checks.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/pipeline/live_pipeline.hpp"
#include "dsp/cpu/cpu_matrix_engine.hpp"
#include "tests/matrix_support.hpp"

namespace tapstream::testing {

constexpr std::size_t block = 128;

// 2 -> 3: output 1 sums both inputs, output 2 is reached by no path.
inline RoutingMatrix two_to_three(std::uint64_t seed, double gain_db = 0.0) {
  return RoutingMatrix::make(
      2, 3,
      {make_path(0, 0, random_signal(700, seed)), make_path(0, 1, random_signal(33, seed + 1)),
       make_path(1, 1, random_signal(1500, seed + 2), gain_db, 7, true)});
}

// The CPU matrix engine for the pipeline's blocks, room for a swap to longer paths.
inline std::unique_ptr<MatrixEngine> cpu_engine_for(const RoutingMatrix& matrix) {
  EngineOptions options;
  options.max_block_frames = block;
  options.max_taps = 4096;
  return make_cpu_matrix_engine(matrix, options);
}

// The whole stream through `matrix` alone, interleaved (in blocks, as the pipeline calls).
inline std::vector<float> offline(const RoutingMatrix& matrix, const std::vector<float>& in) {
  auto engine = cpu_engine_for(matrix);
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

// Streams `in` through a pipeline running `engine` (built for `matrix`);
// `at_frame(pipeline, frames offered)` is called between chunks (to post swaps).
template <typename Hook>
LiveRun stream(std::unique_ptr<MatrixEngine> engine, const RoutingMatrix& matrix,
               const std::vector<float>& in, LatencyMode mode, Hook at_frame) {
  LivePipelineOptions options;
  options.latency = mode;
  options.block_frames = block;
  options.margin_frames = 64;
  options.realtime = false;
  LivePipeline pipeline(std::move(engine), options);
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
    // Polling (the loop's condition, with its deadline): all is offered, the
    // engine's output is awaited.
    if (offered == frames) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  pipeline.stop();
  EXPECT_EQ(taken, wanted_out) << "the pipeline stalled";
  run.output.resize(taken * n_out);
  run.stats = pipeline.stats();
  return run;
}

// Frames [from_frame, to_frame) of each output, `run.latency` frames late,
// equal `want` within the suites' exactness bound: relative error (norm of
// the difference over the norm of `want`) <= 1e-5. Sample by sample, two
// float32 engines that sum in different orders differ by ~1e-5 of the
// signal's scale where the signal is small (CUDA against CPU matrix engine:
// 1.05e-5 at a sample of -0.0065, over a per-sample bound of 1.0065e-5);
// one wrong sample of a glitch still costs ~1e-3.
inline void expect_delayed_equal(const LiveRun& run, const std::vector<float>& want,
                                 std::size_t outputs, std::size_t from_frame, std::size_t to_frame,
                                 const char* what) {
  for (std::size_t c = 0; c < outputs; ++c) {
    double difference = 0.0, reference = 0.0, worst = -1.0;
    std::size_t worst_frame = from_frame;
    for (std::size_t f = from_frame; f < to_frame; ++f) {
      const double got = run.output[(run.latency + f) * outputs + c];
      const double expected = want[f * outputs + c];
      difference += (got - expected) * (got - expected);
      reference += expected * expected;
      if (std::abs(got - expected) > worst) worst = std::abs(got - expected), worst_frame = f;
    }
    const double error =
        reference > 0.0 ? std::sqrt(difference / reference) : std::sqrt(difference);
    EXPECT_LE(error, 1e-5) << what << ": output " << c << ", frames " << from_frame << ".."
                           << to_frame << "; largest difference " << worst << " at frame "
                           << worst_frame;
  }
}

// `before` fading linearly into `after` over the block at `frame` (the
// engines' one-block crossfade), elsewhere zero.
inline std::vector<float> crossfade(const std::vector<float>& before,
                                    const std::vector<float>& after, std::size_t frame,
                                    std::size_t outputs) {
  std::vector<float> blend(before.size());
  for (std::size_t f = 0; f < block; ++f) {
    const float w = float(f + 1) / float(block);
    for (std::size_t c = 0; c < outputs; ++c) {
      const std::size_t i = (frame + f) * outputs + c;
      blend[i] = before[i] + w * (after[i] - before[i]);
    }
  }
  return blend;
}

}  // namespace tapstream::testing

// The CPU engine's non-uniformly partitioned path (head in the call, tails on
// worker threads): exact against a float64 reference whatever the call sizes,
// swaps that crossfade once and lose no sample even with tails in flight, and
// the choice between it and the uniform engine.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dsp/cpu_engine.hpp"
#include "tests/reference.hpp"

namespace tapstream {
namespace {

using testing::random_signal;
using testing::reference_convolution;
using testing::relative_error;

const bool kEstimatePlans = [] { return setenv("TAPSTREAM_FFTW_PLANNER", "estimate", 0) == 0; }();

std::unique_ptr<Engine> nonuniform(const FilterBank& bank, std::size_t block, std::size_t taps) {
  EngineOptions options;
  options.max_block_frames = block;
  options.max_taps = taps;
  const CpuPartitionCosts costs;
  return make_cpu_nonuniform_engine(bank, options,
                                    plan_partitions(std::bit_ceil(block), taps, costs));
}

// Runs `x` (planar, `channels` x n) through `engine` in calls of random sizes
// 1..max_call, interleaved; returns planar output.
std::vector<float> run_random_calls(Engine& engine, const std::vector<std::vector<float>>& x,
                                    std::size_t max_call, std::uint64_t seed) {
  const std::size_t channels = x.size(), n = x[0].size();
  std::vector<float> in(channels * max_call), out(channels * max_call);
  std::vector<float> y(channels * n);
  std::mt19937_64 rng(seed);
  for (std::size_t done = 0; done < n;) {
    const std::size_t frames = std::min(n - done, std::size_t(rng() % max_call) + 1);
    for (std::size_t f = 0; f < frames; ++f)
      for (std::size_t c = 0; c < channels; ++c) in[f * channels + c] = x[c][done + f];
    engine.process(in, out, frames, Layout::interleaved);
    for (std::size_t f = 0; f < frames; ++f)
      for (std::size_t c = 0; c < channels; ++c) y[c * n + done + f] = out[f * channels + c];
    done += frames;
  }
  return y;
}

TEST(CpuNonUniformEngine, MatchesFloat64AtAnyCallSizeWithTailsOnWorkers) {
  for (const std::size_t block : {std::size_t(64), std::size_t(256)}) {
    const std::size_t taps = 6000, n = 24000, channels = 3;
    const std::uint64_t seed = 1000 + block;
    std::printf("block %zu, seed %llu\n", block, static_cast<unsigned long long>(seed));
    std::vector<std::vector<float>> filters, x;
    for (std::size_t c = 0; c < channels; ++c) {
      // Different lengths: one shorter than the first tail segment's start.
      filters.push_back(random_signal(c == 2 ? 100 : taps - 7 * c, seed + c));
      x.push_back(random_signal(n, seed + 10 + c));
    }
    const FilterBank bank = FilterBank::per_channel(filters);
    auto engine = nonuniform(bank, block, taps);
    EXPECT_NE(engine->description().find("non-uniform"), std::string::npos)
        << engine->description();
    const std::vector<float> y = run_random_calls(*engine, x, block, seed);
    for (std::size_t c = 0; c < channels; ++c) {
      const auto want = reference_convolution(x[c], filters[c]);
      EXPECT_LE(relative_error(std::span<const float>(y.data() + c * n, n), want), 1e-5)
          << "channel " << c;
    }
  }
}

TEST(CpuNonUniformEngine, ResetStartsTheStreamAgain) {
  const std::size_t taps = 3000, n = 8000;
  const auto h = random_signal(taps, 7);
  const auto x = random_signal(n, 8);
  auto engine = nonuniform(FilterBank::shared(h, 1), 64, taps);
  const std::vector<std::vector<float>> xs{x};
  run_random_calls(*engine, xs, 64, 9);
  engine->reset();
  const auto y = run_random_calls(*engine, xs, 64, 10);
  EXPECT_LE(relative_error(y, reference_convolution(x, h)), 1e-5);
}

// Every call after a swap is the old filters' output, then one call blends
// (w = (i + 1) / frames) to the new, then the new filters' output; no sample
// lost or repeated. Swaps come while tail jobs are queued, some superseding
// one not yet played.
TEST(CpuNonUniformEngine, SwapsCrossfadeOnceAndLoseNoSampleWithTailsInFlight) {
  const std::size_t taps = 5000, n = 60000, block = 64;
  const std::uint64_t seed = 42;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const auto x = random_signal(n, seed);
  std::vector<std::vector<float>> filters;
  for (int i = 0; i < 4; ++i) filters.push_back(random_signal(taps - 100 * i, seed + 1 + i));
  std::vector<std::vector<double>> refs;
  for (const auto& h : filters) refs.push_back(reference_convolution(x, h));

  auto engine = nonuniform(FilterBank::shared(filters[0], 1), block, taps);
  std::mt19937_64 rng(seed);
  std::vector<float> y(block);
  std::size_t playing = 0;    // bank whose output the calls match
  std::size_t requested = 0;  // newest bank given to set_filters
  std::size_t fades = 0, swaps = 0, done = 0;
  double rms = 0.0;
  for (double v : refs[0]) rms += v * v;
  rms = std::sqrt(rms / double(n));
  auto matches = [&](std::size_t frames, auto expected) {
    for (std::size_t f = 0; f < frames; ++f) {
      if (std::abs(double(y[f]) - expected(f)) > 1e-4 * rms) return false;
    }
    return true;
  };
  std::size_t next_swap = 3000;
  while (done < n) {
    if (done >= next_swap) {
      next_swap += 12000;
      ++swaps;
      requested = (requested + 1) % filters.size();
      engine->set_filters(FilterBank::shared(filters[requested], 1), true);
      if (next_swap % 24000 == 15000) {  // supersede at once: the one before never plays
        requested = (requested + 1) % filters.size();
        engine->set_filters(FilterBank::shared(filters[requested], 1), true);
      }
      // Give the preparer time, so that the swap happens in this run.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const std::size_t frames = std::min(n - done, std::size_t(rng() % block) + 1);
    engine->process(std::span<const float>(x.data() + done, frames), y, frames, Layout::planar);
    const auto& old = refs[playing];
    if (!matches(frames, [&](std::size_t f) { return old[done + f]; })) {
      ASSERT_NE(playing, requested) << "output left the playing bank at frame " << done;
      const auto& now = refs[requested];
      const bool blend = matches(frames, [&](std::size_t f) {
        const double w = double(f + 1) / double(frames);
        return old[done + f] + w * (now[done + f] - old[done + f]);
      });
      ASSERT_TRUE(blend) << "call at frame " << done << " is neither bank " << playing
                         << " nor a crossfade to bank " << requested;
      playing = requested;
      ++fades;
    }
    done += frames;
  }
  EXPECT_EQ(playing, requested);
  EXPECT_EQ(fades, swaps);
  EXPECT_EQ(swaps, 5u);
}

TEST(CpuNonUniformEngine, ChosenForLiveBlocksOfLongFiltersOnly) {
  const auto h = random_signal(65536, 3);
  EngineOptions live;
  live.max_block_frames = 64;
  auto a = make_cpu_engine(FilterBank::shared(h, 2), live);
  EXPECT_NE(a->description().find("non-uniform"), std::string::npos) << a->description();
  EngineOptions offline;
  offline.max_block_frames = 8192;
  auto b = make_cpu_engine(FilterBank::shared(h, 2), offline);
  EXPECT_EQ(b->description().find("non-uniform"), std::string::npos) << b->description();
  auto c = make_cpu_engine(FilterBank::shared(random_signal(16, 4), 2), live);
  EXPECT_EQ(c->description().find("non-uniform"), std::string::npos) << c->description();
  std::printf("64-frame calls, 65536 taps: %s\n", a->description().c_str());
}

TEST(CpuNonUniformEngine, RejectsABankItCannotHold) {
  auto engine = nonuniform(FilterBank::shared(random_signal(1000, 5), 2), 64, 1000);
  EXPECT_THROW(engine->set_filters(FilterBank::shared(random_signal(1001, 6), 2), true),
               std::invalid_argument);
  EXPECT_THROW(engine->set_filters(FilterBank::shared(random_signal(10, 6), 3), true),
               std::invalid_argument);
  std::vector<float> buffer(2 * 65);
  EXPECT_THROW(engine->process(buffer, buffer, 65, Layout::interleaved), std::invalid_argument);
}

}  // namespace
}  // namespace tapstream

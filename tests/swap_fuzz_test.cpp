// The swap path under a random storm: good loads (all channels or one), bad
// loads (garbage, too many taps, a missing file, a channel the stream lacks)
// and reloads of a rewritten configured file, from a control thread, against
// a running pipeline streaming a sine. Every good filter is a gain and a
// delay, so the output is always a sine of some amplitude and phase: a gap (a
// block of silence) or a hard switch shows as a jump between samples far
// larger than a one-block crossfade between two such sines can make. The
// sequence is drawn from a fixed, printed seed; the thread timing is not, so
// the check is on properties that hold for any timing.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/control/swapper.hpp"
#include "daemon/pipeline/live_pipeline.hpp"
#include "dsp/cpu/cpu_engine.hpp"
#include "dsp/files/coefficient_file.hpp"
#include "dsp/model/diagonal_engine.hpp"
#include "tests/process_support.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

constexpr std::size_t channels = 2, block = 64, max_taps = 256;
constexpr double amplitude = 0.5;
const double omega = 2.0 * std::numbers::pi * 100.0 / 48000.0;  // 100 Hz at 48 kHz

// A gain in [0.4, 1] after a delay of up to max_taps - 1 frames.
std::vector<float> gain_and_delay(std::mt19937_64& rng) {
  std::uniform_int_distribution<std::size_t> delay(0, max_taps - 1);
  std::uniform_real_distribution<float> gain(0.4f, 1.0f);
  std::vector<float> taps(delay(rng) + 1, 0.0f);
  taps.back() = gain(rng);
  return taps;
}

TEST(SwapFuzz, RandomGoodAndBadLoadsAndReloadsNeverLeaveAGapOrAClick) {
  const std::uint64_t seed = 20261123;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;

  LiveConfig config;
  config.channels = channels;
  config.block_frames = block;
  config.filter_files = {dir / "configured.txt"};
  save_text_taps(config.filter_files.front(), gain_and_delay(rng), "48000 Hz sample rate");
  config.engine.max_taps = max_taps;
  config.max_taps_given = true;
  const FilterBank first = load_configured_bank(config);

  EngineOptions engine;
  engine.max_block_frames = block;
  engine.max_taps = max_taps;
  LivePipelineOptions options;
  options.block_frames = block;
  options.margin_frames = block;
  options.realtime = false;
  LivePipeline pipeline(std::make_unique<DiagonalEngine>(make_cpu_engine(first, engine)), options);
  Swapper swapper(pipeline, config, RoutingMatrix::diagonal(first));
  pipeline.start();

  // The control thread: 60 random operations, with the expected outcome of each.
  constexpr int operations = 60;
  std::atomic<bool> done{false};
  int good = 0, bad = 0, failures_of_good = 0, successes_of_bad = 0;
  std::thread control([&] {
    for (int i = 0; i < operations; ++i) {
      const fs::path file = dir / fmt::format("f{}.txt", i);
      std::string result;
      bool should_succeed = true;
      switch (rng() % 8) {
        case 0:
        case 1:
          save_text_taps(file, gain_and_delay(rng), "48000 Hz sample rate");
          result = swapper.load(LoadRequest::all(file));
          break;
        case 2:
          save_text_taps(file, gain_and_delay(rng), "48000 Hz sample rate");
          result = swapper.load(LoadRequest::channel(rng() % channels, file));
          break;
        case 3: {  // rewrite the configured file, then reload as SIGHUP does
          save_text_taps(config.filter_files.front(), gain_and_delay(rng), "48000 Hz sample rate");
          result = swapper.reload(config);
          break;
        }
        case 4: {
          std::ofstream(file) << "0.5\nclick\n";
          should_succeed = false;
          result = swapper.load(LoadRequest::all(file));
          break;
        }
        case 5:
          save_text_taps(file, std::vector<float>(max_taps + 1 + rng() % 100, 0.01f), "");
          should_succeed = false;
          result = swapper.load(LoadRequest::all(file));
          break;
        case 6:
          should_succeed = false;
          result = swapper.load(LoadRequest::all(dir / "missing.txt"));
          break;
        default:
          save_text_taps(file, gain_and_delay(rng), "48000 Hz sample rate");
          should_succeed = false;
          result = swapper.load(LoadRequest::channel(channels + rng() % 3, file));
          break;
      }
      (should_succeed ? good : bad)++;
      if (should_succeed && !result.empty()) {
        ++failures_of_good;
        std::printf("operation %d failed: %s\n", i, result.c_str());
      }
      if (!should_succeed && result.empty()) ++successes_of_bad;
      // Pacing, not a wait: the operations come a few ms apart, at random.
      std::this_thread::sleep_for(std::chrono::milliseconds(2 + rng() % 5));
    }
    done = true;
  });

  // The audio side: a sine pushed and pulled in periods of 48 frames until
  // the storm is over and a second of settling has passed.
  const std::size_t period = 48;
  std::vector<float> in(period * channels), out(period * channels), output;
  std::size_t pushed = 0, pulled = 0, after_done = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (after_done < 48000) {
    for (std::size_t f = 0; f < period; ++f) {
      const float x = static_cast<float>(amplitude * std::sin(omega * double(pushed + f)));
      for (std::size_t c = 0; c < channels; ++c) in[f * channels + c] = x;
    }
    pushed += pipeline.offer_input(in.data(), period);
    const std::size_t got = pipeline.take_output(out.data(), period);
    output.insert(output.end(), out.begin(), out.begin() + got * channels);
    pulled += got;
    if (done) after_done += got;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the stream stalled";
    // Pacing, not a wait: a period every 200 us, a device's pace (faster than real time).
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  control.join();
  pipeline.stop();

  EXPECT_EQ(failures_of_good, 0);
  EXPECT_EQ(successes_of_bad, 0);
  EXPECT_EQ(swapper.rejected(), static_cast<std::uint64_t>(bad)) << "every refusal is counted";
  const LiveStats stats = pipeline.stats();
  EXPECT_EQ(stats.underruns, 0u) << "the unpaced stream never waits on the engine";
  std::printf("%d good and %d bad operations, %llu swaps, %zu frames\n", good, bad,
              static_cast<unsigned long long>(stats.swaps), pulled);

  // A sine of amplitude <= A moves at most A * omega a sample; a one-block
  // crossfade between two of them adds at most 2A / block. A gap or a hard
  // switch jumps by up to 2A.
  const double limit = amplitude * omega + 2.0 * amplitude / block + 1e-4;
  const std::size_t start = pipeline.latency_frames() + max_taps;  // the sine has begun
  for (std::size_t c = 0; c < channels; ++c) {
    double worst = 0.0;
    std::size_t at = 0;
    for (std::size_t n = start + 1; n < pulled; ++n) {
      const double jump =
          std::abs(double(output[n * channels + c]) - double(output[(n - 1) * channels + c]));
      if (jump > worst) worst = jump, at = n;
    }
    std::printf("channel %zu: largest step %.5f at frame %zu (limit %.5f)\n", c, worst, at, limit);
    EXPECT_LE(worst, limit) << "channel " << c << ": a gap or a click at frame " << at;
    // Once settled, the output is the sine through the filter the swapper reports.
    const auto running = swapper.current();
    const std::vector<float>& taps = running->paths()[c].taps;
    std::size_t delay = 0;
    while (taps[delay] == 0.0f) ++delay;
    const std::size_t latency = pipeline.latency_frames();
    for (std::size_t n = pulled - 1000; n < pulled; ++n) {
      const double want = taps[delay] * amplitude * std::sin(omega * (double(n) - latency - delay));
      ASSERT_NEAR(output[n * channels + c], want, 1e-4) << "channel " << c << " frame " << n;
    }
  }
}

}  // namespace
}  // namespace tapstream

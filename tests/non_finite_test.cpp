// NaN and infinite samples: the scan that zeroes them (every bit pattern of
// the exponent, what it costs for a 64-frame period of 64 channels), the
// live pipeline that runs it on every input before the engine (both the
// engine thread's hand-off and the engine run in the callback), so that one
// bad sample never poisons a channel's delay line, and the counter that
// `ctl status` shows.

#include "dsp/realtime/non_finite.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "daemon/control/daemon_status.hpp"
#include "daemon/pipeline/live_pipeline.hpp"
#include "dsp/cpu/cpu_engine.hpp"
#include "dsp/model/diagonal_engine.hpp"
#include "dsp/model/filter_bank.hpp"
#include "tests/sanitized_build.hpp"

namespace tapstream {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(NonFinite, ZeroesEveryNaNAndInfinityAndNothingElse) {
  const float signalling = std::numeric_limits<float>::signaling_NaN();
  const float max = std::numeric_limits<float>::max();
  const float tiny = std::numeric_limits<float>::denorm_min();
  std::vector<float> samples = {0.5f, kNaN, -kNaN, kInf,  -kInf, signalling,
                                max,  -max, tiny,  -0.0f, 1.0f};
  const std::vector<float> want = {0.5f, 0, 0, 0, 0, 0, max, -max, tiny, -0.0f, 1.0f};
  EXPECT_EQ(zero_non_finite(samples), 5u);
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(samples[i]), std::bit_cast<std::uint32_t>(want[i]))
        << "sample " << i;
  }
  // Every NaN payload, both signs.
  for (std::uint32_t mantissa = 1; mantissa < (1u << 23); mantissa = mantissa * 3 + 1) {
    for (const std::uint32_t sign : {0u, 0x80000000u}) {
      float x = std::bit_cast<float>(sign | 0x7f800000u | mantissa);
      ASSERT_EQ(zero_non_finite(std::span<float>(&x, 1)), 1u) << mantissa;
      ASSERT_EQ(x, 0.0f);
    }
  }
}

TEST(NonFinite, CountingReadsOnlyAndAgreesWithZeroing) {
  const std::uint32_t seed = 4711;
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (const std::size_t n : {0, 1, 15, 16, 17, 1000, 65537}) {
    std::vector<float> samples(n);
    for (float& x : samples) x = std::bit_cast<float>(bits(rng));  // ~1 in 256 non-finite
    const std::vector<float> before = samples;
    const std::size_t counted = count_non_finite(samples);
    // (An empty vector's data() may be null, which memcmp must not get.)
    ASSERT_TRUE(n == 0 || std::memcmp(samples.data(), before.data(), n * sizeof(float)) == 0);
    EXPECT_EQ(counted, zero_non_finite(samples)) << n << " samples";
  }
}

TEST(NonFinite, ATallyLeavesABlockWithoutNonFiniteSamplesBitForBit) {
  NonFiniteTally tally;
  std::vector<float> block = {-0.0f, 1e-42f, -std::numeric_limits<float>::max(), 0.5f};
  const std::vector<float> before = block;
  tally.scan(block, 2, 0);
  EXPECT_EQ(tally.count, 0u);
  EXPECT_EQ(std::memcmp(block.data(), before.data(), block.size() * sizeof(float)), 0);
}

TEST(NonFinite, ATallyNamesTheFirstFrameAndChannelAcrossBlocks) {
  NonFiniteTally tally;
  std::vector<float> block(3 * 4, 0.25f);  // 4 frames of 3 channels
  tally.scan(block, 3, 0);
  EXPECT_EQ(tally.count, 0u);
  block[2 * 3 + 1] = kNaN;  // frame 2 of this block, channel 1
  block[3 * 3 + 0] = -kInf;
  tally.scan(block, 3, 4);
  block[0] = kInf;
  tally.scan(block, 3, 8);
  EXPECT_EQ(tally.count, 3u);
  EXPECT_EQ(tally.first_frame, 6u);
  EXPECT_EQ(tally.first_channel, 1u);
  EXPECT_TRUE(std::all_of(block.begin(), block.end(), [](float x) { return std::isfinite(x); }));
}

// The cost the audio callback pays: printed, and bounded far above what any
// machine this runs on needs (a 64-frame period at 48 kHz lasts 1333 us).
TEST(NonFinite, TheScanOfA64FramePeriodOf64ChannelsCostsMicroseconds) {
  // Under a sanitizer the scan runs about a hundred times slower (115 us a
  // period under clang's ASan + UBSan + fuzzer coverage): the bound would time
  // the instrumentation. The scan's output is checked in every build by the
  // tests above.
  if (testing::kSanitizedBuild)
    GTEST_SKIP() << "a sanitizer build times its instrumentation, not the scan";
  const std::uint32_t seed = 64064;
  std::printf("seed %u\n", seed);
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> in(64 * 64);
  for (auto& x : in) x = uniform(random);
  std::vector<float> out(in.size());
  constexpr int kPeriods = 200000;
  std::size_t found = 0;
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < kPeriods; ++i) {
    found += copy_zeroing_non_finite(in, out);
    in[std::size_t(i) % in.size()] = out[(std::size_t(i) * 7) % out.size()];  // not hoisted
  }
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - started).count() /
      kPeriods;
  std::printf("copy_zeroing_non_finite: %.1f ns per 64 frames x 64 channels (%.3f ns a sample)\n",
              ns, ns / double(in.size()));
  EXPECT_EQ(found, 0u);
  EXPECT_LT(ns, 50'000.0);
}

LivePipelineOptions options_for(LatencyMode latency, std::size_t block) {
  LivePipelineOptions options;
  options.latency = latency;
  options.block_frames = block;
  options.margin_frames = latency == LatencyMode::zero ? 0 : 64;
  options.sample_rate = 1000;  // zero mode: a long deadline on a loaded machine
  options.zero_deadline_fraction = 1.0;
  options.realtime = false;
  return options;
}

// Streams `input` through the unpaced side; returns the output (latency included).
std::vector<float> stream(LivePipeline& pipeline, const std::vector<float>& input,
                          std::size_t period) {
  const std::size_t channels = pipeline.input_channels();
  std::vector<float> padded(input);
  padded.resize(input.size() + 2 * pipeline.block_frames() * channels, 0.0f);
  const std::size_t want = input.size() / channels + pipeline.latency_frames();
  std::vector<float> output(want * channels);
  std::size_t pushed = 0, pulled = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (pulled < want && std::chrono::steady_clock::now() < deadline) {
    const std::size_t push = std::min(period, padded.size() / channels - pushed);
    pushed += pipeline.offer_input(padded.data() + pushed * channels, push);
    pulled +=
        pipeline.take_output(output.data() + pulled * channels, std::min(period, want - pulled));
    std::this_thread::yield();
  }
  EXPECT_EQ(pulled, want) << "the stream stalled";
  return output;
}

TEST(NonFinite, OneBadSampleLiveIsZeroedBeforeTheEngineAndCounted) {
  const std::size_t channels = 2, block = 64, frames = 4000;
  std::vector<float> taps(1000, 0.0f);
  taps[0] = 0.5f;
  taps[999] = 0.25f;  // a long delay line: a NaN in it would poison 1000 frames
  std::vector<float> clean(frames * channels);
  for (std::size_t i = 0; i < clean.size(); ++i) clean[i] = float(i % 97) / 97.0f - 0.5f;
  std::vector<float> damaged = clean;
  damaged[500 * channels + 1] = kNaN;
  damaged[501 * channels + 0] = kInf;
  damaged[2600 * channels + 1] = -kInf;
  for (const std::size_t i : {500 * channels + 1, 501 * channels, 2600 * channels + 1})
    clean[i] = 0;

  for (const LatencyMode latency : {LatencyMode::buffered, LatencyMode::zero}) {
    SCOPED_TRACE(latency == LatencyMode::zero ? "zero latency (engine in the callback)"
                                              : "buffered (engine thread)");
    const auto run = [&](const std::vector<float>& input, std::uint64_t* counted) {
      EngineOptions engine_options;
      engine_options.max_block_frames = block;
      engine_options.max_taps = taps.size();
      engine_options.realtime_calls = true;  // zero mode then runs it in the callback
      LivePipeline pipeline(std::make_unique<DiagonalEngine>(make_cpu_engine(
                                FilterBank::shared(taps, channels), engine_options)),
                            options_for(latency, block));
      EXPECT_EQ(pipeline.engine_in_callback(), latency == LatencyMode::zero);
      pipeline.start();
      std::vector<float> output = stream(pipeline, input, 50);
      pipeline.stop();
      *counted = pipeline.stats().nonfinite_inputs;
      return output;
    };
    std::uint64_t counted_clean = 0, counted_damaged = 0;
    const std::vector<float> want = run(clean, &counted_clean);
    const std::vector<float> got = run(damaged, &counted_damaged);
    EXPECT_EQ(counted_clean, 0u);
    EXPECT_EQ(counted_damaged, 3u);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << "sample " << i;
      ASSERT_EQ(got[i], want[i]) << "sample " << i;
    }
  }
}

TEST(NonFinite, TheCountIsInTheStatusReply) {
  DaemonStatus status;
  status.nonfinite_inputs = 12345;
  const std::string reply = json_line(status_document(status));
  EXPECT_NE(reply.find("\"nonfinite_inputs\":12345"), std::string::npos) << reply;
}

}  // namespace
}  // namespace tapstream

// Tests of OutputStage: volume and mute ramps (no clicks) and the per-client
// meters, including an audio thread and readers at once (run under
// ThreadSanitizer too).

#include "dsp/realtime/output_stage.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

namespace tapstream {
namespace {

constexpr int rate = 48000;

std::vector<float> constant(std::size_t channels, std::size_t frames, float value) {
  return std::vector<float>(channels * frames, value);
}

TEST(OutputStage, UnityGainLeavesTheSignalUntouched) {
  OutputStage stage(2, rate);
  std::vector<float> block = {0.5f, -0.25f, 0.125f, 1.5f};
  stage.process(block.data(), 2);
  EXPECT_EQ(block, (std::vector<float>{0.5f, -0.25f, 0.125f, 1.5f}));
}

TEST(OutputStage, VolumeRampsLinearlyToItsTargetWithoutASingleStep) {
  OutputStage stage(1, rate, 10.0);
  ASSERT_EQ(stage.ramp_frames(), 480u);
  stage.set_volume_db(0, -6.0);
  const float target = std::pow(10.0f, -6.0f / 20.0f);
  std::vector<float> out;
  for (int call = 0; call < 10; ++call) {  // periods of 64 frames, 640 frames in all
    auto block = constant(1, 64, 1.0f);
    stage.process(block.data(), 64);
    out.insert(out.end(), block.begin(), block.end());
  }
  const float largest_step = (1.0f - target) / 480.0f;
  float previous = 1.0f;
  for (std::size_t i = 0; i < out.size(); ++i) {
    ASSERT_LE(std::fabs(out[i] - previous), largest_step * 1.001f) << "frame " << i;
    previous = out[i];
  }
  EXPECT_NEAR(out[479], target, 1e-6f);
  EXPECT_NEAR(out.back(), target, 1e-6f);
  EXPECT_FLOAT_EQ(stage.volume_db(0), -6.0);
}

TEST(OutputStage, MasterMuteFadesEveryChannelToSilenceAndBack) {
  OutputStage stage(2, rate, 1.0);  // 48 frames
  stage.set_mute(std::nullopt, true);
  auto block = constant(2, 100, 0.5f);
  stage.process(block.data(), 100);
  EXPECT_GT(block[0], 0.0f);  // the first frame is still fading
  EXPECT_EQ(block[2 * 47], 0.0f);
  EXPECT_EQ(block[2 * 99 + 1], 0.0f);
  EXPECT_TRUE(stage.muted(std::nullopt));
  stage.set_mute(std::nullopt, false);
  block = constant(2, 100, 0.5f);
  stage.process(block.data(), 100);
  EXPECT_LT(block[0], 0.05f);  // fades in, no jump
  EXPECT_FLOAT_EQ(block[2 * 99], 0.5f);
}

TEST(OutputStage, AChangeInTheMiddleOfARampStartsFromWhereTheGainIs) {
  OutputStage stage(1, rate, 1.0);  // 48 frames
  stage.set_volume_db(0, OutputStage::min_volume_db);
  auto block = constant(1, 24, 1.0f);
  stage.process(block.data(), 24);
  const float halfway = block.back();
  EXPECT_NEAR(halfway, 0.5f, 1e-6f);
  stage.set_volume_db(0, 0.0);
  block = constant(1, 48, 1.0f);
  stage.process(block.data(), 48);
  EXPECT_NEAR(block[0], halfway + 0.5f / 48.0f, 1e-5f);
  EXPECT_FLOAT_EQ(block.back(), 1.0f);
}

TEST(OutputStage, BadChannelsAndVolumesAreRefusedByName) {
  OutputStage stage(2, rate);
  EXPECT_THROW(stage.set_volume_db(2, 0.0), std::out_of_range);
  EXPECT_THROW(stage.set_mute(7, true), std::out_of_range);
  EXPECT_THROW(stage.set_volume_db(0, std::nan("")), std::invalid_argument);
  stage.set_volume_db(0, 99.0);
  EXPECT_EQ(stage.volume_db(0), OutputStage::max_volume_db);
}

TEST(OutputStage, MetersReportTheNewestCallAndEverythingSinceTheCursorsLastRead) {
  OutputStage stage(2, rate);
  MeterCursor first, second;
  auto loud = constant(2, 64, 0.5f);
  loud[0] = -0.9f;  // channel 0's peak
  stage.process(loud.data(), 64);
  auto quiet = constant(2, 64, 0.1f);
  stage.process(quiet.data(), 64);

  auto levels = stage.read_levels(first);
  ASSERT_EQ(levels.size(), 2u);
  EXPECT_FLOAT_EQ(levels[0].peak, 0.1f);
  EXPECT_NEAR(levels[0].rms, 0.1f, 1e-6f);
  EXPECT_FLOAT_EQ(levels[0].peak_since, 0.9f);
  EXPECT_FLOAT_EQ(levels[1].peak_since, 0.5f);
  const double expected_rms = std::sqrt((0.81 + 63 * 0.25 + 64 * 0.01) / 128.0);
  EXPECT_NEAR(levels[0].rms_since, expected_rms, 1e-5);

  stage.process(quiet.data(), 64);
  levels = stage.read_levels(first);
  EXPECT_FLOAT_EQ(levels[0].peak_since, 0.1f);  // the loud call was read already
  // Another client's cursor still sees everything.
  EXPECT_FLOAT_EQ(stage.read_levels(second)[0].peak_since, 0.9f);
}

TEST(OutputStage, ClippedSamplesAreCountedPerChannelAndPerReader) {
  OutputStage stage(2, rate);
  MeterCursor cursor;
  std::vector<float> block = {1.0f, 0.2f, -1.5f, 0.3f, 0.99f, 2.0f};
  stage.process(block.data(), 3);
  auto levels = stage.read_levels(cursor);
  EXPECT_EQ(levels[0].clipped, 2u);
  EXPECT_EQ(levels[1].clipped, 1u);
  EXPECT_EQ(stage.clipped_total(), 3u);
  stage.process(block.data(), 3);  // now scaled by nothing: same samples again
  levels = stage.read_levels(cursor);
  EXPECT_EQ(levels[0].clipped, 2u);
  EXPECT_EQ(levels[0].clipped_total, 4u);
}

TEST(OutputStage, ReadersAndSettersNeverDisturbTheAudioThread) {
  // An audio thread processes a constant signal while control threads move
  // the volume and read meters; every meter value must be one the signal
  // could have produced, and the audio must stay within [0, 1].
  OutputStage stage(4, rate, 2.0);
  std::atomic<bool> done{false};
  std::atomic<int> bad_samples{0};
  std::thread audio([&] {
    std::vector<float> block(4 * 128);
    for (int call = 0; call < 20000; ++call) {
      std::fill(block.begin(), block.end(), 1.0f);
      stage.process(block.data(), 128);
      for (float s : block) {
        if (!(s >= 0.0f && s <= 1.0f)) bad_samples.fetch_add(1);
      }
    }
    done = true;
  });
  const unsigned seed = 14;
  std::printf("seed %u\n", seed);
  std::thread fader([&] {
    std::mt19937 random(seed);
    std::uniform_real_distribution<double> db(-60.0, 0.0);
    while (!done) {
      stage.set_volume_db(random() % 4, db(random));
      stage.set_mute(std::nullopt, random() % 8 == 0);
    }
  });
  std::vector<std::thread> readers;
  std::atomic<int> bad_levels{0};
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      MeterCursor cursor;
      while (!done) {
        for (const auto& level : stage.read_levels(cursor)) {
          if (level.peak > 1.0f || level.peak_since > 1.0f || level.rms > level.peak + 1e-6f ||
              level.clipped > 4 * 128 * 20000) {
            bad_levels.fetch_add(1);
          }
        }
      }
    });
  }
  audio.join();
  fader.join();
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad_samples.load(), 0);
  EXPECT_EQ(bad_levels.load(), 0);
}

}  // namespace
}  // namespace tapstream

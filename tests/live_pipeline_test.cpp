// The live pipeline without sound hardware: file endpoints (unpaced and
// paced) and direct pushes and pulls, compared with the engine run offline
// and with a float64 reference convolution.

#include "daemon/pipeline/live_pipeline.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "daemon/io/audio_device.hpp"
#include "daemon/io/file_endpoints.hpp"
#include "dsp/cpu/cpu_engine.hpp"
#include "dsp/files/coefficient_file.hpp"
#include "dsp/files/sound_file.hpp"
#include "dsp/model/diagonal_engine.hpp"
#include "tests/process_support.hpp"
#include "tests/reference.hpp"
#include "tests/wait_for.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::Child;
using testing::long_wait;
using testing::random_signal;
using testing::read_text;
using testing::reference_convolution;
using testing::relative_error;
using testing::TempDir;
using testing::wait_until;

std::vector<float> channel_of(const std::vector<float>& interleaved, std::size_t channels,
                              std::size_t channel, std::size_t first_frame = 0) {
  std::vector<float> out;
  for (std::size_t i = first_frame * channels + channel; i < interleaved.size(); i += channels) {
    out.push_back(interleaved[i]);
  }
  return out;
}

void write_wav(const fs::path& file, const std::vector<float>& interleaved, int rate,
               int channels) {
  SoundFileWriter writer(file, rate, channels, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
  writer.write(interleaved);
  writer.commit();
}

std::vector<float> read_wav(const fs::path& file, int* channels = nullptr) {
  SoundFileReader reader(file);
  if (channels != nullptr) *channels = reader.info().channels;
  std::vector<float> all(static_cast<std::size_t>(reader.info().frames) * reader.info().channels);
  std::size_t done = 0;
  while (done < all.size()) {
    const std::size_t frames = reader.read(std::span<float>(all).subspan(done));
    if (frames == 0) break;
    done += frames * reader.info().channels;
  }
  all.resize(done);
  return all;
}

// The engine run offline over the whole signal in blocks of `block` frames.
std::vector<float> offline(const FilterBank& bank, const std::vector<float>& interleaved,
                           std::size_t block) {
  EngineOptions options;
  options.max_block_frames = block;
  auto engine = make_cpu_engine(bank, options);
  const std::size_t channels = bank.channels();
  std::vector<float> out(interleaved.size());
  for (std::size_t at = 0; at < interleaved.size(); at += block * channels) {
    const std::size_t frames = std::min(block, (interleaved.size() - at) / channels);
    engine->process(std::span<const float>(interleaved).subspan(at, frames * channels),
                    std::span<float>(out).subspan(at, frames * channels), frames,
                    Layout::interleaved);
  }
  return out;
}

LivePipelineOptions pipeline_options(std::size_t block, std::size_t margin) {
  LivePipelineOptions options;
  options.sample_rate = 48000;
  options.block_frames = block;
  options.margin_frames = margin;
  options.realtime = false;  // tests must not depend on rtprio
  return options;
}

std::unique_ptr<MatrixEngine> engine_for(const FilterBank& bank, std::size_t block,
                                         std::size_t max_taps = 0) {
  EngineOptions options;
  options.max_block_frames = block;
  options.max_taps = max_taps;
  return std::make_unique<DiagonalEngine>(make_cpu_engine(bank, options));
}

// Pushes `input` and pulls everything back through the unpaced side, as
// fast as the engine goes; returns the output stream (latency included).
// `during` runs once after `swap_after_frames` frames were pushed.
template <typename During>
std::vector<float> stream_unpaced(LivePipeline& pipeline, const std::vector<float>& input,
                                  std::size_t period, std::size_t swap_after_frames,
                                  During during) {
  const std::size_t channels = pipeline.channels();
  const std::size_t frames = input.size() / channels;
  // Enough zeros after the end to push the last partial block through.
  std::vector<float> padded(input);
  padded.resize((frames + 2 * pipeline.block_frames()) * channels, 0.0f);
  const std::size_t want = frames + pipeline.latency_frames();
  std::vector<float> output(want * channels);
  std::size_t pushed = 0, pulled = 0;
  bool swapped = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (pulled < want) {
    if (!swapped && pushed >= swap_after_frames) {
      during();
      swapped = true;
    }
    const std::size_t push_frames = std::min(period, padded.size() / channels - pushed);
    pushed += pipeline.offer_input(padded.data() + pushed * channels, push_frames);
    pulled +=
        pipeline.take_output(output.data() + pulled * channels, std::min(period, want - pulled));
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "stream stalled at " << pulled << " of " << want << " frames";
      break;
    }
    std::this_thread::yield();
  }
  return output;
}

TEST(LivePipeline, UnpacedFileStreamEqualsOfflineEngineAfterTheReportedLatency) {
  const std::uint64_t seed = 20261122;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const int rate = 48000;
  const std::size_t channels = 2, block = 256, margin = 96, frames = 48000 + 77;
  const auto input = random_signal(frames * channels, seed);
  const auto bank = FilterBank::per_channel(
      {random_signal(733, seed + 1), random_signal(64, seed + 2)}, {"a", "b"});

  TempDir dir{"tapstream-live"};
  write_wav(dir.path() / "in.wav", input, rate, channels);
  LivePipeline pipeline(engine_for(bank, block), pipeline_options(block, margin));
  FileEndpointOptions files;
  files.input = dir.path() / "in.wav";
  files.output = dir.path() / "out.wav";
  files.paced = false;
  files.period_frames = 100;  // not a divisor of the block: the rings adapt
  FileEndpoints endpoints(pipeline, files);
  pipeline.start();
  endpoints.start();
  ASSERT_TRUE(wait_until(
      std::chrono::seconds(60), [&] { return endpoints.finished(); },
      [&] { return std::to_string(pipeline.stats().frames_in) + " frames in"; }))
      << "the file stream did not finish";
  endpoints.stop();
  pipeline.stop();

  const std::size_t latency = pipeline.latency_frames();
  EXPECT_EQ(latency, block + margin);
  const auto output = read_wav(files.output);
  ASSERT_EQ(output.size(), (frames + latency) * channels) << "every input frame comes out";
  for (std::size_t i = 0; i < latency * channels; ++i) {
    ASSERT_EQ(output[i], 0.0f) << "leading silence at sample " << i;
  }
  const auto expected = offline(bank, input, block);
  for (std::size_t c = 0; c < channels; ++c) {
    const auto got = channel_of(output, channels, c, latency);
    const auto want = channel_of(expected, channels, c);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LT(relative_error(got, want), 1e-5) << "channel " << c;
    const auto exact = reference_convolution(channel_of(input, channels, c), bank.taps(c));
    EXPECT_LT(relative_error(got, exact), 1e-5) << "channel " << c << " vs float64 reference";
  }
  const auto stats = pipeline.stats();
  EXPECT_EQ(stats.underruns, 0u);
  EXPECT_EQ(stats.overruns, 0u);
}

// A file recording a device: the device (here a thread pushing periods at its
// own pace) is the clock; when it stops, the file takes exactly what it
// delivered (the latency's silence, then every frame), counting no underrun.
TEST(LivePipeline, AFileAfterAnInputDeviceHoldsExactlyTheFramesItDelivered) {
  const std::uint64_t seed = 1311;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const std::size_t channels = 2, block = 256, margin = 128, period = 100, periods = 150;
  const auto input = random_signal(period * periods * channels, seed);
  const auto bank = FilterBank::shared(random_signal(65, seed + 1), channels);
  TempDir dir{"tapstream-live"};
  LivePipeline pipeline(engine_for(bank, block), pipeline_options(block, margin));
  FileEndpointOptions files;
  files.output = dir.path() / "rec.wav";
  files.paced = false;  // follows the device's clock
  files.period_frames = block;
  FileEndpoints endpoints(pipeline, files);
  pipeline.start();
  endpoints.start();
  std::thread device([&] {
    for (std::size_t p = 0; p < periods; ++p) {
      pipeline.push_input(input.data() + p * period * channels, period);
      // Pacing, not a wait: the device delivers a period at a time at its own clock.
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  device.join();  // the device stops; this thread is the input side now
  endpoints.finish_after(static_cast<std::int64_t>(pipeline.stats().frames_in));
  pipeline.flush_input();
  ASSERT_TRUE(wait_until(
      long_wait, [&] { return endpoints.finished(); },
      [&] { return std::to_string(pipeline.stats().frames_out) + " frames out"; }));
  endpoints.stop();
  pipeline.stop();
  const std::size_t latency = pipeline.latency_frames();
  const std::size_t frames = period * periods;
  const auto output = read_wav(files.output);
  ASSERT_EQ(output.size(), (frames + latency) * channels) << "latency + every frame received";
  for (std::size_t i = 0; i < latency * channels; ++i) ASSERT_EQ(output[i], 0.0f) << i;
  for (std::size_t c = 0; c < channels; ++c) {
    const auto got = channel_of(output, channels, c, latency);
    const auto exact = reference_convolution(channel_of(input, channels, c), bank.taps(c));
    EXPECT_LT(relative_error(got, exact), 1e-5) << "channel " << c;
  }
  EXPECT_EQ(pipeline.stats().underruns, 0u);
  EXPECT_EQ(pipeline.stats().frames_in, frames) << "the flush is not counted as input";
}

TEST(LivePipeline, PacedFileStreamKeepsRealTimeWithoutXruns) {
  const std::uint64_t seed = 7;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const int rate = 48000;
  // A ring margin of 250 ms: the engine thread is an ordinary one here, and
  // on a loaded 2-core machine it waited over 10 ms (the 512 frames this
  // test had) now and then, which underran the paced output.
  const std::size_t channels = 2, block = 256, margin = 12000, frames = 24000;  // 0.5 s
  const auto input = random_signal(frames * channels, seed);
  const auto bank = FilterBank::shared(random_signal(129, seed + 1), channels);
  TempDir dir{"tapstream-live"};
  write_wav(dir.path() / "in.wav", input, rate, channels);
  LivePipeline pipeline(engine_for(bank, block), pipeline_options(block, margin));
  FileEndpointOptions files;
  files.input = dir.path() / "in.wav";
  files.output = dir.path() / "out.wav";
  files.period_frames = block;
  FileEndpoints endpoints(pipeline, files);
  pipeline.start();
  const auto started = std::chrono::steady_clock::now();
  endpoints.start();
  // Polled every 2 ms: the elapsed time is measured to within that.
  ASSERT_TRUE(wait_until(
      long_wait, [&] { return endpoints.finished(); },
      [&] { return std::to_string(pipeline.stats().frames_in) + " frames in"; },
      std::chrono::milliseconds(2)));
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  endpoints.stop();
  pipeline.stop();
  const double audio_seconds = double(frames + pipeline.latency_frames()) / rate;
  std::printf("paced: %.3f s of audio in %.3f s\n", audio_seconds, elapsed);
  EXPECT_GT(elapsed, 0.9 * audio_seconds) << "a paced source keeps real time";
  const auto stats = pipeline.stats();
  EXPECT_EQ(stats.underruns, 0u);
  EXPECT_EQ(stats.overruns, 0u);
  const auto output = read_wav(files.output);
  ASSERT_EQ(output.size(), (frames + pipeline.latency_frames()) * channels);
  const auto got = channel_of(output, channels, 1, pipeline.latency_frames());
  const auto exact = reference_convolution(channel_of(input, channels, 1), bank.taps(1));
  EXPECT_LT(relative_error(got, exact), 1e-5);
}

// Checks one channel of a stream where the bank changed from `before` to
// `after` at block `k`: exact old filter before, the linear crossfade over
// block k, and exactly the new filter (with the whole input history) after.
void expect_swap_at_block(const std::vector<float>& got, const std::vector<float>& input,
                          std::span<const float> before, std::span<const float> after,
                          std::size_t k, std::size_t block) {
  const auto old_y = reference_convolution(input, before);
  const auto new_y = reference_convolution(input, after);
  const std::size_t start = k * block, end = std::min(got.size(), (k + 1) * block);
  ASSERT_LT(end, got.size()) << "the swap came too late to be seen";
  const auto range = [](const auto& v, std::size_t a, std::size_t b) {
    return std::span(v).subspan(a, b - a);
  };
  EXPECT_LT(relative_error(range(got, 0, start), range(old_y, 0, start)), 1e-5)
      << "before block " << k;
  EXPECT_LT(relative_error(range(got, end, got.size()), range(new_y, end, got.size())), 1e-5)
      << "after block " << k;
  std::vector<double> fade(end - start);
  for (std::size_t i = 0; i < fade.size(); ++i) {
    const double w = double(i + 1) / double(block);
    fade[i] = old_y[start + i] + w * (new_y[start + i] - old_y[start + i]);
  }
  EXPECT_LT(relative_error(range(got, start, end), std::span<const double>(fade)), 1e-5)
      << "crossfade block " << k;
}

TEST(LivePipeline, SwapThroughTheMailboxSwitchesAtOneBlockBoundaryWithCrossfade) {
  const std::uint64_t seed = 4242;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const std::size_t channels = 2, block = 128, margin = 64, frames = 40000;
  const auto input = random_signal(frames * channels, seed);
  const auto old_taps = random_signal(300, seed + 1);
  const auto new_taps = random_signal(1000, seed + 2);
  LivePipeline pipeline(engine_for(FilterBank::shared(old_taps, channels), block, 1000),
                        pipeline_options(block, margin));
  pipeline.start();
  std::uint64_t sequence = 0;
  const auto output = stream_unpaced(pipeline, input, 96, frames / 3, [&] {
    sequence = pipeline.mailbox().post(std::make_shared<const RoutingMatrix>(
        RoutingMatrix::diagonal(FilterBank::shared(new_taps, channels))));
  });
  pipeline.stop();
  EXPECT_EQ(pipeline.mailbox().acknowledged(), sequence);
  const auto stats = pipeline.stats();
  ASSERT_EQ(stats.swaps, 1u);
  std::printf("swapped at block %llu\n", static_cast<unsigned long long>(stats.last_swap_block));
  for (std::size_t c = 0; c < channels; ++c) {
    const auto got = channel_of(output, channels, c, pipeline.latency_frames());
    ASSERT_EQ(got.size(), frames) << "no sample lost or repeated";
    expect_swap_at_block(got, channel_of(input, channels, c), old_taps, new_taps,
                         stats.last_swap_block, block);
  }  // The trace holds the swap: when the engine took the matrix, and from which block.
  const auto swaps = pipeline.trace().swaps.snapshot(10);
  ASSERT_EQ(swaps.size(), 1u);
  EXPECT_EQ(swaps[0][PeriodTrace::swap_block], std::int64_t(stats.last_swap_block));
  EXPECT_LE(swaps[0][PeriodTrace::swap_start], swaps[0][PeriodTrace::swap_end]);
}

TEST(LivePipeline, ABankTheEngineRefusesLeavesTheOldFilterRunning) {
  const std::uint64_t seed = 99;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const std::size_t channels = 2, block = 64, margin = 64, frames = 12000;
  const auto input = random_signal(frames * channels, seed);
  const auto taps = random_signal(50, seed + 1);
  LivePipeline pipeline(engine_for(FilterBank::shared(taps, channels), block, 100),
                        pipeline_options(block, margin));
  pipeline.start();
  std::uint64_t sequence = 0;
  const auto output = stream_unpaced(pipeline, input, 64, frames / 2, [&] {
    // Too long for the engine (max_taps 100): refused at the block boundary.
    sequence = pipeline.mailbox().post(std::make_shared<const RoutingMatrix>(
        RoutingMatrix::diagonal(FilterBank::shared(random_signal(500, seed + 2), channels))));
  });
  pipeline.stop();
  EXPECT_EQ(pipeline.mailbox().rejected(), sequence);
  EXPECT_LT(pipeline.mailbox().acknowledged(), sequence);
  EXPECT_EQ(pipeline.stats().rejected_swaps, 1u);
  EXPECT_EQ(pipeline.stats().swaps, 0u);
  for (std::size_t c = 0; c < channels; ++c) {
    const auto got = channel_of(output, channels, c, pipeline.latency_frames());
    ASSERT_EQ(got.size(), frames);
    EXPECT_LT(relative_error(got, reference_convolution(channel_of(input, channels, c), taps)),
              1e-5)
        << "channel " << c << ": the old filter ran on without a gap";
  }
}

// Waits until the engine has processed `blocks` blocks.
void wait_blocks(const LivePipeline& pipeline, std::uint64_t blocks) {
  ASSERT_TRUE(wait_until(
      long_wait, [&] { return pipeline.stats().blocks >= blocks; },
      [&] { return std::to_string(pipeline.stats().blocks) + " blocks"; },
      std::chrono::milliseconds(1)));
}

// An engine that records, per call, the thread and the frames, and where
// reset() came, around a real engine.
class RecordingEngine final : public MatrixEngine {
 public:
  struct Call {
    std::thread::id thread;
    std::size_t frames = 0;
    float first_sample = 0.0f;
    bool after_reset = false;
  };
  explicit RecordingEngine(std::unique_ptr<MatrixEngine> inner) : inner_(std::move(inner)) {}
  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout layout) override {
    calls_.push_back({std::this_thread::get_id(), frames, in[0], resets_ > 0});
    inner_->process(in, out, frames, layout);
  }
  void set_matrix(const RoutingMatrix& matrix, bool crossfade) override {
    inner_->set_matrix(matrix, crossfade);
  }
  void reset() override {
    ++resets_;
    reset_after_calls_ = calls_.size();
    reset_thread_ = std::this_thread::get_id();
    inner_->reset();
  }
  std::size_t inputs() const override { return inner_->inputs(); }
  std::size_t outputs() const override { return inner_->outputs(); }
  std::size_t max_block_frames() const override { return inner_->max_block_frames(); }
  std::size_t max_taps() const override { return inner_->max_taps(); }
  std::string name() const override { return "recording"; }
  std::string description() const override { return "recording: " + inner_->description(); }

  // Read only after the pipeline stopped (its engine thread joined).
  std::vector<Call> calls_;
  int resets_ = 0;
  std::size_t reset_after_calls_ = 0;
  std::thread::id reset_thread_;

 private:
  std::unique_ptr<MatrixEngine> inner_;
};

TEST(LivePipeline, TheEngineIsWarmedUpOnItsOwnThreadOverTheLongestFilterThenForgetsIt) {
  const std::uint64_t seed = 31;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const std::size_t channels = 2, block = 64, margin = 32, taps = 3000, frames = 4096;
  const auto h = random_signal(taps, seed);
  auto recording =
      std::make_unique<RecordingEngine>(engine_for(FilterBank::shared(h, channels), block));
  RecordingEngine& engine = *recording;
  LivePipeline pipeline(std::move(recording), pipeline_options(block, margin));
  pipeline.start();
  // start() returns once the warm-up is made: no real block has come yet.
  const std::size_t warm_calls = engine.calls_.size();
  EXPECT_EQ(engine.resets_, 1);
  const auto input = random_signal(frames * channels, seed + 1);
  const auto output = stream_unpaced(pipeline, input, block, frames, [] {});
  pipeline.stop();

  // The warm-up spans the longest filter (rounded up to a power of two) in
  // calls of the period, on the thread that makes the real calls, then resets.
  ASSERT_GE(warm_calls * block, std::bit_ceil(taps));
  ASSERT_EQ(engine.reset_after_calls_, warm_calls);
  ASSERT_GT(engine.calls_.size(), warm_calls);
  const std::thread::id engine_thread = engine.calls_.back().thread;
  EXPECT_NE(engine_thread, std::this_thread::get_id());
  EXPECT_EQ(engine.reset_thread_, engine_thread);
  for (std::size_t i = 0; i < engine.calls_.size(); ++i) {
    ASSERT_EQ(engine.calls_[i].thread, engine_thread) << "call " << i;
    if (i < warm_calls) {
      ASSERT_EQ(engine.calls_[i].frames, block) << "warm-up call " << i;
      ASSERT_EQ(engine.calls_[i].first_sample, 0.0f) << "warm-up call " << i;
    }
  }
  // The warm-up leaves no trace in the stream: the output is the filter's
  // from the first sample.
  for (std::size_t c = 0; c < channels; ++c) {
    const auto got = channel_of(output, channels, c, pipeline.latency_frames());
    const auto want = reference_convolution(channel_of(input, channels, c), h);
    ASSERT_EQ(got.size(), frames);
    EXPECT_LT(relative_error(std::span<const float>(got), std::span<const double>(want)), 1e-5)
        << "channel " << c;
  }
}

TEST(LivePipeline, UnderrunsAreCountedAndTheLatencyStaysAsReported) {
  const std::uint64_t seed = 5;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const std::size_t channels = 1, block = 32, margin = 16;
  LivePipeline pipeline(engine_for(FilterBank::shared({1.0f}, channels), block),
                        pipeline_options(block, margin));
  pipeline.start();
  const std::size_t latency = pipeline.latency_frames();
  // The output side asks for two blocks more than the ring holds: silence,
  // counted, and the two late blocks will be dropped when they arrive.
  std::vector<float> out(latency + 2 * block, 1.0f);
  pipeline.pull_output(out.data(), out.size());
  for (float v : out) ASSERT_EQ(v, 0.0f);
  auto stats = pipeline.stats();
  EXPECT_EQ(stats.underruns, 1u);
  EXPECT_EQ(stats.underrun_frames, 2 * block);

  const auto input = random_signal(10 * block, seed);
  pipeline.push_input(input.data(), input.size());
  wait_blocks(pipeline, 10);
  std::vector<float> later(8 * block);
  pipeline.pull_output(later.data(), later.size());
  pipeline.stop();
  // Output frame m carries input frame m - latency: frames 2*block.. of the input.
  for (std::size_t i = 0; i < later.size(); ++i) {
    ASSERT_EQ(later[i], input[2 * block + i]) << "frame " << i;
  }
  EXPECT_EQ(pipeline.stats().underruns, 1u);
}

TEST(LivePipeline, OverrunsAreCountedAndLaterInputKeepsItsPlace) {
  const std::uint64_t seed = 6;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const std::size_t channels = 1, block = 32, margin = 32;
  LivePipeline pipeline(engine_for(FilterBank::shared({1.0f}, channels), block),
                        pipeline_options(block, margin));
  // Before start() nothing reads the input ring: fill it past capacity.
  const std::size_t lost = 40;
  std::size_t capacity = 0;
  const float held = 0.5f;
  while (pipeline.stats().overruns == 0) {
    pipeline.push_input(&held, 1);
    ++capacity;
  }
  --capacity;  // the last push was the first frame lost
  const std::vector<float> more(lost - 1, 0.25f);
  pipeline.push_input(more.data(), more.size());  // lost as well
  EXPECT_EQ(pipeline.stats().overrun_frames, lost);
  pipeline.start();

  // Pull as the engine goes; push the tail once the ring has room for the
  // silence that replaces the lost frames and for the tail itself.
  const auto tail = random_signal(4 * block, seed);
  const std::size_t L = pipeline.latency_frames();
  const std::size_t processed = (capacity + lost + tail.size()) / block * block;
  bool pushed_tail = false;
  std::vector<float> all;
  std::vector<float> chunk(block);
  // Polled every 200 us: each poll takes what the engine has put out.
  EXPECT_TRUE(wait_until(
      long_wait,
      [&] {
        if (!pushed_tail && pipeline.stats().blocks * block > lost + tail.size() + block) {
          pipeline.push_input(tail.data(), tail.size());
          pushed_tail = true;
        }
        for (std::size_t got = block; got > 0 && all.size() < L + processed;) {
          got = pipeline.take_output(chunk.data(), block);
          all.insert(all.end(), chunk.begin(), chunk.begin() + got);
        }
        return all.size() >= L + processed;
      },
      [&] {
        return std::to_string(all.size()) + " of " + std::to_string(L + processed) + " frames";
      },
      std::chrono::microseconds(200)));
  pipeline.stop();
  ASSERT_TRUE(pushed_tail);
  ASSERT_EQ(all.size(), L + processed);
  for (std::size_t i = 0; i < L; ++i) ASSERT_EQ(all[i], 0.0f) << "leading silence " << i;
  for (std::size_t i = 0; i < capacity; ++i) ASSERT_EQ(all[L + i], held) << "frame " << i;
  for (std::size_t i = 0; i < lost; ++i) ASSERT_EQ(all[L + capacity + i], 0.0f) << "lost " << i;
  for (std::size_t i = 0; L + capacity + lost + i < all.size(); ++i) {
    ASSERT_EQ(all[L + capacity + lost + i], tail[i]) << "tail frame " << i;
  }
  EXPECT_EQ(pipeline.stats().overruns, 1u + 1u);
}

// --- swaps through the daemon: `tapstream run` on files, paced ----------

void write_taps(const fs::path& file, const std::vector<float>& taps) {
  save_text_taps(file, taps, "live swap test");
}

// A daemon run on files in real time, with a control socket and a watched
// filter file, long enough to swap filters while it runs.
class DaemonRun {
 public:
  // The ring's margin: 250 ms, so that a paced run survives a loaded machine
  // (a 2048-frame margin underran once in a flake hunt: the swaps are what
  // these tests check, and an underrun shifts the output they compare).
  static constexpr std::size_t channels = 2, block = 256, margin = 12000;
  static constexpr int rate = 48000;

  explicit DaemonRun(std::uint64_t seed, double seconds = 2.0)
      : frames(static_cast<std::size_t>(seconds * rate)),
        input(random_signal(frames * channels, seed)),
        old_taps(random_signal(200, seed + 1)),
        new_taps(random_signal(700, seed + 2)) {
    std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
    write_wav(dir.path() / "in.wav", input, rate, channels);
    write_taps(dir.path() / "filter.txt", old_taps);
    write_config("filter.txt");
  }

  void write_config(const std::string& filter) {
    std::ofstream config(dir.path() / "live.toml.tmp");
    config << "sample_rate = " << rate << "\nblock_frames = " << block
           << "\nchannels = " << channels << "\nring_margin_frames = " << margin
           << "\n[input]\nfile = \"in.wav\"\nrealtime = true\n[output]\nfile = \"out.wav\"\n"
           << "[filter]\nfile = \"" << filter << "\"\nwatch = true\nmax_taps = 1000\n"
           << "[engine]\nbackend = \"cpu\"\n[control]\nsocket = \"" << socket().string() << "\"\n";
    config.close();
    fs::rename(dir.path() / "live.toml.tmp", dir.path() / "live.toml");
  }

  fs::path socket() const { return dir.path() / "ctl" / "control.sock"; }

  void start() {
    daemon = std::make_unique<Child>(std::vector<std::string>{TAPSTREAM_BINARY, "run", "--config",
                                                              (dir.path() / "live.toml").string()},
                                     dir.path() / "daemon.out", dir.path() / "daemon.err");
    // Up once the control socket is there.
    ASSERT_TRUE(wait_until(
        long_wait, [&] { return fs::exists(socket()) || !daemon->running(); },
        [&] { return read_text(dir.path() / "daemon.err"); }));
    ASSERT_TRUE(fs::exists(socket())) << read_text(dir.path() / "daemon.err");
  }

  // Waits until the daemon has filtered `blocks` blocks (`ctl status`): the
  // stream runs, so a swap from now lands mid-stream.
  void wait_until_streaming(std::uint64_t blocks = 10) {
    std::string status;
    ASSERT_TRUE(wait_until(
        long_wait,
        [&] {
          status = ctl({"status"});
          const auto json = nlohmann::json::parse(status, nullptr, false);
          return json.is_object() && json.value("blocks", std::uint64_t{0}) >= blocks;
        },
        [&] { return status + read_text(dir.path() / "daemon.err"); },
        std::chrono::milliseconds(20)));
  }

  // Waits until the daemon's log holds `text`.
  void wait_for_log(const std::string& text) {
    ASSERT_TRUE(wait_until(
        long_wait,
        [&] { return read_text(dir.path() / "daemon.err").find(text) != std::string::npos; },
        [&] { return read_text(dir.path() / "daemon.err"); }))
        << "waiting for \"" << text << "\" in the log";
  }

  // `tapstream ctl ARGS...`: its stdout.
  std::string ctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv{TAPSTREAM_BINARY, "ctl", "--socket", socket().string()};
    argv.insert(argv.end(), args.begin(), args.end());
    Child ctl(argv, dir.path() / "ctl.out", dir.path() / "ctl.err");
    ctl.wait_for(std::chrono::seconds(20));
    return read_text(dir.path() / "ctl.out");
  }

  // Waits for the daemon to finish the input file; returns its log.
  std::string finish() {
    EXPECT_EQ(daemon->wait_for(std::chrono::seconds(30)), 0)
        << read_text(dir.path() / "daemon.err");
    const std::string log = read_text(dir.path() / "daemon.err");
    EXPECT_NE(log.find("underruns 0, overruns 0"), std::string::npos) << log;
    EXPECT_FALSE(fs::exists(socket())) << "the control socket is removed at the end";
    return log;
  }

  // Channel c of the output file after the reported latency.
  std::vector<float> output_channel(std::size_t c) {
    int file_channels = 0;
    const auto output = read_wav(dir.path() / "out.wav", &file_channels);
    EXPECT_EQ(output.size(), (frames + block + margin) * channels) << "every frame came out";
    return channel_of(output, channels, c, block + margin);
  }

  std::vector<float> input_channel(std::size_t c) const { return channel_of(input, channels, c); }

  TempDir dir{"tapstream-live"};
  std::size_t frames;
  std::vector<float> input;
  std::vector<float> old_taps;
  std::vector<float> new_taps;
  std::unique_ptr<Child> daemon;
};

std::vector<std::uint64_t> swap_blocks(const std::string& log) {
  std::vector<std::uint64_t> blocks;
  const std::string marker = "installed at block ";
  for (auto at = log.find(marker); at != std::string::npos; at = log.find(marker, at + 1)) {
    blocks.push_back(std::stoull(log.substr(at + marker.size())));
  }
  return blocks;
}

TEST(LiveDaemonSwaps, CtlLoadRejectsABadFileThenSwapsOneChannelAtABlockBoundary) {
  DaemonRun run(314);
  ASSERT_NO_FATAL_FAILURE(run.start());
  ASSERT_NO_FATAL_FAILURE(run.wait_until_streaming());
  std::ofstream(run.dir.path() / "bad.txt") << "0.5\nnot-a-number\n";
  const std::string bad = run.ctl({"load", "all", (run.dir.path() / "bad.txt").string()});
  EXPECT_NE(bad.find("\"ok\":false"), std::string::npos) << bad;
  EXPECT_NE(bad.find("bad.txt:2"), std::string::npos) << "the reply names file and line: " << bad;
  write_taps(run.dir.path() / "new.txt", run.new_taps);
  const std::string good = run.ctl({"load", "1", (run.dir.path() / "new.txt").string()});
  EXPECT_NE(good.find("\"ok\":true"), std::string::npos) << good;
  const std::string log = run.finish();
  const auto blocks = swap_blocks(log);
  ASSERT_EQ(blocks.size(), 1u) << log;
  std::printf("ctl swap at block %llu\n", static_cast<unsigned long long>(blocks[0]));
  // Channel 0 kept the old filter throughout; channel 1 switched.
  const auto ch0 = run.output_channel(0);
  EXPECT_LT(relative_error(ch0, reference_convolution(run.input_channel(0), run.old_taps)), 1e-5);
  expect_swap_at_block(run.output_channel(1), run.input_channel(1), run.old_taps, run.new_taps,
                       blocks[0], DaemonRun::block);
}

TEST(LiveDaemonSwaps, TheWatcherLoadsARewrittenFileOnlyOnceItIsComplete) {
  DaemonRun run(2718);
  ASSERT_NO_FATAL_FAILURE(run.start());
  ASSERT_NO_FATAL_FAILURE(run.wait_until_streaming());
  {
    // Written in place, slowly: half the taps and a partial line, a pause
    // longer than the watcher's debounce, then the rest.
    std::ofstream file(run.dir.path() / "filter.txt", std::ios::trunc);
    file.precision(9);
    const std::size_t half = run.new_taps.size() / 2;
    for (std::size_t i = 0; i < half; ++i) file << run.new_taps[i] << "\n";
    file << "0.";
    file.flush();
    // The stimulus, not a wait: a writer pausing longer than the watcher's
    // debounce mid-file; the file is complete only at the close.
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    file << "5\n";
    for (std::size_t i = half + 1; i < run.new_taps.size(); ++i) file << run.new_taps[i] << "\n";
  }
  auto expected_new = run.new_taps;
  expected_new[run.new_taps.size() / 2] = 0.5f;
  // Then, once the new filter is in, a bad rewrite (complete, but not
  // numbers): rejected, the new filter stays.
  ASSERT_NO_FATAL_FAILURE(run.wait_for_log("installed at block "));
  std::ofstream(run.dir.path() / "filter.txt", std::ios::trunc) << "garbage\n";
  ASSERT_NO_FATAL_FAILURE(run.wait_for_log("rejected"));
  const std::string log = run.finish();
  EXPECT_NE(log.find("rejected"), std::string::npos) << log;
  const auto blocks = swap_blocks(log);
  ASSERT_EQ(blocks.size(), 1u) << "one swap, after the close; never the half file: " << log;
  std::printf("watcher swap at block %llu\n", static_cast<unsigned long long>(blocks[0]));
  for (std::size_t c = 0; c < DaemonRun::channels; ++c) {
    expect_swap_at_block(run.output_channel(c), run.input_channel(c), run.old_taps, expected_new,
                         blocks[0], DaemonRun::block);
  }
}

TEST(LiveDaemonSwaps, SighupReloadsTheConfigurationsFilterAtABlockBoundary) {
  DaemonRun run(1618);
  write_taps(run.dir.path() / "other.txt", run.new_taps);
  ASSERT_NO_FATAL_FAILURE(run.start());
  ASSERT_NO_FATAL_FAILURE(run.wait_until_streaming());
  run.write_config("other.txt");
  run.daemon->signal(SIGHUP);
  const std::string log = run.finish();
  const auto blocks = swap_blocks(log);
  ASSERT_EQ(blocks.size(), 1u) << log;
  std::printf("SIGHUP swap at block %llu\n", static_cast<unsigned long long>(blocks[0]));
  for (std::size_t c = 0; c < DaemonRun::channels; ++c) {
    expect_swap_at_block(run.output_channel(c), run.input_channel(c), run.old_taps, run.new_taps,
                         blocks[0], DaemonRun::block);
  }
}

TEST(AudioDevices, ChoosingAMissingDeviceNamesTheValue) {
  PortAudioLibrary library;
  try {
    choose_audio_device("no-such-device-xyz", Direction::output, 2);
    FAIL() << "expected an error";
  } catch (const AudioDeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-device-xyz"), std::string::npos) << e.what();
  }
  try {
    choose_audio_device("9999", Direction::input, 2);
    FAIL() << "expected an error";
  } catch (const AudioDeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("9999"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tapstream

// The live pipeline's same-period mode, driven as a device would drive it
// (device_callback with input and output of one period): each period's output
// is that period's filtered input, returned inside the call; a period the
// engine misses plays silence and is counted, and the stream stays aligned;
// a device that changes its period is followed.

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "daemon/pipeline/live_pipeline.hpp"
#include "dsp/cpu/cpu_engine.hpp"
#include "dsp/model/diagonal_engine.hpp"
#include "dsp/realtime/thread_priority.hpp"
#include "tests/reference.hpp"
#include "tests/wait_for.hpp"

namespace tapstream {
namespace {

using testing::random_signal;
using testing::reference_convolution;

// An engine that stalls in one chosen call (as a preempted machine would).
class StallingEngine final : public Engine {
 public:
  StallingEngine(std::unique_ptr<Engine> inner, std::uint64_t stall_call,
                 std::chrono::milliseconds stall)
      : inner_(std::move(inner)), stall_call_(stall_call), stall_(stall) {}
  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout layout) override {
    // The stimulus, not a wait: the engine stalls as a preempted machine would.
    if (calls_++ == stall_call_) std::this_thread::sleep_for(stall_);
    inner_->process(in, out, frames, layout);
  }
  void set_filters(const FilterBank& bank, bool crossfade) override {
    inner_->set_filters(bank, crossfade);
  }
  void reset() override {
    inner_->reset();
    calls_ = 0;  // start() warms the engine up, then resets it
  }
  std::size_t channels() const override { return inner_->channels(); }
  std::size_t max_block_frames() const override { return inner_->max_block_frames(); }
  std::size_t max_taps() const override { return inner_->max_taps(); }
  std::string name() const override { return "stalling"; }
  std::string description() const override { return "stalling " + inner_->description(); }

 private:
  std::unique_ptr<Engine> inner_;
  std::uint64_t calls_ = 0;
  std::uint64_t stall_call_;
  std::chrono::milliseconds stall_;
};

LivePipelineOptions zero_options(std::size_t block) {
  LivePipelineOptions options;
  options.latency = LatencyMode::zero;
  options.block_frames = block;
  options.margin_frames = 0;
  options.realtime = false;  // a test process: no real-time priority needed
  // Generous: a test on a loaded machine is not a real-time thread. The
  // low rate stretches the deadline (period length, 256 ms for 64 frames)
  // without changing the data: the tests that assert no late period hold
  // on a loaded 2-core machine. (What a period costs is bench/ work:
  // live_latency_test prints it, capacity_bench measures the limits.)
  options.sample_rate = 250;
  options.zero_deadline_fraction = 1.0;
  return options;
}

// Drives `periods` (frame counts) through the pipeline one callback each,
// paced at the sample rate; returns the output, interleaved.
std::vector<float> drive(LivePipeline& pipeline, const std::vector<float>& x,
                         const std::vector<std::size_t>& periods) {
  const std::size_t channels = pipeline.channels();
  std::vector<float> y(x.size(), 0.0f);
  std::size_t at = 0;
  for (const std::size_t frames : periods) {
    LivePipeline::device_callback(x.data() + at * channels, y.data() + at * channels, frames,
                                  &pipeline);
    at += frames;
    // Pacing, not a wait: a device's callbacks come apart, not back to back.
    std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
  return y;
}

double max_error(const std::vector<float>& y, std::size_t channels, std::size_t channel,
                 const std::vector<double>& want, std::size_t first, std::size_t last) {
  double e = 0.0;
  for (std::size_t f = first; f < last; ++f) {
    e = std::max(e, std::abs(double(y[f * channels + channel]) - want[f]));
  }
  return e;
}

TEST(LiveZeroLatency, EachPeriodsOutputReturnsInsideItsOwnCallback) {
  const std::size_t channels = 2, block = 64, periods = 300, taps = 3000;
  const std::uint64_t seed = 31;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const auto h = random_signal(taps, seed);
  EngineOptions engine_options;
  engine_options.max_block_frames = block;
  LivePipeline pipeline(std::make_unique<DiagonalEngine>(
                            make_cpu_engine(FilterBank::shared(h, channels), engine_options)),
                        zero_options(block));
  EXPECT_EQ(pipeline.latency_frames(), 0u);
  pipeline.start();
  const auto x = random_signal(channels * block * periods, seed + 1);
  const auto y = drive(pipeline, x, std::vector<std::size_t>(periods, block));
  pipeline.stop();
  const LiveStats stats = pipeline.stats();
  std::printf("late periods %llu\n", static_cast<unsigned long long>(stats.late_periods));
  EXPECT_EQ(stats.late_periods, 0u);
  for (std::size_t c = 0; c < channels; ++c) {
    std::vector<float> xc;
    for (std::size_t f = 0; f < block * periods; ++f) xc.push_back(x[f * channels + c]);
    const auto want = reference_convolution(xc, h);
    EXPECT_LT(max_error(y, channels, c, want, 0, block * periods), 1e-4) << "channel " << c;
  }
}

TEST(LiveZeroLatency, AnEngineThreadThatPollsForInputAnswersExactlyAndStopsAtOnce) {
  const std::size_t channels = 2, block = 64, periods = 200, taps = 3000;
  const std::uint64_t seed = 37;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const auto h = random_signal(taps, seed);
  EngineOptions engine_options;
  engine_options.max_block_frames = block;
  LivePipelineOptions options = zero_options(block);
  options.engine_in_callback = false;
  // Far longer than the test: polling that ignored stop() would show.
  options.engine_spin = std::chrono::seconds(30);
  LivePipeline pipeline(std::make_unique<DiagonalEngine>(
                            make_cpu_engine(FilterBank::shared(h, channels), engine_options)),
                        options);
  pipeline.start();
  ASSERT_FALSE(pipeline.engine_in_callback());
  const auto x = random_signal(channels * block * periods, seed + 1);
  const auto y = drive(pipeline, x, std::vector<std::size_t>(periods, block));
  const auto stopping = std::chrono::steady_clock::now();
  pipeline.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, std::chrono::seconds(2));
  EXPECT_EQ(pipeline.stats().late_periods, 0u);
  for (std::size_t c = 0; c < channels; ++c) {
    std::vector<float> xc;
    for (std::size_t f = 0; f < block * periods; ++f) xc.push_back(x[f * channels + c]);
    const auto want = reference_convolution(xc, h);
    EXPECT_LT(max_error(y, channels, c, want, 0, block * periods), 1e-4) << "channel " << c;
  }
}

TEST(LiveZeroLatency, AMissedDeadlinePlaysSilenceCountsALatePeriodAndStaysAligned) {
  const std::size_t channels = 1, block = 64, periods = 200, stalled = 50;
  const auto h = random_signal(100, 5);
  EngineOptions engine_options;
  engine_options.max_block_frames = block;
  auto engine = std::make_unique<DiagonalEngine>(std::make_unique<StallingEngine>(
      make_cpu_engine(FilterBank::shared(h, channels), engine_options), stalled,
      std::chrono::milliseconds(600)));
  LivePipelineOptions options = zero_options(block);
  // 64 ms periods, 32 ms deadlines: the 600 ms stall misses many, and the
  // periods after it keep theirs even on a loaded machine.
  options.sample_rate = 1000;
  options.zero_deadline_fraction = 0.5;
  LivePipeline pipeline(std::move(engine), options);
  pipeline.start();
  const auto x = random_signal(block * periods, 6);
  const auto y = drive(pipeline, x, std::vector<std::size_t>(periods, block));
  pipeline.stop();
  const LiveStats stats = pipeline.stats();
  // The stall (600 ms) makes the callbacks queued behind it late too: the
  // stalled period was being computed at its deadline, the ones behind it
  // had not been begun.
  EXPECT_GE(stats.late_periods, 2u);
  EXPECT_GE(stats.late_unstarted, 1u);
  EXPECT_LT(stats.late_unstarted, stats.late_periods);
  std::printf("late periods %llu, %llu of them not begun\n",
              static_cast<unsigned long long>(stats.late_periods),
              static_cast<unsigned long long>(stats.late_unstarted));
  const auto want = reference_convolution(x, h);
  std::size_t exact = 0, silent = 0, exact_at_end = 0;
  for (std::size_t p = 0; p < periods; ++p) {
    const double e = max_error(y, 1, 0, want, p * block, (p + 1) * block);
    bool zero = true;
    for (std::size_t f = p * block; f < (p + 1) * block; ++f) zero = zero && y[f] == 0.0f;
    if (e < 1e-4) {
      ++exact;
      if (p >= periods - 50) ++exact_at_end;
    } else {
      EXPECT_TRUE(zero) << "period " << p << " is neither its own output nor silence";
      ++silent;
    }
  }
  EXPECT_EQ(silent, stats.late_periods);
  // Every period above is its own output or silence, so the stream stayed
  // aligned; after the stall the periods are on time again (32 ms
  // deadlines: a loaded machine, or ThreadSanitizer's build, keeps nearly
  // all of them).
  EXPECT_GE(exact_at_end, 45u) << "on time again after the stall";
}

TEST(LiveZeroLatency, TheTraceLinesUpEachLatePeriodWithTheEngineCallThatOverranIt) {
  const std::size_t channels = 1, block = 64, periods = 120, stalled = 40;
  EngineOptions engine_options;
  engine_options.max_block_frames = block;
  auto engine = std::make_unique<DiagonalEngine>(std::make_unique<StallingEngine>(
      make_cpu_engine(FilterBank::shared(random_signal(100, 9), channels), engine_options), stalled,
      std::chrono::milliseconds(400)));
  LivePipelineOptions options = zero_options(block);
  options.sample_rate = 1000;  // 64 ms periods, 32 ms deadlines (as above)
  options.zero_deadline_fraction = 0.5;
  LivePipeline pipeline(std::move(engine), options);
  pipeline.start();
  drive(pipeline, random_signal(block * periods, 10), std::vector<std::size_t>(periods, block));
  pipeline.stop();
  const LiveStats stats = pipeline.stats();
  ASSERT_GE(stats.late_periods, 1u);
  const PeriodTrace& trace = pipeline.trace();
  const auto inputs = trace.inputs.snapshot(PeriodTrace::kRecords);
  const auto outputs = trace.outputs.snapshot(PeriodTrace::kRecords);
  const auto blocks = trace.blocks.snapshot(PeriodTrace::kRecords);
  ASSERT_EQ(inputs.size(), periods);
  ASSERT_EQ(outputs.size(), periods);
  // Every period: its frames in order, its deadline half a period after the
  // callback began; the late ones (and only they) taken past the deadline.
  std::size_t late = 0;
  std::int64_t first_late_frame = -1;
  for (std::size_t p = 0; p < periods; ++p) {
    const auto& in = inputs[p];
    const auto& out = outputs[p];
    EXPECT_EQ(in[PeriodTrace::input_first], std::int64_t(p * block));
    EXPECT_EQ(out[PeriodTrace::output_first], std::int64_t(p * block));
    EXPECT_LE(in[PeriodTrace::input_start], in[PeriodTrace::input_handed]);
    const std::int64_t allowed = out[PeriodTrace::output_deadline] - out[PeriodTrace::output_start];
    // (The deadline is read just after the start: a preempted test thread only lengthens it.)
    EXPECT_GE(allowed, 32'000'000) << "period " << p;
    EXPECT_LE(allowed, 32'000'000 + 30'000'000) << "period " << p;
    if (out[PeriodTrace::output_late] > 0) {
      ++late;
      if (first_late_frame < 0) first_late_frame = out[PeriodTrace::output_first];
      EXPECT_GE(out[PeriodTrace::output_taken], out[PeriodTrace::output_deadline])
          << "period " << p << " counted late before its deadline";
    }
  }
  EXPECT_EQ(late, stats.late_periods);
  // The engine's calls cover the input frame by frame; none starts before
  // its input was handed over; the one that stalled began the first late period.
  std::int64_t next_frame = 0;
  std::int64_t stalled_first = -1;
  for (const auto& b : blocks) {
    EXPECT_EQ(b[PeriodTrace::block_first], next_frame);
    next_frame += b[PeriodTrace::block_frames];
    EXPECT_LE(b[PeriodTrace::block_woke], b[PeriodTrace::block_start]);
    EXPECT_LE(b[PeriodTrace::block_start], b[PeriodTrace::block_end]);
    const auto& handed = inputs[std::size_t(b[PeriodTrace::block_first]) / block];
    EXPECT_GE(b[PeriodTrace::block_woke], handed[PeriodTrace::input_start]);
    if (b[PeriodTrace::block_end] - b[PeriodTrace::block_start] >= 350'000'000) {
      stalled_first = b[PeriodTrace::block_first];
    }
  }
  EXPECT_EQ(next_frame, std::int64_t(periods * block));
  EXPECT_EQ(stalled_first, std::int64_t(stalled * block));
  EXPECT_EQ(first_late_frame, stalled_first);
}

TEST(LiveZeroLatency, APeriodThatChangesIsFollowed) {
  const std::size_t channels = 2, block = 64;
  const auto h = random_signal(500, 8);
  EngineOptions engine_options;
  engine_options.max_block_frames = block;
  LivePipeline pipeline(std::make_unique<DiagonalEngine>(
                            make_cpu_engine(FilterBank::shared(h, channels), engine_options)),
                        zero_options(block));
  pipeline.start();
  std::vector<std::size_t> periods;
  for (int i = 0; i < 40; ++i) periods.push_back(i < 10 ? 64 : i < 20 ? 32 : i < 30 ? 128 : 17);
  std::size_t total = 0;
  for (std::size_t p : periods) total += p;
  const auto x = random_signal(channels * total, 9);
  const auto y = drive(pipeline, x, periods);
  pipeline.stop();
  EXPECT_EQ(pipeline.stats().late_periods, 0u);
  std::vector<float> x0;
  for (std::size_t f = 0; f < total; ++f) x0.push_back(x[f * channels]);
  EXPECT_LT(max_error(y, channels, 0, reference_convolution(x0, h), 0, total), 1e-4);
}

TEST(LiveZeroLatency, TheCpuEngineRunsInsideTheCallbackAndSwapsWithoutAHandOff) {
  // realtime_calls: the non-uniform CPU engine (head in the call, tails on its
  // workers) runs inside device_callback; a bank posted to the mailbox meanwhile
  // reaches it through the swap thread and the engine's preparer, and takes
  // over at one call with a crossfade: every period is the old filter's output,
  // the crossfade, or the new filter's, and nothing is late.
  const std::size_t channels = 2, block = 64, periods = 700, taps = 3000;
  const std::uint64_t seed = 41;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const auto h_old = random_signal(taps, seed);
  const auto h_new = random_signal(taps - 500, seed + 2);
  EngineOptions engine_options;
  engine_options.max_block_frames = block;
  engine_options.max_taps = taps;
  engine_options.realtime_calls = true;
  auto engine = std::make_unique<DiagonalEngine>(
      make_cpu_engine(FilterBank::shared(h_old, channels), engine_options));
  const RealtimeMatrixEngine* realtime = engine->realtime();  // the pipeline's from here on
  ASSERT_NE(realtime, nullptr);
  LivePipeline pipeline(std::move(engine), zero_options(block));
  EXPECT_TRUE(pipeline.engine_in_callback());
  pipeline.start();
  const auto x = random_signal(channels * block * periods, seed + 1);
  std::vector<float> y(x.size(), 0.0f);
  std::uint64_t sequence = 0;
  for (std::size_t p = 0; p < periods; ++p) {
    if (p == 100)
      sequence = pipeline.mailbox().post(std::make_shared<const RoutingMatrix>(
          RoutingMatrix::diagonal(FilterBank::shared(h_new, channels))));
    if (p == 300) {
      // The swap thread has had 200 periods; make sure it has handed the bank
      // over, and that the engine's preparer (a low-priority thread, slow on
      // a loaded machine) has it ready, so that it takes over at the next call.
      ASSERT_TRUE(pipeline.mailbox().wait_acknowledged(sequence, std::chrono::seconds(30)));
      ASSERT_TRUE(testing::wait_until(
          testing::long_wait, [&] { return !realtime->preparing_matrix(); },
          "the engine's preparer done", std::chrono::milliseconds(1)));
    }
    LivePipeline::device_callback(x.data() + p * block * channels, y.data() + p * block * channels,
                                  block, &pipeline);
    // Pacing, not a wait: a device's callbacks come apart, not back to back.
    std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
  pipeline.stop();
  const LiveStats stats = pipeline.stats();
  EXPECT_EQ(stats.late_periods, 0u);
  EXPECT_EQ(stats.swaps, 1u);
  std::vector<float> x0;
  for (std::size_t f = 0; f < block * periods; ++f) x0.push_back(x[f * channels]);
  const auto want_old = reference_convolution(x0, h_old);
  const auto want_new = reference_convolution(x0, h_new);
  std::size_t old_periods = 0, fades = 0, new_periods = 0;
  for (std::size_t p = 0; p < periods; ++p) {
    const std::size_t first = p * block, last = first + block;
    if (new_periods == 0 && fades == 0 && max_error(y, channels, 0, want_old, first, last) < 1e-3) {
      ++old_periods;
      continue;
    }
    if (fades == 0) {
      double e = 0.0;
      for (std::size_t f = first; f < last; ++f) {
        const double w = double(f - first + 1) / double(block);
        e = std::max(
            e, std::abs(double(y[f * channels]) - (want_old[f] + w * (want_new[f] - want_old[f]))));
      }
      ASSERT_LT(e, 1e-3) << "period " << p << " is neither the old filter nor the crossfade";
      ++fades;
      continue;
    }
    ASSERT_LT(max_error(y, channels, 0, want_new, first, last), 1e-3) << "period " << p;
    ++new_periods;
  }
  EXPECT_EQ(fades, 1u);
  EXPECT_GE(old_periods, 100u);
  EXPECT_GE(new_periods, 300u);
}

TEST(LiveZeroLatency, InsideTheCallbackALateTailPlaysSilenceAndTheStreamStaysAligned) {
  // A deadline that has passed when the call begins and callbacks back to
  // back: any period whose tail partition is not done at once is late. Every
  // period is its own output or silence, and the count of silent ones is the
  // count of late periods.
  const std::size_t channels = 4, block = 64, periods = 600, taps = 8000;
  const std::uint64_t seed = 43;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const auto h = random_signal(taps, seed);
  EngineOptions engine_options;
  engine_options.max_block_frames = block;
  engine_options.realtime_calls = true;
  LivePipelineOptions options = zero_options(block);
  options.zero_deadline_fraction = 1e-9;
  LivePipeline pipeline(std::make_unique<DiagonalEngine>(
                            make_cpu_engine(FilterBank::shared(h, channels), engine_options)),
                        options);
  ASSERT_TRUE(pipeline.engine_in_callback());
  pipeline.start();
  const auto x = random_signal(channels * block * periods, seed + 1);
  std::vector<float> y(x.size(), 0.0f);
  for (std::size_t p = 0; p < periods; ++p) {
    LivePipeline::device_callback(x.data() + p * block * channels, y.data() + p * block * channels,
                                  block, &pipeline);
  }
  pipeline.stop();
  const LiveStats stats = pipeline.stats();
  std::printf("late periods %llu of %zu\n", static_cast<unsigned long long>(stats.late_periods),
              periods);
  std::vector<float> x1;
  for (std::size_t f = 0; f < block * periods; ++f) x1.push_back(x[f * channels + 1]);
  const auto want = reference_convolution(x1, h);
  std::size_t silent = 0;
  for (std::size_t p = 0; p < periods; ++p) {
    if (max_error(y, channels, 1, want, p * block, (p + 1) * block) < 1e-3) continue;
    for (std::size_t f = p * block; f < (p + 1) * block; ++f)
      ASSERT_EQ(y[f * channels + 1], 0.0f)
          << "period " << p << " is neither its output nor silence";
    ++silent;
  }
  EXPECT_EQ(silent, stats.late_periods);
  EXPECT_EQ(stats.underruns, stats.late_periods);
  EXPECT_EQ(stats.late_unstarted, 0u) << "no engine thread: nothing waits to be begun";
  EXPECT_EQ(stats.blocks, periods);
}

// Drives the stream of `x` through the pipeline in callbacks of `period`
// frames from frame `at`, until `done` holds after a call (or `limit` calls);
// returns the frame reached. The calls come a period of a 48 kHz device
// apart, so that `limit` calls give the swap thread `limit` periods of time
// (a loaded machine's sanitizer build may take 100 ms and more to build an
// engine) whatever the data's length.
template <typename Done>
std::size_t drive_until(LivePipeline& pipeline, const std::vector<float>& x, std::vector<float>& y,
                        std::size_t at, std::size_t period, std::size_t limit, Done done) {
  const std::size_t channels = pipeline.channels();
  const auto gap = std::chrono::microseconds(period * 1'000'000 / 48'000);
  auto next = std::chrono::steady_clock::now();
  for (std::size_t calls = 0; calls < limit && (at + period) * channels <= x.size(); ++calls) {
    LivePipeline::device_callback(x.data() + at * channels, y.data() + at * channels, period,
                                  &pipeline);
    at += period;
    if (done()) break;
    // Pacing, not a wait: a device's callbacks come a period apart.
    next += gap;
    std::this_thread::sleep_until(next);
  }
  return at;
}

// The CPU engine in the callback (realtime_calls) for `block`-frame calls.
std::unique_ptr<MatrixEngine> callback_engine(const std::vector<float>& h, std::size_t channels,
                                              std::size_t block) {
  EngineOptions engine_options;
  engine_options.max_block_frames = block;
  engine_options.realtime_calls = true;
  return std::make_unique<DiagonalEngine>(
      make_cpu_engine(FilterBank::shared(h, channels), engine_options));
}

TEST(LiveZeroLatency, APeriodChangeReplansTheEngineInTheCallbackAndTheOutputStaysExact) {
  // 256 -> 128 -> 512 frames: after each change the swap thread builds an
  // engine for the new period and the callback takes it over; the old one runs
  // on silence for its response, so every frame is the convolution of the
  // whole stream, with no frame of latency.
  const std::size_t channels = 2, taps = 3000;
  const std::uint64_t seed = 47;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const auto h = random_signal(taps, seed);
  LivePipelineOptions options = zero_options(256);
  std::vector<std::size_t> built;  // swap thread only, read after stop()
  options.engine_for_block = [&](std::size_t block) {
    built.push_back(block);
    return callback_engine(h, channels, block);
  };
  options.response_frames = taps;
  LivePipeline pipeline(callback_engine(h, channels, 256), options);
  ASSERT_TRUE(pipeline.engine_in_callback());
  pipeline.start();
  // Room for every call the limits below allow: 4 s of periods for each build.
  const std::size_t total = 20 * 256 + 1500 * 128 + 400 * 512 + 20 * 512;
  const auto x = random_signal(channels * total, seed + 1);
  std::vector<float> y(x.size(), 0.0f);
  const auto replanned_for = [&](std::size_t block) {
    return [&pipeline, block] {
      return pipeline.engine_block_frames() == block && !pipeline.replanning();
    };
  };
  std::size_t at = drive_until(pipeline, x, y, 0, 256, 20, [] { return false; });
  EXPECT_EQ(pipeline.device_period_frames(), 256u);
  const auto first = pipeline.next_device_change();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->from, 0u);
  EXPECT_EQ(first->to, 256u);
  at = drive_until(pipeline, x, y, at, 128, 1500, replanned_for(128));
  ASSERT_EQ(pipeline.engine_block_frames(), 128u) << "re-planned for 128 frames by frame " << at;
  ASSERT_FALSE(pipeline.replanning());
  const auto second = pipeline.next_device_change();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->kind, DeviceChangeKind::period);
  EXPECT_EQ(second->from, 256u);
  EXPECT_EQ(second->to, 128u);
  at = drive_until(pipeline, x, y, at, 512, 400, replanned_for(512));
  ASSERT_EQ(pipeline.engine_block_frames(), 512u) << "re-planned for 512 frames by frame " << at;
  at = drive_until(pipeline, x, y, at, 512, 20, [] { return false; });
  pipeline.stop();
  const LiveStats stats = pipeline.stats();
  EXPECT_EQ(stats.late_periods, 0u);
  EXPECT_EQ(stats.replans, 2u);
  EXPECT_EQ(built, (std::vector<std::size_t>{128, 512}));
  EXPECT_EQ(pipeline.device_period_frames(), 512u);
  for (std::size_t c = 0; c < channels; ++c) {
    std::vector<float> xc;
    for (std::size_t f = 0; f < at; ++f) xc.push_back(x[f * channels + c]);
    EXPECT_LT(max_error(y, channels, c, reference_convolution(xc, h), 0, at), 1e-4)
        << "channel " << c << ", " << at << " frames";
  }
}

TEST(LiveZeroLatency, AReplanThatFailsLeavesTheRunningEngineFilteringTheNewPeriod) {
  const std::size_t channels = 1, taps = 700;
  const auto h = random_signal(taps, 53);
  LivePipelineOptions options = zero_options(256);
  std::atomic<int> tries{0};
  options.engine_for_block = [&](std::size_t) -> std::unique_ptr<MatrixEngine> {
    ++tries;
    throw std::runtime_error("no engine today");
  };
  LivePipeline pipeline(callback_engine(h, channels, 256), options);
  pipeline.start();
  const std::size_t total = 128 * 300;
  const auto x = random_signal(total, 54);
  std::vector<float> y(x.size(), 0.0f);
  std::size_t at = drive_until(pipeline, x, y, 0, 128, 300, [&] { return tries.load() > 0; });
  at = drive_until(pipeline, x, y, at, 128, 20, [] { return false; });
  pipeline.stop();
  EXPECT_EQ(tries.load(), 1) << "a failed re-plan is not retried for the same period";
  EXPECT_EQ(pipeline.engine_block_frames(), 256u);
  EXPECT_EQ(pipeline.stats().replans, 0u);
  EXPECT_EQ(pipeline.stats().late_periods, 0u);
  EXPECT_LT(max_error(y, 1, 0,
                      reference_convolution(
                          std::vector<float>(x.begin(), x.begin() + std::ptrdiff_t(at)), h),
                      0, at),
            1e-4);
}

// The voluntary context switches of this process's thread named `name` so
// far (/proc/self/task/TID/status), or -1 when there is no such thread.
long voluntary_switches(const std::string& name) {
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (!std::getline(comm, line) || line != name) continue;
    std::ifstream status(task.path() / "status");
    while (std::getline(status, line)) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) return std::stol(line.substr(24));
    }
  }
  return -1;
}

TEST(LiveZeroLatency, TheSwapThreadSleepsUntilAMatrixIsPostedAndThenHandsItOver) {
  // With the engine in the callback, the swap thread used to look at the
  // mailbox every 2 ms: 500 wake-ups a second of an idle daemon. It now
  // sleeps until post() (or a period change, or stop()) wakes it, looking
  // on its own only every swap_poll.
  const auto h = random_signal(500, 61);
  LivePipeline pipeline(callback_engine(h, 1, 64), zero_options(64));
  ASSERT_TRUE(pipeline.engine_in_callback());
  pipeline.start();
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait, [] { return voluntary_switches("ts-swap") >= 0; }, "the swap thread",
      std::chrono::milliseconds(1)));
  const long before = voluntary_switches("ts-swap");
  // The measurement's window, not a wait for a condition: an idle second.
  const auto window = std::chrono::milliseconds(1000);
  std::this_thread::sleep_for(window);
  const long idle = voluntary_switches("ts-swap") - before;
  std::printf("swap thread: %ld voluntary switches in %lld ms idle\n", idle,
              static_cast<long long>(window.count()));
  EXPECT_LE(idle, 2 * (window / LivePipeline::swap_poll) + 5);
  const std::uint64_t sequence = pipeline.post(std::make_shared<const RoutingMatrix>(
      RoutingMatrix::diagonal(FilterBank::shared(random_signal(300, 62), 1))));
  EXPECT_TRUE(pipeline.mailbox().wait_acknowledged(sequence, std::chrono::seconds(30)));
  pipeline.stop();
}

// Whether this test process may make a thread SCHED_FIFO (root, or an rtprio limit).
bool realtime_allowed() {
  bool granted = false;
  std::thread probe([&] { granted = raise_own_priority(1) == 0; });
  probe.join();
  return granted;
}

// Calls the pipeline as a device would, `calls` periods of `block` frames, from
// a thread of its own that first runs at `device_priority` (0: normal, as a
// JACK server without -R leaves it); returns that thread's priority after them.
int callback_thread_priority_after(LivePipeline& pipeline, std::size_t block, int calls,
                                   int device_priority) {
  const std::size_t channels = pipeline.channels();
  std::vector<float> x(channels * block, 0.25f), y(channels * block, 0.0f);
  int after = -1;
  std::thread device([&] {
    if (device_priority > 0 && raise_own_priority(device_priority) != 0) return;
    for (int i = 0; i < calls; ++i) {
      LivePipeline::device_callback(x.data(), y.data(), block, &pipeline);
    }
    after = own_realtime_priority();
  });
  device.join();
  return after;
}

TEST(LiveZeroLatency, AnEngineInTheCallbackRaisesACallbackThreadTheDeviceLeftAtNormalPriority) {
  // The callback does the engine thread's work, so it is owed the engine
  // thread's SCHED_FIFO priority: at normal priority any process preempts it
  // in the middle of a period (docs/performance.md, SOFA).
  const std::size_t channels = 2, block = 64;
  LivePipelineOptions options = zero_options(block);
  options.realtime = true;
  options.realtime_priority = 23;
  LivePipeline pipeline(callback_engine(random_signal(300, 5), channels, block), options);
  ASSERT_TRUE(pipeline.engine_in_callback()) << pipeline.engine_description();
  pipeline.start();
  EXPECT_EQ(pipeline.callback_scheduling().thread_id, 0) << "no callback yet";
  const int after = callback_thread_priority_after(pipeline, block, 3, 0);
  pipeline.stop();
  const CallbackScheduling scheduling = pipeline.callback_scheduling();
  EXPECT_NE(scheduling.thread_id, 0);
  if (!realtime_allowed()) {
    EXPECT_EQ(after, 0);
    EXPECT_FALSE(scheduling.raised);
    EXPECT_EQ(scheduling.raise_error, EPERM) << "a refusal is reported, for the log";
    EXPECT_FALSE(pipeline.realtime_granted());
    GTEST_SKIP() << "SCHED_FIFO refused here (no rtprio): only the refusal was checked";
  }
  EXPECT_EQ(after, 23) << "the callback's thread runs at the pipeline's realtime_priority";
  EXPECT_TRUE(scheduling.raised);
  EXPECT_EQ(scheduling.priority, 23);
  EXPECT_EQ(scheduling.raise_error, 0);
  EXPECT_TRUE(pipeline.realtime_granted()) << "the thread that runs the engine is real-time";
}

TEST(LiveZeroLatency, ACallbackThreadTheDeviceMadeRealTimeKeepsTheDevicesPriority) {
  // JACK's process thread under jackd -R runs at the server's client priority:
  // tapstream does not move it (its helpers follow it instead).
  if (!realtime_allowed()) GTEST_SKIP() << "SCHED_FIFO refused here (no rtprio)";
  const std::size_t channels = 2, block = 64;
  LivePipelineOptions options = zero_options(block);
  options.realtime = true;
  options.realtime_priority = 23;
  LivePipeline pipeline(callback_engine(random_signal(300, 6), channels, block), options);
  ASSERT_TRUE(pipeline.engine_in_callback());
  pipeline.start();
  EXPECT_EQ(callback_thread_priority_after(pipeline, block, 3, 5), 5);
  pipeline.stop();
  const CallbackScheduling scheduling = pipeline.callback_scheduling();
  EXPECT_FALSE(scheduling.raised);
  EXPECT_EQ(scheduling.priority, 5);
}

TEST(LiveZeroLatency, TheCallbackThreadIsLeftAloneWhenTheEngineIsNotInItOrRealTimeIsOff) {
  const std::size_t channels = 2, block = 64;
  {  // The engine on its own thread (which asks for real-time priority itself).
    LivePipelineOptions options = zero_options(block);
    options.realtime = true;
    options.engine_in_callback = false;
    LivePipeline pipeline(callback_engine(random_signal(300, 7), channels, block), options);
    ASSERT_FALSE(pipeline.engine_in_callback());
    pipeline.start();
    EXPECT_EQ(callback_thread_priority_after(pipeline, block, 3, 0), 0);
    pipeline.stop();
    EXPECT_FALSE(pipeline.callback_scheduling().raised);
    EXPECT_EQ(pipeline.callback_scheduling().raise_error, 0) << "not asked";
  }
  {  // The engine in the callback, real-time scheduling not wanted.
    LivePipelineOptions options = zero_options(block);
    options.realtime = false;
    LivePipeline pipeline(callback_engine(random_signal(300, 8), channels, block), options);
    ASSERT_TRUE(pipeline.engine_in_callback());
    pipeline.start();
    EXPECT_EQ(callback_thread_priority_after(pipeline, block, 3, 0), 0);
    pipeline.stop();
    EXPECT_FALSE(pipeline.callback_scheduling().raised);
    EXPECT_EQ(pipeline.callback_scheduling().raise_error, 0) << "not asked";
  }
}

}  // namespace
}  // namespace tapstream

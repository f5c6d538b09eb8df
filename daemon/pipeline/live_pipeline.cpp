#include "daemon/pipeline/live_pipeline.hpp"

#include <pthread.h>
#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <stdexcept>

namespace tapstream {

namespace {

// Room in the rings beyond what steady operation needs, so that a device
// period longer than the engine block, or a late engine, is absorbed before
// it counts as an xrun.
constexpr std::size_t ring_slack_frames = 8192;

std::size_t checked_channels(const std::unique_ptr<Engine>& engine) {
  if (!engine) throw std::invalid_argument("live pipeline: no engine");
  return engine->channels();
}

}  // namespace

LivePipeline::LivePipeline(std::unique_ptr<Engine> engine, const LivePipelineOptions& options)
    : options_(options),
      engine_(std::move(engine)),
      channels_(checked_channels(engine_)),
      engine_name_(engine_->name()),
      engine_description_(engine_->description()),
      engine_max_taps_(engine_->max_taps()),
      input_ring_(channels_ *
                  (4 * (options.block_frames + options.margin_frames) + ring_slack_frames)),
      output_ring_(channels_ *
                   (2 * (options.block_frames + options.margin_frames) + ring_slack_frames)),
      output_stage_(channels_, options.sample_rate > 0 ? options.sample_rate : 48000),
      silence_(channels_ * std::max<std::size_t>(options.block_frames, 1024), 0.0f),
      engine_in_(channels_ * options.block_frames),
      engine_out_(channels_ * options.block_frames) {
  if (options.block_frames == 0) throw std::invalid_argument("live pipeline: block_frames is 0");
  if (options.block_frames > engine_->max_block_frames()) {
    throw std::invalid_argument("live pipeline: block of " + std::to_string(options.block_frames) +
                                " frames exceeds the engine's maximum of " +
                                std::to_string(engine_->max_block_frames()));
  }
  if (options.sample_rate <= 0) throw std::invalid_argument("live pipeline: sample rate <= 0");
  if (sem_init(&data_ready_, 0, 0) != 0) {
    throw std::runtime_error(std::string("sem_init failed: ") + std::strerror(errno));
  }
}

LivePipeline::~LivePipeline() {
  stop();
  sem_destroy(&data_ready_);
}

void LivePipeline::start() {
  if (running_.load()) return;
  // The first calls of an engine can be slow (plans, caches, page faults):
  // make them here rather than in the first real block.
  for (int i = 0; i < 4; ++i) {
    engine_->process(std::span<const float>(silence_.data(), engine_in_.size()), engine_out_,
                     options_.block_frames, Layout::interleaved);
  }
  engine_->reset();
  // Exactly latency_frames() of silence ahead of the first output sample.
  std::size_t to_fill = latency_frames();
  while (to_fill > 0) {
    const std::size_t frames = std::min(to_fill, silence_.size() / channels_);
    output_ring_.write(std::span<const float>(silence_.data(), frames * channels_));
    to_fill -= frames;
  }
  running_.store(true);
  engine_thread_ = std::thread([this] { engine_loop(); });
}

void LivePipeline::stop() {
  if (!running_.exchange(false)) return;
  wake_engine();
  if (engine_thread_.joinable()) engine_thread_.join();
}

void LivePipeline::begin_drain() {
  drain_target_frames_.store(
      frames_in_.load(std::memory_order_relaxed) + latency_frames() + options_.block_frames,
      std::memory_order_relaxed);
  draining_.store(true, std::memory_order_release);
}

bool LivePipeline::drained() const {
  return draining_.load(std::memory_order_acquire) &&
         frames_out_.load(std::memory_order_relaxed) >=
             drain_target_frames_.load(std::memory_order_relaxed);
}

void LivePipeline::wake_engine() noexcept {
  sem_post(&data_ready_);
}

void LivePipeline::push_input(const float* interleaved, std::size_t frames) noexcept {
  const std::size_t silence_frames = silence_.size() / channels_;
  // Input lost to an earlier overrun is replaced by silence first, so that
  // every later sample keeps its place in time.
  while (input_debt_frames_ > 0) {
    const std::size_t frames_now = std::min(input_debt_frames_, silence_frames);
    const std::size_t written =
        input_ring_.write(std::span<const float>(silence_.data(), frames_now * channels_)) /
        channels_;
    input_debt_frames_ -= written;
    if (written < frames_now) break;
  }
  std::size_t written = 0;
  if (input_debt_frames_ == 0) {
    if (draining_.load(std::memory_order_relaxed) || interleaved == nullptr) {
      while (written < frames) {
        const std::size_t frames_now = std::min(frames - written, silence_frames);
        const std::size_t now =
            input_ring_.write(std::span<const float>(silence_.data(), frames_now * channels_)) /
            channels_;
        written += now;
        if (now < frames_now) break;
      }
    } else {
      written =
          input_ring_.write(std::span<const float>(interleaved, frames * channels_)) / channels_;
    }
  }
  if (written < frames) {
    overruns_.fetch_add(1, std::memory_order_relaxed);
    overrun_frames_.fetch_add(frames - written, std::memory_order_relaxed);
    input_debt_frames_ += frames - written;
  }
  frames_in_.fetch_add(frames, std::memory_order_relaxed);
  wake_engine();
}

void LivePipeline::pull_output(float* interleaved, std::size_t frames) noexcept {
  // Frames that came too late (silence was played in their place) are
  // dropped, so that the latency stays what was reported.
  while (output_debt_frames_ > 0) {
    const std::size_t frames_now = std::min(output_debt_frames_, frames);
    const std::size_t dropped =
        output_ring_.read(std::span<float>(interleaved, frames_now * channels_)) / channels_;
    output_debt_frames_ -= dropped;
    if (dropped < frames_now) break;
  }
  std::size_t got = 0;
  if (output_debt_frames_ == 0) {
    got = output_ring_.read(std::span<float>(interleaved, frames * channels_)) / channels_;
  }
  if (got < frames) {
    std::fill(interleaved + got * channels_, interleaved + frames * channels_, 0.0f);
    underruns_.fetch_add(1, std::memory_order_relaxed);
    underrun_frames_.fetch_add(frames - got, std::memory_order_relaxed);
    output_debt_frames_ += frames - got;
  }
  output_stage_.process(interleaved, frames);
  frames_out_.fetch_add(frames, std::memory_order_relaxed);
  wake_engine();
}

void LivePipeline::device_callback(const float* input, float* output, std::size_t frames,
                                   void* context) noexcept {
  auto* pipeline = static_cast<LivePipeline*>(context);
  if (input != nullptr) pipeline->push_input(input, frames);
  if (output != nullptr) pipeline->pull_output(output, frames);
}

std::size_t LivePipeline::offer_input(const float* interleaved, std::size_t frames) {
  const std::size_t written =
      input_ring_.write(std::span<const float>(interleaved, frames * channels_)) / channels_;
  frames_in_.fetch_add(written, std::memory_order_relaxed);
  wake_engine();
  return written;
}

std::size_t LivePipeline::take_output(float* interleaved, std::size_t frames) {
  const std::size_t got =
      output_ring_.read(std::span<float>(interleaved, frames * channels_)) / channels_;
  output_stage_.process(interleaved, got);
  frames_out_.fetch_add(got, std::memory_order_relaxed);
  wake_engine();
  return got;
}

LiveStats LivePipeline::stats() const {
  LiveStats s;
  s.blocks = blocks_.load(std::memory_order_relaxed);
  s.frames_in = frames_in_.load(std::memory_order_relaxed);
  s.frames_out = frames_out_.load(std::memory_order_relaxed);
  s.underruns = underruns_.load(std::memory_order_relaxed);
  s.underrun_frames = underrun_frames_.load(std::memory_order_relaxed);
  s.overruns = overruns_.load(std::memory_order_relaxed);
  s.overrun_frames = overrun_frames_.load(std::memory_order_relaxed);
  s.swaps = swaps_.load(std::memory_order_relaxed);
  s.rejected_swaps = rejected_swaps_.load(std::memory_order_relaxed);
  s.last_swap_block = last_swap_block_.load(std::memory_order_relaxed);
  s.engine_errors = engine_errors_.load(std::memory_order_relaxed);
  return s;
}

void LivePipeline::request_realtime() {
  if (!options_.realtime) return;
  sched_param param{};
  param.sched_priority = options_.realtime_priority;
  const int error = pthread_setschedparam(pthread_self(), SCHED_FIFO, &param);
  if (error == 0) {
    realtime_granted_.store(true, std::memory_order_release);
    spdlog::debug("engine thread: SCHED_FIFO priority {}", options_.realtime_priority);
    return;
  }
  spdlog::warn(
      "real-time scheduling refused for the engine thread ({}): it runs at normal priority, "
      "so a loaded machine may cause underruns (grant rtprio, e.g. via limits.conf or "
      "LimitRTPRIO= in the systemd unit)",
      std::strerror(error));
}

void LivePipeline::engine_loop() {
  request_realtime();
  const std::size_t block_samples = channels_ * options_.block_frames;
  const auto block_period = std::chrono::nanoseconds(
      static_cast<std::int64_t>(1e9 * double(options_.block_frames) / options_.sample_rate));
  // Sleep at most a quarter block between checks, so that a missed wake-up
  // (the semaphore is a hint, not a contract) costs little.
  const auto max_sleep = std::max(block_period / 4, std::chrono::nanoseconds(100'000));
  while (running_.load(std::memory_order_acquire)) {
    if (input_ring_.readable() < block_samples || output_ring_.writable() < block_samples) {
      timespec deadline{};
      clock_gettime(CLOCK_MONOTONIC, &deadline);
      const auto ns = deadline.tv_nsec + max_sleep.count();
      deadline.tv_sec += ns / 1'000'000'000;
      deadline.tv_nsec = ns % 1'000'000'000;
      sem_clockwait(&data_ready_, CLOCK_MONOTONIC, &deadline);
      continue;
    }
    input_ring_.read(std::span<float>(engine_in_));
    const auto started = std::chrono::steady_clock::now();
    const std::uint64_t block = blocks_.load(std::memory_order_relaxed);
    try {
      if (mailbox_.poll(
              [&](const FilterBank& bank) { engine_->set_filters(bank, options_.crossfade); })) {
        swaps_.fetch_add(1, std::memory_order_relaxed);
        last_swap_block_.store(block, std::memory_order_relaxed);
      }
    } catch (const std::exception& e) {
      rejected_swaps_.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("new filters rejected by the engine, the old ones keep running: {}", e.what());
    }
    try {
      engine_->process(engine_in_, engine_out_, options_.block_frames, Layout::interleaved);
    } catch (const std::exception& e) {
      std::fill(engine_out_.begin(), engine_out_.end(), 0.0f);
      if (engine_errors_.fetch_add(1, std::memory_order_relaxed) == 0) {
        spdlog::error("engine failed on block {} (played as silence): {}", block, e.what());
      }
    }
    processing_times_.record(std::chrono::steady_clock::now() - started);
    output_ring_.write(std::span<const float>(engine_out_));
    blocks_.store(block + 1, std::memory_order_relaxed);
  }
}

}  // namespace tapstream

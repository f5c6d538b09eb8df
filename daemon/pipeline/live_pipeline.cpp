#include "daemon/pipeline/live_pipeline.hpp"

#include <pthread.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include "dsp/realtime/deadline_counter.hpp"
#include "dsp/realtime/non_finite.hpp"
#include "dsp/realtime/thread_priority.hpp"
#include "dsp/realtime/thread_role.hpp"

namespace tapstream {

namespace {

// Room in the rings beyond what steady operation needs, so that a device
// period longer than the engine block, or a late engine, is absorbed before
// it counts as an xrun.
constexpr std::size_t ring_slack_frames = 8192;

}  // namespace

LivePipeline::LivePipeline(std::unique_ptr<MatrixEngine> engine, const LivePipelineOptions& options)
    : options_(options),
      engine_(engine ? std::move(engine) : throw std::invalid_argument("live pipeline: no engine")),
      input_channels_(engine_->inputs()),
      output_channels_(engine_->outputs()),
      engine_name_(engine_->name()),
      engine_description_(engine_->description()),
      engine_max_taps_(engine_->max_taps()),
      engine_max_delay_frames_(engine_->max_delay_frames()),
      input_ring_(input_channels_ *
                  (4 * (options.block_frames + options.margin_frames) + ring_slack_frames)),
      output_ring_(output_channels_ *
                   (2 * (options.block_frames + options.margin_frames) + ring_slack_frames)),
      output_stage_(output_channels_, options.sample_rate > 0 ? options.sample_rate : 48000),
      silence_(std::max(input_channels_, output_channels_) *
                   std::max<std::size_t>(options.block_frames, 1024),
               0.0f),
      engine_in_(input_channels_ * options.block_frames),
      engine_out_(output_channels_ * options.block_frames) {
  if (options.block_frames == 0) throw std::invalid_argument("live pipeline: block_frames is 0");
  if (options.block_frames > engine_->max_block_frames()) {
    throw std::invalid_argument("live pipeline: block of " + std::to_string(options.block_frames) +
                                " frames exceeds the engine's maximum of " +
                                std::to_string(engine_->max_block_frames()));
  }
  if (options.sample_rate <= 0) throw std::invalid_argument("live pipeline: sample rate <= 0");
  if (options.zero_deadline_fraction <= 0.0 || options.zero_deadline_fraction > 1.0) {
    throw std::invalid_argument("live pipeline: zero_deadline_fraction must be in (0, 1]");
  }
  if (options.latency == LatencyMode::zero && options.engine_in_callback) {
    realtime_engine_ = engine_->realtime();
  }
  in_callback_ = realtime_engine_ != nullptr;
  swap_target_ = realtime_engine_;
  call_block_frames_ = options.block_frames;
  engine_block_frames_.store(options.block_frames, std::memory_order_relaxed);
  response_frames_ = options.response_frames > 0
                         ? options.response_frames
                         : engine_->max_taps() + engine_->max_delay_frames();
  if (sem_init(&data_ready_, 0, 0) != 0 || sem_init(&output_ready_, 0, 0) != 0) {
    throw std::runtime_error(std::string("sem_init failed: ") + std::strerror(errno));
  }
}

LivePipeline::~LivePipeline() {
  stop();
  sem_destroy(&data_ready_);
  sem_destroy(&output_ready_);
}

void LivePipeline::start() {
  if (running_.load()) return;
  // Exactly latency_frames() of silence ahead of the first output sample.
  std::size_t to_fill = latency_frames();
  while (to_fill > 0) {
    const std::size_t frames = std::min(to_fill, silence_.size() / output_channels_);
    output_ring_.write(std::span<const float>(silence_.data(), frames * output_channels_));
    to_fill -= frames;
  }
  running_.store(true);
  if (in_callback_) {
    // The callback makes the real calls; its thread is not ours to use here.
    warm_up_engine();
    spdlog::info("same-period mode: the engine runs inside the audio callback");
    engine_thread_ = std::thread([this] {
      name_this_thread("ts-swap");
      make_this_thread_background();
      swap_loop();
    });
    return;
  }
  if (options_.latency == LatencyMode::zero && options_.engine_in_callback) {
    // The engine has no real-time face, or declined it (the CPU matrix
    // engine's description says why).
    spdlog::info(
        "same-period mode: the engine runs on the engine thread, which the audio callback wakes "
        "each period");
  }
  warmed_up_.store(false);
  engine_thread_ = std::thread([this] {
    name_this_thread("ts-engine");
    try {
      warm_up_engine();
    } catch (const std::exception& e) {
      warm_up_error_ = e.what();
    }
    warmed_up_.store(true, std::memory_order_release);
    warmed_up_.notify_all();
    if (warm_up_error_.empty()) engine_loop();
  });
  warmed_up_.wait(false, std::memory_order_acquire);
  if (!warm_up_error_.empty()) {
    running_.store(false);
    engine_thread_.join();
    throw std::runtime_error("live pipeline: the engine's first calls failed: " + warm_up_error_);
  }
}

void LivePipeline::warm_up_engine() {
  // An engine's first calls are slow: the CUDA engine's lazily loaded
  // kernels, a new thread's CUDA state, each tail partition's first step;
  // plans, caches and page faults on the CPU. They are made here, on the
  // thread that makes the real ones, over the frames the longest filter spans
  // (so every tail partition takes a step), within a bounded time; the first
  // periods of the stream were late without it. reset() then forgets them.
  using clock = std::chrono::steady_clock;
  const auto until = clock::now() + std::chrono::milliseconds(300);
  const std::size_t span =
      std::min<std::size_t>(std::bit_ceil(std::max<std::size_t>(engine_max_taps_, 1)), 1 << 18);
  const std::span<const float> in(silence_.data(), engine_in_.size());
  std::size_t frames = 0;
  for (int calls = 0; calls < 4 || (frames < span && clock::now() < until); ++calls) {
    engine_->process(in, engine_out_, options_.block_frames, Layout::interleaved);
    frames += options_.block_frames;
  }
  engine_->reset();
  spdlog::debug("engine warmed up: {} frames of silence in {}-frame calls", frames,
                options_.block_frames);
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

void LivePipeline::flush_input() noexcept {
  if (in_callback_) return;  // every period was filtered in its own call
  input_ring_.write(
      std::span<const float>(silence_.data(), options_.block_frames * input_channels_));
  wake_engine();
}

void LivePipeline::wake_engine() noexcept {
  sem_post(&data_ready_);
}

timespec LivePipeline::zero_deadline(std::size_t frames) const noexcept {
  return monotonic_after(std::chrono::nanoseconds(static_cast<long long>(
      1e9 * options_.zero_deadline_fraction * double(frames) / options_.sample_rate)));
}

void LivePipeline::take_replan() noexcept {
  if (replan_state_.load(std::memory_order_acquire) != replan_offered) return;
  // Swaps only: the old engine and buffers go into replan_, freed by the swap thread.
  Replan& replan = *replan_;
  std::swap(engine_, replan.engine);
  std::swap(realtime_engine_, replan.realtime);
  std::swap(call_block_frames_, replan.block_frames);
  engine_in_.swap(replan.engine_in);
  engine_out_.swap(replan.engine_out);
  transition_left_ = replan.transition_frames;
  replan_state_.store(transition_left_ > 0 ? replan_running : replan_done,
                      std::memory_order_release);
  if (transition_left_ == 0) sem_post(&data_ready_);  // the swap thread frees the old engine
}

std::size_t LivePipeline::filter_in_callback(const float* interleaved, std::size_t frames,
                                             const timespec* deadline) noexcept {
  take_replan();
  const bool silent = interleaved == nullptr || draining_.load(std::memory_order_relaxed);
  std::size_t late_frames = 0;
  for (std::size_t done = 0; done < frames;) {
    // During a re-plan's transition replan_ holds the old engine (see the header).
    Replan* old = transition_left_ > 0 ? replan_.get() : nullptr;
    std::size_t n = std::min(frames - done, call_block_frames_);
    if (old != nullptr) n = std::min(n, old->block_frames);
    const std::size_t samples = n * input_channels_, samples_out = n * output_channels_;
    const float* in = silent ? silence_.data() : interleaved + done * input_channels_;
    if (!silent) {
      // The device's buffer is const: the engine takes a copy without NaN and infinities.
      const std::size_t bad = copy_zeroing_non_finite(std::span<const float>(in, samples),
                                                      std::span<float>(engine_in_.data(), samples));
      if (bad > 0) nonfinite_inputs_.fetch_add(bad, std::memory_order_relaxed);
      in = engine_in_.data();
    }
    const auto started = std::chrono::steady_clock::now();
    const std::int64_t started_ns = monotonic_ns();
    const std::span<const float> block_in(in, samples);
    const std::span<float> block_out(engine_out_.data(), samples_out);
    const auto run = [&](MatrixEngine& engine, RealtimeMatrixEngine& realtime,
                         std::span<const float> engine_in, std::span<float> engine_out) {
      if (deadline == nullptr) {  // unpaced: no deadline, so never late
        try {
          engine.process(engine_in, engine_out, n, Layout::interleaved);
        } catch (const std::exception&) {
          std::fill(engine_out.begin(), engine_out.end(), 0.0f);
          engine_errors_.fetch_add(1, std::memory_order_relaxed);
        }
        return true;
      }
      return realtime.process_by(engine_in, engine_out, n, Layout::interleaved, *deadline);
    };
    bool on_time = run(*engine_, *realtime_engine_, block_in, block_out);  // else silence
    if (old != nullptr) {
      // The old engine brings out the response to the input before the
      // switch: it runs on silence, and the sum is the whole convolution.
      const std::span<float> old_out(old->transition_out.data(), samples_out);
      if (run(*old->engine, *old->realtime, std::span<const float>(silence_.data(), samples),
              old_out)) {
        for (std::size_t i = 0; i < samples_out; ++i) block_out[i] += old_out[i];
      } else {
        on_time = false;
      }
      transition_left_ -= std::min(transition_left_, n);
      if (transition_left_ == 0) {
        replan_state_.store(replan_done, std::memory_order_release);
        sem_post(&data_ready_);  // the swap thread frees the old engine
      }
    }
    if (!on_time) {
      std::fill(block_out.begin(), block_out.end(), 0.0f);
      late_frames += n;
    }
    processing_times_.record(std::chrono::steady_clock::now() - started);
    trace_.blocks.write({started_ns, started_ns, monotonic_ns(),
                         std::int64_t(frames_in_.load(std::memory_order_relaxed) + done),
                         std::int64_t(n)});
    blocks_.fetch_add(1, std::memory_order_relaxed);
    // Room is short only if the output side stopped taking: the engine's
    // stream goes on, the output is dropped.
    if (output_ring_.writable() >= samples_out) {
      output_ring_.write(std::span<const float>(engine_out_.data(), samples_out));
    } else {
      overruns_.fetch_add(1, std::memory_order_relaxed);
      overrun_frames_.fetch_add(n, std::memory_order_relaxed);
    }
    done += n;
  }
  return late_frames;
}

void LivePipeline::push_input(const float* interleaved, std::size_t frames) noexcept {
  const std::int64_t started_ns = monotonic_ns();
  const std::uint64_t first_frame = frames_in_.load(std::memory_order_relaxed);
  if (in_callback_) {
    const timespec deadline = zero_deadline(frames);
    const std::size_t late_frames = filter_in_callback(interleaved, frames, &deadline);
    if (late_frames > 0) {
      late_periods_.fetch_add(1, std::memory_order_relaxed);
      underruns_.fetch_add(1, std::memory_order_relaxed);
      underrun_frames_.fetch_add(late_frames, std::memory_order_relaxed);
    }
    frames_in_.fetch_add(frames, std::memory_order_relaxed);
    trace_.inputs.write(
        {started_ns, monotonic_ns(), std::int64_t(first_frame), std::int64_t(frames)});
    // For an output callback of another stream waiting in pull_output().
    sem_post(&output_ready_);
    return;
  }
  const std::size_t silence_frames = silence_.size() / input_channels_;
  // Input lost to an earlier overrun is replaced by silence first, so that
  // every later sample keeps its place in time.
  while (input_debt_frames_ > 0) {
    const std::size_t frames_now = std::min(input_debt_frames_, silence_frames);
    const std::size_t written =
        input_ring_.write(std::span<const float>(silence_.data(), frames_now * input_channels_)) /
        input_channels_;
    input_debt_frames_ -= written;
    if (written < frames_now) break;
  }
  std::size_t written = 0;
  if (input_debt_frames_ == 0) {
    if (draining_.load(std::memory_order_relaxed) || interleaved == nullptr) {
      while (written < frames) {
        const std::size_t frames_now = std::min(frames - written, silence_frames);
        const std::size_t now = input_ring_.write(std::span<const float>(
                                    silence_.data(), frames_now * input_channels_)) /
                                input_channels_;
        written += now;
        if (now < frames_now) break;
      }
    } else {
      written = input_ring_.write(std::span<const float>(interleaved, frames * input_channels_)) /
                input_channels_;
    }
  }
  if (written < frames) {
    overruns_.fetch_add(1, std::memory_order_relaxed);
    overrun_frames_.fetch_add(frames - written, std::memory_order_relaxed);
    input_debt_frames_ += frames - written;
  }
  frames_in_.fetch_add(frames, std::memory_order_relaxed);
  wake_engine();
  trace_.inputs.write(
      {started_ns, monotonic_ns(), std::int64_t(first_frame), std::int64_t(frames)});
}

bool LivePipeline::wait_for_output(std::size_t samples, const timespec& deadline) noexcept {
  // The engine usually answers within tens of microseconds: spin that long
  // first, since waking a sleeping thread costs as much on a virtual machine.
  constexpr long spin_ns = 150'000;
  timespec start{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (timespec now = start; output_ring_.readable() < samples;) {
    for (int i = 0; i < 64; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    const long spun = (now.tv_sec - start.tv_sec) * 1'000'000'000L + (now.tv_nsec - start.tv_nsec);
    const bool past_deadline = now.tv_sec > deadline.tv_sec ||
                               (now.tv_sec == deadline.tv_sec && now.tv_nsec >= deadline.tv_nsec);
    if (past_deadline) return false;
    if (spun >= spin_ns) break;
  }
  while (output_ring_.readable() < samples) {
    // Posts not consumed by an earlier wait only make this loop look again.
    if (sem_clockwait(&output_ready_, CLOCK_MONOTONIC, &deadline) != 0 && errno == ETIMEDOUT) {
      return output_ring_.readable() >= samples;
    }
  }
  return true;
}

void LivePipeline::pull_output(float* interleaved, std::size_t frames) noexcept {
  const std::int64_t started_ns = monotonic_ns();
  std::int64_t deadline_ns = 0;
  if (options_.latency == LatencyMode::zero) {
    const timespec deadline = zero_deadline(frames);
    deadline_ns = to_ns(deadline);
    // Late or not, what is there by now is played; a late period is one
    // that finds its own output short below.
    static_cast<void>(wait_for_output((output_debt_frames_ + frames) * output_channels_, deadline));
  }
  const std::int64_t taken_ns = monotonic_ns();
  const std::uint64_t first_frame = frames_out_.load(std::memory_order_relaxed);
  // Frames that came too late (silence was played in their place) are
  // dropped, so that the latency stays what was reported.
  while (output_debt_frames_ > 0) {
    const std::size_t frames_now = std::min(output_debt_frames_, frames);
    const std::size_t dropped =
        output_ring_.read(std::span<float>(interleaved, frames_now * output_channels_)) /
        output_channels_;
    output_debt_frames_ -= dropped;
    if (dropped < frames_now) break;
  }
  std::size_t got = 0;
  if (output_debt_frames_ == 0) {
    got = output_ring_.read(std::span<float>(interleaved, frames * output_channels_)) /
          output_channels_;
  }
  if (got < frames) {
    std::fill(interleaved + got * output_channels_, interleaved + frames * output_channels_, 0.0f);
    underruns_.fetch_add(1, std::memory_order_relaxed);
    underrun_frames_.fetch_add(frames - got, std::memory_order_relaxed);
    if (options_.latency == LatencyMode::zero) {
      late_periods_.fetch_add(1, std::memory_order_relaxed);
      // Input still in the ring at the deadline: the engine thread had not
      // begun this period (the cause a late period's cure depends on).
      if (input_ring_.readable() > 0) late_unstarted_.fetch_add(1, std::memory_order_relaxed);
    }
    output_debt_frames_ += frames - got;
  }
  output_stage_.process(interleaved, frames);
  frames_out_.fetch_add(frames, std::memory_order_relaxed);
  trace_.outputs.write({started_ns, taken_ns, deadline_ns, std::int64_t(first_frame),
                        std::int64_t(frames), std::int64_t(got < frames ? frames - got : 0)});
  // Buffered: the engine may be waiting for room in the output ring. Zero:
  // push_input() has just woken it for this period, and a second wake-up per
  // period is a futex call and a context switch for nothing.
  if (options_.latency != LatencyMode::zero) wake_engine();
}

void LivePipeline::note_callback_priority() noexcept {
  // The rule of dsp/realtime/thread_priority.hpp: read by the callback itself, now and then.
  if (callback_priority_seen_ && ++callback_calls_since_priority_ < kPriorityRereadCalls) return;
  callback_priority_seen_ = true;
  callback_calls_since_priority_ = 0;
  int priority = own_realtime_priority();
  // The engine's work runs in this thread: it is owed the priority the engine
  // thread would have had. A JACK server without -R or PortAudio's ALSA
  // thread leaves it at normal priority, where any process on the machine
  // preempts it in the middle of a period. A refusal is not asked again.
  if (priority == 0 && in_callback_ && options_.realtime &&
      callback_raise_.load(std::memory_order_relaxed) >= 0) {
    const int error = raise_own_priority(options_.realtime_priority);
    if (error == 0) priority = own_realtime_priority();
    callback_raise_.store(error == 0 ? priority : -error, std::memory_order_relaxed);
  }
  callback_thread_id_.store(static_cast<int>(gettid()), std::memory_order_relaxed);
  callback_priority_.store(priority, std::memory_order_relaxed);
}

CallbackScheduling LivePipeline::callback_scheduling() const {
  CallbackScheduling s;
  s.thread_id = callback_thread_id_.load(std::memory_order_relaxed);
  s.priority = callback_priority_.load(std::memory_order_relaxed);
  const int raise = callback_raise_.load(std::memory_order_relaxed);
  s.raised = raise > 0;
  s.raise_error = raise < 0 ? -raise : 0;
  return s;
}

void LivePipeline::device_callback(const float* input, float* output, std::size_t frames,
                                   void* context) noexcept {
  auto* pipeline = static_cast<LivePipeline*>(context);
  pipeline->note_callback_priority();
  pipeline->note_period(input != nullptr, frames);
  if (input != nullptr) pipeline->push_input(input, frames);
  if (output != nullptr) pipeline->pull_output(output, frames);
}

std::size_t LivePipeline::offer_input(const float* interleaved, std::size_t frames) {
  const std::int64_t started_ns = monotonic_ns();
  const std::uint64_t first_frame = frames_in_.load(std::memory_order_relaxed);
  if (in_callback_) {
    // Unpaced: what the output ring has room for, with all the time it takes.
    frames = std::min(frames, output_ring_.writable() / output_channels_);
    filter_in_callback(interleaved, frames, nullptr);
    frames_in_.fetch_add(frames, std::memory_order_relaxed);
  } else {
    frames = input_ring_.write(std::span<const float>(interleaved, frames * input_channels_)) /
             input_channels_;
    frames_in_.fetch_add(frames, std::memory_order_relaxed);
    wake_engine();
  }
  if (frames > 0) {
    trace_.inputs.write(
        {started_ns, monotonic_ns(), std::int64_t(first_frame), std::int64_t(frames)});
  }
  return frames;
}

std::size_t LivePipeline::take_output(float* interleaved, std::size_t frames) {
  const std::int64_t started_ns = monotonic_ns();
  const std::uint64_t first_frame = frames_out_.load(std::memory_order_relaxed);
  const std::size_t got =
      output_ring_.read(std::span<float>(interleaved, frames * output_channels_)) /
      output_channels_;
  output_stage_.process(interleaved, got);
  frames_out_.fetch_add(got, std::memory_order_relaxed);
  if (got > 0) {
    const std::int64_t now = monotonic_ns();
    trace_.outputs.write({started_ns, now, 0, std::int64_t(first_frame), std::int64_t(got), 0});
  }
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
  s.late_periods = late_periods_.load(std::memory_order_relaxed);
  s.late_unstarted = late_unstarted_.load(std::memory_order_relaxed);
  s.nonfinite_inputs = nonfinite_inputs_.load(std::memory_order_relaxed);
  s.period_changes = period_changes_.load(std::memory_order_relaxed);
  s.replans = replans_.load(std::memory_order_relaxed);
  return s;
}

void LivePipeline::request_realtime() {
  if (!options_.realtime) return;
  sched_param param{};
  param.sched_priority = options_.realtime_priority;
  const int error = pthread_setschedparam(pthread_self(), SCHED_FIFO, &param);
  if (error == 0) {
    current_priority_ = options_.realtime_priority;
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

void LivePipeline::note_period(bool input_side, std::size_t frames) noexcept {
  // Separate input and output streams call from two threads: each its own count.
  SettlingPeriod& seen = input_side ? input_period_ : output_period_;
  if (frames == seen.frames) {
    if (seen.calls < period_settle_calls) ++seen.calls;
  } else {
    seen.frames = frames;
    seen.calls = 1;
  }
  if (seen.calls == period_settle_calls &&
      device_period_frames_.load(std::memory_order_relaxed) != frames) {
    device_period_frames_.store(frames, std::memory_order_relaxed);
    if (in_callback_) sem_post(&data_ready_);  // the swap thread re-plans
  }
}

std::optional<DeviceChange> LivePipeline::next_device_change() {
  const int rate = device_rate_.load(std::memory_order_relaxed);
  if (rate > 0 && rate != (reported_rate_ > 0 ? reported_rate_ : options_.sample_rate)) {
    const DeviceChange change{
        DeviceChangeKind::rate,
        std::size_t(reported_rate_ > 0 ? reported_rate_ : options_.sample_rate), std::size_t(rate)};
    reported_rate_ = rate;
    return change;
  }
  const std::size_t period = device_period_frames_.load(std::memory_order_relaxed);
  if (period == 0 || period == reported_period_frames_) return std::nullopt;
  const DeviceChange change{DeviceChangeKind::period, reported_period_frames_, period};
  if (reported_period_frames_ != 0) period_changes_.fetch_add(1, std::memory_order_relaxed);
  reported_period_frames_ = period;
  return change;
}

std::string LivePipeline::engine_description() const {
  std::lock_guard lock(description_mutex_);
  return engine_description_;
}

void LivePipeline::follow_period() {
  const int state = replan_state_.load(std::memory_order_acquire);
  if (state == replan_done) {
    // The callback runs the new engine alone: free the old one here.
    const std::unique_ptr<Replan> old = std::move(replan_);
    swap_target_ = replan_target_;
    engine_block_frames_.store(replan_block_frames_, std::memory_order_relaxed);
    {
      std::lock_guard lock(description_mutex_);
      engine_description_ = old->description;
    }
    replans_.fetch_add(1, std::memory_order_relaxed);
    replan_state_.store(replan_none, std::memory_order_release);
    spdlog::info(
        "engine re-planned for {}-frame calls: {} (the old one ran {} frames on silence, its "
        "response, summed with the new one's output)",
        replan_block_frames_, old->description, old->transition_frames);
    return;
  }
  if (state != replan_none || !options_.engine_for_block) return;
  const std::size_t period = device_period_frames_.load(std::memory_order_relaxed);
  if (period == 0 || period == replan_failed_for_) return;
  // The head is the period (a power of two at least), as large as the
  // pipeline's buffers allow; a longer period is filtered in calls of that.
  const std::size_t block =
      std::min(std::bit_ceil(period), std::max<std::size_t>(options_.block_frames, 1024));
  if (block == engine_block_frames_.load(std::memory_order_relaxed)) return;
  const auto started = std::chrono::steady_clock::now();
  // replanning() is true from here: the control side sees the build too.
  replan_state_.store(replan_building, std::memory_order_release);
  auto replan = std::make_unique<Replan>();
  try {
    replan->engine = options_.engine_for_block(block);
    replan->realtime = replan->engine ? replan->engine->realtime() : nullptr;
    if (replan->realtime == nullptr || replan->engine->inputs() != input_channels_ ||
        replan->engine->outputs() != output_channels_ ||
        replan->engine->max_block_frames() < block) {
      throw std::runtime_error("the engine built for it cannot run in the callback");
    }
    // Its first calls are slow (plans, caches, page faults): make them here.
    replan->engine_in.assign(input_channels_ * block, 0.0f);
    replan->engine_out.assign(output_channels_ * block, 0.0f);
    for (int i = 0; i < 4; ++i) {
      replan->engine->process(replan->engine_in, replan->engine_out, block, Layout::interleaved);
    }
    replan->engine->reset();
  } catch (const std::exception& e) {
    replan_failed_for_ = period;
    replan_state_.store(replan_none, std::memory_order_release);
    spdlog::warn(
        "device period {} frames: no engine for {}-frame calls ({}); the running one goes on in "
        "calls of up to {} frames",
        period, block, e.what(), engine_block_frames_.load(std::memory_order_relaxed));
    return;
  }
  replan->block_frames = block;
  replan->transition_out.assign(
      output_channels_ * std::max(block, engine_block_frames_.load(std::memory_order_relaxed)),
      0.0f);
  replan->transition_frames = response_frames_;
  replan->description = replan->engine->description();
  replan_target_ = replan->realtime;
  replan_block_frames_ = block;
  replan_ = std::move(replan);
  replan_state_.store(replan_offered, std::memory_order_release);
  spdlog::info(
      "device period {} frames: engine for {}-frame calls built in {:.1f} ms, handed to "
      "the callback",
      period, block,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
          .count());
}

std::uint64_t LivePipeline::post(std::shared_ptr<const RoutingMatrix> matrix,
                                 std::vector<PathTaps> changed) {
  const std::uint64_t sequence = mailbox_.post(std::move(matrix), std::move(changed));
  if (in_callback_) sem_post(&data_ready_);  // the swap thread's wake-up
  return sequence;
}

void LivePipeline::swap_loop() {
  // Woken by post(), a period change, a re-plan's end and stop() (see the header).
  while (running_.load(std::memory_order_acquire)) {
    follow_period();
    const std::uint64_t next_block = blocks_.load(std::memory_order_relaxed);
    try {
      // During a re-plan the callback may hold either engine: matrices wait.
      if (!replanning() &&
          mailbox_.poll([&](const RoutingMatrix& matrix, std::span<const PathTaps> changed) {
            const std::int64_t started_ns = monotonic_ns();
            if (changed.empty()) {
              swap_target_->post_matrix(matrix, options_.crossfade);
            } else {
              swap_target_->post_paths(changed, options_.crossfade);
            }
            response_frames_ = matrix.max_taps();
            trace_.swaps.write({started_ns, monotonic_ns(), std::int64_t(next_block)});
          })) {
        swaps_.fetch_add(1, std::memory_order_relaxed);
        last_swap_block_.store(next_block, std::memory_order_relaxed);
      }
    } catch (const std::exception& e) {
      rejected_swaps_.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("new filters rejected by the engine, the running ones keep running: {}",
                   e.what());
    }
    const timespec deadline = monotonic_after(swap_poll);
    sem_clockwait(&data_ready_, CLOCK_MONOTONIC, &deadline);
  }
}

void LivePipeline::install_posted_bank() {
  const std::uint64_t next_block = blocks_.load(std::memory_order_relaxed);
  try {
    if (mailbox_.poll([&](const RoutingMatrix& matrix, std::span<const PathTaps> changed) {
          const std::int64_t started_ns = monotonic_ns();
          // Paths that changed alone: the engine transforms those only.
          if (changed.empty()) {
            engine_->set_matrix(matrix, options_.crossfade);
          } else {
            engine_->set_paths(changed, options_.crossfade);
          }
          trace_.swaps.write({started_ns, monotonic_ns(), std::int64_t(next_block)});
        })) {
      swaps_.fetch_add(1, std::memory_order_relaxed);
      last_swap_block_.store(next_block, std::memory_order_relaxed);
    }
  } catch (const std::exception& e) {
    rejected_swaps_.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("new filters rejected by the engine, the running ones keep running: {}", e.what());
  }
}

void LivePipeline::filter_block(std::size_t frames, std::int64_t woke_ns) {
  const std::size_t samples_out = output_channels_ * frames;
  // One NaN or infinity would stay in the channel's delay line for the
  // filter's length; every input, from a device, JACK or a file, passes here.
  if (const std::size_t bad =
          zero_non_finite(std::span<float>(engine_in_.data(), input_channels_ * frames));
      bad > 0) {
    nonfinite_inputs_.fetch_add(bad, std::memory_order_relaxed);
  }
  const auto started = std::chrono::steady_clock::now();
  const std::int64_t started_ns = monotonic_ns();
  const std::uint64_t block = blocks_.load(std::memory_order_relaxed);
  try {
    engine_->process(std::span<const float>(engine_in_.data(), input_channels_ * frames),
                     std::span<float>(engine_out_.data(), samples_out), frames,
                     Layout::interleaved);
  } catch (const std::exception& e) {
    std::fill(engine_out_.begin(), engine_out_.begin() + std::ptrdiff_t(samples_out), 0.0f);
    if (engine_errors_.fetch_add(1, std::memory_order_relaxed) == 0) {
      spdlog::error("engine failed on block {} (played as silence): {}", block, e.what());
    }
  }
  processing_times_.record(std::chrono::steady_clock::now() - started);
  trace_.blocks.write(
      {woke_ns, started_ns, monotonic_ns(), std::int64_t(engine_frames_), std::int64_t(frames)});
  engine_frames_ += frames;
  blocks_.store(block + 1, std::memory_order_relaxed);
}

void LivePipeline::follow_callback_priority() {
  const int callback = callback_priority_.load(std::memory_order_relaxed);
  if (callback == applied_callback_priority_) return;
  applied_callback_priority_ = callback;
  // The device's callback (JACK's process thread) must never wait for us:
  // run just below it, and the engine's own helpers below us; a callback that
  // is not real-time leaves us at realtime_priority (dsp/realtime/thread_priority.hpp).
  const int wanted = callback > 0 ? priority_below(callback, 0, options_.realtime_priority)
                                  : options_.realtime_priority;
  if (!realtime_granted_.load(std::memory_order_relaxed) || wanted == current_priority_) return;
  sched_param param{};
  param.sched_priority = wanted;
  if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &param) == 0) {
    current_priority_ = wanted;
    spdlog::debug("engine thread: SCHED_FIFO priority {}, below the device callback's {}", wanted,
                  callback);
  }
}

bool LivePipeline::spin_for_input() noexcept {
  if (options_.engine_spin.count() <= 0) return false;
  const auto until = std::chrono::steady_clock::now() + options_.engine_spin;
  while (input_ring_.readable() == 0) {
    if (!running_.load(std::memory_order_relaxed) || std::chrono::steady_clock::now() >= until) {
      return false;
    }
    for (int i = 0; i < 64; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }
  // The posts of the periods found by polling are spent here, so that the
  // semaphore's count stays that of the periods not yet seen.
  while (sem_trywait(&data_ready_) == 0) {
  }
  return true;
}

void LivePipeline::engine_loop() {
  request_realtime();
  const bool zero = options_.latency == LatencyMode::zero;
  const std::size_t block_samples = input_channels_ * options_.block_frames;
  const auto block_period = std::chrono::nanoseconds(
      static_cast<std::int64_t>(1e9 * double(options_.block_frames) / options_.sample_rate));
  // Buffered: sleep at most a quarter block between checks, so that a missed
  // wake-up (the semaphore is a hint, not a contract) costs little. Zero:
  // every period's push_input() posts, so the engine sleeps until then; at
  // 64-frame periods the quarter-block timeouts were three needless wake-ups
  // a period (the timeout still bounds a wait for room in the output ring).
  const auto max_sleep =
      zero ? 2 * block_period : std::max(block_period / 4, std::chrono::nanoseconds(100'000));
  while (running_.load(std::memory_order_acquire)) {
    follow_callback_priority();
    // Buffered: whole blocks. Zero: whatever the callback handed over, at
    // once, in calls of up to a block.
    const std::size_t wanted =
        zero ? std::min(input_ring_.readable(), block_samples) / input_channels_ * input_channels_
             : block_samples;
    const std::size_t frames = wanted / input_channels_;
    if (wanted == 0 || input_ring_.readable() < wanted ||
        output_ring_.writable() < frames * output_channels_) {
      if (zero && wanted == 0 && spin_for_input()) continue;
      const timespec deadline = monotonic_after(max_sleep);
      sem_clockwait(&data_ready_, CLOCK_MONOTONIC, &deadline);
      continue;
    }
    const std::int64_t woke_ns = monotonic_ns();
    input_ring_.read(std::span<float>(engine_in_.data(), wanted));
    filter_block(frames, woke_ns);
    output_ring_.write(std::span<const float>(engine_out_.data(), frames * output_channels_));
    if (zero) sem_post(&output_ready_);
    // A new bank is taken between blocks, after the output is out: in zero
    // mode the time its installation costs is then the idle rest of the
    // period, not the next period's deadline.
    install_posted_bank();
  }
}

}  // namespace tapstream

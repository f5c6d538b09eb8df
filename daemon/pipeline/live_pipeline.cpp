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

#include "dsp/realtime/deadline_counter.hpp"
#include "dsp/realtime/non_finite.hpp"
#include "dsp/realtime/thread_priority.hpp"

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
    const std::size_t frames = std::min(to_fill, silence_.size() / output_channels_);
    output_ring_.write(std::span<const float>(silence_.data(), frames * output_channels_));
    to_fill -= frames;
  }
  running_.store(true);
  if (realtime_engine_ != nullptr) {
    spdlog::info("same-period mode: the engine runs inside the audio callback");
    engine_thread_ = std::thread([this] { swap_loop(); });
  } else {
    engine_thread_ = std::thread([this] { engine_loop(); });
  }
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
  if (realtime_engine_ != nullptr) return;  // every period was filtered in its own call
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

std::size_t LivePipeline::filter_in_callback(const float* interleaved, std::size_t frames,
                                             const timespec* deadline) noexcept {
  const bool silent = interleaved == nullptr || draining_.load(std::memory_order_relaxed);
  std::size_t late_frames = 0;
  for (std::size_t done = 0; done < frames;) {
    const std::size_t n = std::min(frames - done, options_.block_frames);
    // An engine with a real-time face runs a diagonal matrix: as many
    // outputs as inputs.
    const std::size_t samples = n * input_channels_;
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
    const std::span<float> block_out(engine_out_.data(), samples);
    if (deadline == nullptr) {  // unpaced: no deadline, so never late
      try {
        engine_->process(block_in, block_out, n, Layout::interleaved);
      } catch (const std::exception&) {
        std::fill(block_out.begin(), block_out.end(), 0.0f);
        engine_errors_.fetch_add(1, std::memory_order_relaxed);
      }
    } else if (!realtime_engine_->process_by(block_in, block_out, n, Layout::interleaved,
                                             *deadline)) {
      late_frames += n;  // engine_out_ holds silence
    }
    processing_times_.record(std::chrono::steady_clock::now() - started);
    trace_.blocks.write({started_ns, started_ns, monotonic_ns(),
                         std::int64_t(frames_in_.load(std::memory_order_relaxed) + done),
                         std::int64_t(n)});
    blocks_.fetch_add(1, std::memory_order_relaxed);
    // Room is short only if the output side stopped taking: the engine's
    // stream goes on, the output is dropped.
    if (output_ring_.writable() >= samples) {
      output_ring_.write(std::span<const float>(engine_out_.data(), samples));
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
  if (realtime_engine_ != nullptr) {
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
  callback_priority_.store(own_realtime_priority(), std::memory_order_relaxed);
}

void LivePipeline::device_callback(const float* input, float* output, std::size_t frames,
                                   void* context) noexcept {
  auto* pipeline = static_cast<LivePipeline*>(context);
  pipeline->note_callback_priority();
  if (input != nullptr) pipeline->push_input(input, frames);
  if (output != nullptr) pipeline->pull_output(output, frames);
}

std::size_t LivePipeline::offer_input(const float* interleaved, std::size_t frames) {
  const std::int64_t started_ns = monotonic_ns();
  const std::uint64_t first_frame = frames_in_.load(std::memory_order_relaxed);
  if (realtime_engine_ != nullptr) {
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

void LivePipeline::swap_loop() {
  // Banks are rare: a look every 2 ms costs nothing and keeps a swap's
  // acknowledgement prompt; stop() wakes the wait at once.
  while (running_.load(std::memory_order_acquire)) {
    const std::uint64_t next_block = blocks_.load(std::memory_order_relaxed);
    try {
      if (mailbox_.poll([&](const RoutingMatrix& matrix, std::span<const PathTaps> changed) {
            const std::int64_t started_ns = monotonic_ns();
            if (changed.empty()) {
              realtime_engine_->post_matrix(matrix, options_.crossfade);
            } else {
              realtime_engine_->post_paths(changed, options_.crossfade);
            }
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
    const timespec deadline = monotonic_after(std::chrono::milliseconds(2));
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

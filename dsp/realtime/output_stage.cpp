#include "dsp/realtime/output_stage.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace tapstream {

namespace {

float linear_gain(float db, bool muted) {
  if (muted || db <= OutputStage::min_volume_db) return 0.0f;
  return std::pow(10.0f, db / 20.0f);
}

}  // namespace

OutputStage::OutputStage(std::size_t channels, int sample_rate, double ramp_ms)
    : channels_(channels),
      ramp_frames_(std::max<std::size_t>(
          1, static_cast<std::size_t>(std::lround(ramp_ms * sample_rate / 1000.0)))),
      targets_(std::make_unique<Target[]>(channels + 1)),
      gain_(channels, 1.0f),
      ramp_from_(channels, 1.0f),
      ramp_to_(channels, 1.0f),
      slots_(std::make_unique<Slot[]>(history * channels)),
      clipped_(std::make_unique<std::atomic<std::uint64_t>[]>(channels)) {
  if (channels == 0) throw std::invalid_argument("output stage: no channels");
  if (sample_rate <= 0 || !(ramp_ms >= 0)) {
    throw std::invalid_argument("output stage: bad sample rate or ramp");
  }
  ramp_done_ = ramp_frames_;
}

OutputStage::Target& OutputStage::target(std::optional<std::size_t> channel) {
  return const_cast<Target&>(std::as_const(*this).target(channel));
}

const OutputStage::Target& OutputStage::target(std::optional<std::size_t> channel) const {
  if (!channel) return targets_[channels_];
  if (*channel >= channels_) {
    throw std::out_of_range("channel " + std::to_string(*channel) + " does not exist (0.." +
                            std::to_string(channels_ - 1) + ")");
  }
  return targets_[*channel];
}

void OutputStage::set_volume_db(std::optional<std::size_t> channel, double db) {
  if (std::isnan(db)) throw std::invalid_argument("volume is not a number");
  target(channel).volume_db.store(static_cast<float>(std::clamp(db, min_volume_db, max_volume_db)),
                                  std::memory_order_relaxed);
  targets_version_.fetch_add(1, std::memory_order_release);
}

void OutputStage::set_mute(std::optional<std::size_t> channel, bool muted) {
  target(channel).muted.store(muted, std::memory_order_relaxed);
  targets_version_.fetch_add(1, std::memory_order_release);
}

double OutputStage::volume_db(std::optional<std::size_t> channel) const {
  return target(channel).volume_db.load(std::memory_order_relaxed);
}

bool OutputStage::muted(std::optional<std::size_t> channel) const {
  return target(channel).muted.load(std::memory_order_relaxed);
}

float OutputStage::target_gain(std::size_t channel) const {
  const Target& own = targets_[channel];
  const Target& master = targets_[channels_];
  return linear_gain(own.volume_db.load(std::memory_order_relaxed),
                     own.muted.load(std::memory_order_relaxed)) *
         linear_gain(master.volume_db.load(std::memory_order_relaxed),
                     master.muted.load(std::memory_order_relaxed));
}

void OutputStage::process(float* interleaved, std::size_t frames) noexcept {
  const std::uint64_t version = targets_version_.load(std::memory_order_acquire);
  if (version != seen_version_) {
    seen_version_ = version;
    bool changed = false;
    for (std::size_t c = 0; c < channels_; ++c) {
      const float to = target_gain(c);
      changed = changed || to != ramp_to_[c];
      ramp_from_[c] = gain_[c];
      ramp_to_[c] = to;
    }
    if (changed) ramp_done_ = 0;
  }

  const std::uint64_t call = calls_.load(std::memory_order_relaxed);
  // Slot stores are releases, so a reader that loads any of them sees `started_` >= call.
  started_.store(call, std::memory_order_relaxed);
  Slot* slot = &slots_[(call % history) * channels_];
  const std::size_t ramp_left = ramp_frames_ - std::min(ramp_done_, ramp_frames_);
  const std::size_t ramp_now = std::min(frames, ramp_left);
  for (std::size_t c = 0; c < channels_; ++c) {
    float* sample = interleaved + c;
    float peak = 0.0f;
    float sum = 0.0f;
    std::uint64_t clipped = 0;
    const auto measure = [&](float value) {
      const float magnitude = std::fabs(value);
      peak = std::max(peak, magnitude);
      sum += value * value;
      clipped += magnitude >= 1.0f ? 1 : 0;
    };
    // The ramp: the gain moves by a constant step per frame.
    std::size_t f = 0;
    if (ramp_now > 0) {
      const float step = (ramp_to_[c] - ramp_from_[c]) / float(ramp_frames_);
      const float start = ramp_from_[c] + step * float(ramp_done_);
      // Clamped, so that rounding never takes the gain past either end.
      const float low = std::min(ramp_from_[c], ramp_to_[c]);
      const float high = std::max(ramp_from_[c], ramp_to_[c]);
      for (; f < ramp_now; ++f) {
        sample[f * channels_] *= std::clamp(start + step * float(f + 1), low, high);
        measure(sample[f * channels_]);
      }
      gain_[c] = ramp_now == ramp_left ? ramp_to_[c]
                                       : std::clamp(start + step * float(ramp_now), low, high);
    }
    const float gain = gain_[c];
    if (gain == 1.0f) {
      for (; f < frames; ++f) measure(sample[f * channels_]);
    } else {
      for (; f < frames; ++f) {
        sample[f * channels_] *= gain;
        measure(sample[f * channels_]);
      }
    }
    if (clipped > 0) clipped_[c].fetch_add(clipped, std::memory_order_relaxed);
    slot[c].peak.store(peak, std::memory_order_release);
    slot[c].sum_squares.store(sum, std::memory_order_release);
    slot[c].frames.store(static_cast<std::uint32_t>(frames), std::memory_order_release);
  }
  ramp_done_ += ramp_now;
  calls_.store(call + 1, std::memory_order_release);
}

std::vector<ChannelLevels> OutputStage::read_levels(MeterCursor& cursor) const {
  cursor.clipped_read.resize(channels_, 0);
  std::vector<ChannelLevels> levels(channels_);
  std::uint64_t calls = 0;
  // Read, then check that the audio thread has not started to overwrite the
  // oldest slot read meanwhile (a seqlock on `started_`); try again if it has.
  for (int attempt = 0; attempt < 8; ++attempt) {
    calls = calls_.load(std::memory_order_acquire);
    const std::uint64_t first =
        std::max(cursor.calls_read, calls > history / 2 ? calls - history / 2 : 0);
    for (std::size_t c = 0; c < channels_; ++c) {
      ChannelLevels& level = levels[c];
      level = ChannelLevels{};
      if (calls > 0) {
        const Slot& newest = slots_[((calls - 1) % history) * channels_ + c];
        const std::uint32_t frames = newest.frames.load(std::memory_order_acquire);
        level.peak = newest.peak.load(std::memory_order_acquire);
        level.rms = frames > 0
                        ? std::sqrt(newest.sum_squares.load(std::memory_order_acquire) / frames)
                        : 0.0f;
      }
      double sum = 0;
      std::uint64_t frames = 0;
      for (std::uint64_t call = first; call < calls; ++call) {
        const Slot& slot = slots_[(call % history) * channels_ + c];
        level.peak_since = std::max(level.peak_since, slot.peak.load(std::memory_order_acquire));
        sum += slot.sum_squares.load(std::memory_order_acquire);
        frames += slot.frames.load(std::memory_order_acquire);
      }
      // Nothing new since the previous read: the newest call stands for "since".
      if (frames == 0) {
        level.peak_since = level.peak;
        level.rms_since = level.rms;
      } else {
        level.rms_since = static_cast<float>(std::sqrt(sum / double(frames)));
      }
    }
    const std::uint64_t started = started_.load(std::memory_order_relaxed);
    const std::uint64_t oldest = calls > 0 ? std::min(first, calls - 1) : 0;
    if (calls == 0 || started < oldest + history) break;
  }
  for (std::size_t c = 0; c < channels_; ++c) {
    ChannelLevels& level = levels[c];
    level.clipped_total = clipped_[c].load(std::memory_order_relaxed);
    level.clipped = level.clipped_total - cursor.clipped_read[c];
    cursor.clipped_read[c] = level.clipped_total;
  }
  cursor.calls_read = calls;
  return levels;
}

std::uint64_t OutputStage::clipped_total() const {
  std::uint64_t total = 0;
  for (std::size_t c = 0; c < channels_; ++c) total += clipped_[c].load(std::memory_order_relaxed);
  return total;
}

}  // namespace tapstream

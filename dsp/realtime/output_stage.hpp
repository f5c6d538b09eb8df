#pragma once
// The last stage of the live path: volume and mute per output channel and a
// master, applied with linear ramps (never a step, so never a click), and
// per-channel peak/RMS meters.
//
// Threads: exactly one thread (the audio thread) calls process(); any number
// of control threads call the setters and read the meters.
// - Setters store targets (gain in dB as float bits, mute flags) in relaxed
//   atomics and bump `targets_version_` with release; process() loads the
//   version with acquire at the start of a call and, when it changed, reads
//   the targets and starts a new ramp from wherever the gain is now. A
//   setter racing a call is seen at the next call: a fader moves within one
//   period plus the ramp.
// - Meters: process() writes each call's peak, sum of squares and frame
//   count per channel into slot (call % history) of a ring of relaxed
//   atomics, then publishes the call count with release. A reader (a
//   MeterCursor, one per client, so that "since last read" is per client)
//   loads the count with acquire, so every slot below it is complete, and
//   reads at most the newest history/2 calls. A slot being read could still
//   be overwritten by a reader descheduled for history/2 calls, so the
//   audio thread stores the call it starts in `started_` before writing its
//   slot, with release stores into the slot; the reader loads slots with
//   acquire, so if it saw any value of an overwrite, its later load of
//   `started_` sees that call, and it reads again (a seqlock). Clip counts
//   are monotonic per-channel counters with one writer. (Release/acquire
//   are plain moves on x86.)
// process() never locks, allocates, logs or waits; readers never block it.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace tapstream {

struct ChannelLevels {
  float peak = 0;                   // of the newest call (linear, after volume)
  float rms = 0;                    // of the newest call
  float peak_since = 0;             // since this cursor's previous read
  float rms_since = 0;              // since this cursor's previous read
  std::uint64_t clipped = 0;        // samples with |x| >= 1 since this cursor's previous read
  std::uint64_t clipped_total = 0;  // since start
};

// Where one reader stands in the meter history.
struct MeterCursor {
  std::uint64_t calls_read = 0;
  std::vector<std::uint64_t> clipped_read;
  friend bool operator==(const MeterCursor&, const MeterCursor&) = default;
};

class OutputStage {
 public:
  static constexpr double min_volume_db = -150.0;  // at or below: silence
  static constexpr double max_volume_db = 20.0;
  static constexpr std::size_t history = 256;  // calls of meter history kept

  OutputStage(std::size_t channels, int sample_rate, double ramp_ms = 20.0);

  // --- control side -------------------------------------------------------
  // channel nullopt: the master. Volume is clamped to [min, max]_volume_db;
  // throws std::out_of_range for a channel that does not exist and
  // std::invalid_argument for a volume that is not a number.
  void set_volume_db(std::optional<std::size_t> channel, double db);
  void set_mute(std::optional<std::size_t> channel, bool muted);
  double volume_db(std::optional<std::size_t> channel) const;
  bool muted(std::optional<std::size_t> channel) const;
  std::size_t channels() const { return channels_; }
  std::size_t ramp_frames() const { return ramp_frames_; }

  // Levels per channel since `cursor`'s previous read; advances the cursor.
  std::vector<ChannelLevels> read_levels(MeterCursor& cursor) const;
  std::uint64_t clipped_total() const;

  // --- audio side ------------------------------------------------------------
  void process(float* interleaved, std::size_t frames) noexcept;

 private:
  struct alignas(64) Target {
    std::atomic<float> volume_db{0.0f};
    std::atomic<bool> muted{false};
  };
  struct Slot {
    std::atomic<float> peak{0.0f};
    std::atomic<float> sum_squares{0.0f};
    std::atomic<std::uint32_t> frames{0};
  };
  Target& target(std::optional<std::size_t> channel);
  const Target& target(std::optional<std::size_t> channel) const;
  float target_gain(std::size_t channel) const;

  std::size_t channels_;
  std::size_t ramp_frames_;
  std::unique_ptr<Target[]> targets_;  // channels_ + 1: the master is the last
  std::atomic<std::uint64_t> targets_version_{0};

  // Audio thread only.
  std::uint64_t seen_version_ = ~std::uint64_t{0};
  std::vector<float> gain_;       // now
  std::vector<float> ramp_from_;  // where the current ramp started
  std::vector<float> ramp_to_;    // where it ends
  std::size_t ramp_done_ = 0;     // frames of the current ramp already played

  std::unique_ptr<Slot[]> slots_;  // history x channels
  std::unique_ptr<std::atomic<std::uint64_t>[]> clipped_;
  std::atomic<std::uint64_t> calls_{0};
  std::atomic<std::uint64_t> started_{0};  // the call whose slot is being written
};

}  // namespace tapstream

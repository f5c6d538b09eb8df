#pragma once
// A one-line progress bar on stderr for long offline jobs. It draws only when
// stderr is a terminal, and only once a job turns out to be long (its
// projected run time passes ~2 s), so short runs and logs piped to files stay
// clean. Used by one thread (the offline pipeline's caller).

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace tapstream {

class ProgressBar {
 public:
  // `total` units of work (frames); `enabled` is usually stderr_is_terminal().
  ProgressBar(std::uint64_t total, bool enabled, std::FILE* out = stderr);
  ~ProgressBar();  // clears the bar if it was drawn
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // `done` units finished so far; redraws at most ~10 times a second.
  void update(std::uint64_t done);
  // Removes the bar from the terminal (before the final log line).
  void finish();

  bool drawn() const { return drawn_; }

  static bool stderr_is_terminal();
  // Whether a job that is `fraction` (0..1) done after `elapsed_s` seconds is
  // long enough to deserve a bar: it has run a moment and is projected to take
  // more than about two seconds in all.
  static bool worth_showing(double elapsed_s, double fraction);

 private:
  using Clock = std::chrono::steady_clock;

  void draw(std::uint64_t done, double elapsed_s);

  std::uint64_t total_;
  bool enabled_;
  std::FILE* out_;
  bool drawn_ = false;
  Clock::time_point start_;
  Clock::time_point last_draw_;
};

}  // namespace tapstream

#include "daemon/commands/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <string>

namespace tapstream {

namespace {
constexpr double kMinElapsedSeconds = 0.3;  // too early to project before this
constexpr double kLongJobSeconds = 2.0;     // jobs shorter than this get no bar
constexpr double kRedrawSeconds = 0.1;
constexpr int kBarWidth = 40;
}  // namespace

ProgressBar::ProgressBar(std::uint64_t total, bool enabled, std::FILE* out)
    : total_(total), enabled_(enabled && total > 0), out_(out), start_(Clock::now()) {}

ProgressBar::~ProgressBar() {
  finish();
}

bool ProgressBar::stderr_is_terminal() {
  return ::isatty(STDERR_FILENO) == 1;
}

bool ProgressBar::worth_showing(double elapsed_s, double fraction) {
  if (elapsed_s < kMinElapsedSeconds) return false;
  if (fraction >= 1.0) return false;
  if (fraction <= 0.0) return true;  // no progress yet after a while: surely long
  return elapsed_s / fraction > kLongJobSeconds;
}

void ProgressBar::update(std::uint64_t done) {
  if (!enabled_) return;
  const auto now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (drawn_) {
    if (std::chrono::duration<double>(now - last_draw_).count() < kRedrawSeconds) return;
  } else {
    const double fraction = double(done) / double(total_);
    if (!worth_showing(elapsed, fraction)) return;
  }
  last_draw_ = now;
  draw(done, elapsed);
}

void ProgressBar::draw(std::uint64_t done, double elapsed_s) {
  const double fraction = std::clamp(double(done) / double(total_), 0.0, 1.0);
  const int filled = int(fraction * kBarWidth);
  std::string bar(std::size_t(filled), '=');
  if (filled < kBarWidth) bar += '>';
  bar.resize(kBarWidth, ' ');
  const double remaining = fraction > 0.0 ? elapsed_s * (1.0 - fraction) / fraction : 0.0;
  // \r and "erase to end of line" keep the bar on one line of the terminal.
  std::fprintf(out_, "\r[%s] %3d%%  ETA %.0f s\033[K", bar.c_str(), int(fraction * 100.0),
               remaining);
  std::fflush(out_);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (!drawn_) return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace tapstream

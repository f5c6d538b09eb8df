#pragma once
// What a filter does, computed from its taps: the frequency response on a
// grid (magnitude, phase, group delay) and the figures `tapstream info`
// prints (DC and peak gain, group delay at DC, linear phase, -3 dB points).
// Uses FFTW's double-precision planner, which is not thread safe: call from
// one thread at a time (the commands' main thread).

#include <cmath>
#include <complex>
#include <cstddef>
#include <span>
#include <vector>

namespace tapstream {

struct FrequencyResponse {
  std::vector<double> frequency_hz;         // 0 .. sample_rate / 2, evenly spaced
  std::vector<std::complex<double>> value;  // H(f)
  std::vector<double> group_delay_frames;   // -d(phase)/d(omega); NaN where |H| ~ 0
};

// The response at `points` frequencies or more (a power of two plus one, at
// least 4 times the taps so that no ripple falls between grid points).
FrequencyResponse frequency_response(std::span<const float> taps, double sample_rate,
                                     std::size_t points = 4097);

struct FilterSummary {
  std::size_t taps = 0;
  bool all_zero = false;
  double dc_gain_db = 0.0;    // -inf for a zero at DC
  double peak_gain_db = 0.0;  // over the grid
  double peak_hz = 0.0;
  // sum(n h[n]) / sum(h[n]); not finite when the DC gain is zero.
  double group_delay_dc_frames = 0.0;
  // Symmetric or antisymmetric taps: every frequency is delayed by (taps-1)/2.
  bool linear_phase = false;
  double linear_phase_latency_frames = 0.0;
  // Where the magnitude crosses 3 dB below its peak, in ascending order.
  std::vector<double> minus_3db_hz;
};

FilterSummary summarize_filter(std::span<const float> taps, double sample_rate);

inline double to_db(double magnitude) {
  return 20.0 * std::log10(magnitude);
}

}  // namespace tapstream

#pragma once
// A filter made for one sample rate, carried to another: the impulse
// response resampled with libsoxr at its very high quality (linear phase,
// passband flat to 0.01 dB up to 91 % of the lower Nyquist frequency, stop band
// at 175 dB) and scaled by from / to, so that its frequency response keeps its
// level (a resampled impulse response is the same continuous response sampled
// more or less often: its taps sum to the same DC gain). Content above the
// lower rate's Nyquist frequency is lost when going down; nothing is made up
// above the old Nyquist when going up.

#include <span>
#include <stdexcept>
#include <vector>

namespace tapstream {

class FilterResamplingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `taps` at `from_rate` Hz, resampled to `to_rate` Hz: ceil(size * to / from)
// taps, time-aligned (a tap at t seconds stays at t seconds). Throws
// FilterResamplingError for a rate <= 0 or libsoxr's refusal.
std::vector<float> resample_filter(std::span<const float> taps, double from_rate, double to_rate);

}  // namespace tapstream

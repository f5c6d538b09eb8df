#pragma once
// Windowed-sinc FIR design, so that users can make coefficient files without
// other tools.

#include <cstddef>
#include <string>
#include <vector>

namespace tapstream {

// lr_lowpass / lr_highpass: linear-phase FIR crossover halves with the
// magnitude of a Linkwitz-Riley filter of `order` (1 / (1 + (f/fc)^order) and
// its complement); the highpass is the unit impulse minus the lowpass, so a
// pair of the same length sums to a pure delay of (taps - 1) / 2 frames.
enum class FilterType { lowpass, highpass, bandpass, bandstop, lr_lowpass, lr_highpass };
enum class WindowType { kaiser, hann, hamming, blackman, rectangular };

struct FilterSpec {
  FilterType type = FilterType::lowpass;
  double sample_rate = 48000.0;
  double cutoff_hz = 1000.0;  // the (first) edge
  double cutoff2_hz = 0.0;    // the second edge for bandpass and bandstop
  std::size_t taps = 255;     // highpass and bandstop need an odd count
  WindowType window = WindowType::kaiser;
  double kaiser_beta = 8.6;
  int order = 4;  // Linkwitz-Riley order (even, 2..8)
};

// True for the Linkwitz-Riley crossover types (they have no stopband promise).
bool is_linkwitz_riley(FilterType type);

// Throws std::invalid_argument naming the bad parameter.
std::vector<float> design_fir(const FilterSpec& spec);

// How deep a design's stopband is against what its window promises (Kaiser:
// beta / 0.1102 + 8.7 dB; hann 44, hamming 53, blackman 74, rectangular 21),
// measured beyond one transition width from every edge.
struct StopbandCheck {
  double promised_db = 0.0;  // attenuation, positive
  double achieved_db = 0.0;  // the least attenuation found in the stopband
  bool has_stopband = true;  // false: the transition bands cover it all (too few taps)
  // More than 10 dB short of the promise, or no stopband at all.
  bool missed() const { return !has_stopband || achieved_db < promised_db - 10.0; }
};
StopbandCheck check_stopband(const FilterSpec& spec, const std::vector<float>& taps);

FilterType parse_filter_type(const std::string& name);
WindowType parse_window_type(const std::string& name);

}  // namespace tapstream

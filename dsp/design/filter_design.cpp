#include "dsp/design/filter_design.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

#include "dsp/design/filter_response.hpp"

namespace tapstream {

namespace {

constexpr std::size_t kMaxDesignTaps = std::size_t{1} << 24;

std::string hz(double value) {
  std::string text = std::to_string(value);
  // to_string always prints six decimals; drop the zeros nobody typed.
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text + " Hz";
}

bool is_band(FilterType type) {
  return type == FilterType::bandpass || type == FilterType::bandstop;
}

const char* type_name(FilterType type) {
  switch (type) {
    case FilterType::lowpass:
      return "lowpass";
    case FilterType::highpass:
      return "highpass";
    case FilterType::bandpass:
      return "bandpass";
    case FilterType::bandstop:
      return "bandstop";
    case FilterType::lr_lowpass:
      return "linkwitz-riley lowpass";
    case FilterType::lr_highpass:
      return "linkwitz-riley highpass";
  }
  return "filter";
}

void validate(const FilterSpec& spec) {
  if (!(std::isfinite(spec.sample_rate) && spec.sample_rate > 0.0)) {
    throw std::invalid_argument("sample rate " + hz(spec.sample_rate) + " must be positive");
  }
  const double nyquist = spec.sample_rate / 2.0;
  if (!(std::isfinite(spec.cutoff_hz) && spec.cutoff_hz > 0.0 && spec.cutoff_hz < nyquist)) {
    throw std::invalid_argument("cutoff " + hz(spec.cutoff_hz) +
                                " must be above 0 and below half the sample rate (" + hz(nyquist) +
                                ")");
  }
  if (is_band(spec.type)) {
    if (!(std::isfinite(spec.cutoff2_hz) && spec.cutoff2_hz > spec.cutoff_hz &&
          spec.cutoff2_hz < nyquist)) {
      throw std::invalid_argument(std::string(type_name(spec.type)) + " second cutoff " +
                                  hz(spec.cutoff2_hz) + " must be above the first (" +
                                  hz(spec.cutoff_hz) + ") and below half the sample rate (" +
                                  hz(nyquist) + ")");
    }
  }
  if (spec.taps < 1) throw std::invalid_argument("taps must be at least 1");
  if (spec.taps > kMaxDesignTaps) {
    throw std::invalid_argument("taps " + std::to_string(spec.taps) + " is more than the " +
                                std::to_string(kMaxDesignTaps) + " that design supports");
  }
  if (is_linkwitz_riley(spec.type) && (spec.order < 2 || spec.order > 8 || spec.order % 2 != 0)) {
    throw std::invalid_argument("linkwitz-riley order " + std::to_string(spec.order) +
                                " must be 2, 4, 6 or 8");
  }
  if ((spec.type == FilterType::highpass || spec.type == FilterType::bandstop ||
       is_linkwitz_riley(spec.type)) &&
      spec.taps % 2 == 0) {
    throw std::invalid_argument(std::string(type_name(spec.type)) +
                                " needs an odd number of taps (" + std::to_string(spec.taps) +
                                " is even: an even-length symmetric filter has a zero at Nyquist)");
  }
  if (spec.window == WindowType::kaiser &&
      !(std::isfinite(spec.kaiser_beta) && spec.kaiser_beta >= 0.0)) {
    throw std::invalid_argument("kaiser beta " + std::to_string(spec.kaiser_beta) +
                                " must be zero or more");
  }
}

// Modified Bessel function of the first kind, order 0, by its power series
// sum_k ((x/2)^k / k!)^2, which converges for every x (terms shrink once k > x/2).
double bessel_i0(double x) {
  const double half = x / 2.0;
  double term = 1.0;
  double sum = 1.0;
  for (int k = 1; k < 1000; ++k) {
    term *= half / k;
    const double squared = term * term;
    sum += squared;
    if (squared < sum * 1e-17) break;
  }
  return sum;
}

// Symmetric window value at tap n of `taps` (so w[n] == w[taps-1-n]).
double window_value(const FilterSpec& spec, std::size_t n) {
  if (spec.taps == 1) return 1.0;
  const double last = static_cast<double>(spec.taps - 1);
  const double phase = 2.0 * std::numbers::pi * static_cast<double>(n) / last;
  switch (spec.window) {
    case WindowType::rectangular:
      return 1.0;
    case WindowType::hann:
      return 0.5 - 0.5 * std::cos(phase);
    case WindowType::hamming:
      return 0.54 - 0.46 * std::cos(phase);
    case WindowType::blackman:
      return 0.42 - 0.5 * std::cos(phase) + 0.08 * std::cos(2.0 * phase);
    case WindowType::kaiser: {
      const double r = 2.0 * static_cast<double>(n) / last - 1.0;
      return bessel_i0(spec.kaiser_beta * std::sqrt(std::max(0.0, 1.0 - r * r))) /
             bessel_i0(spec.kaiser_beta);
    }
  }
  return 1.0;
}

// Ideal lowpass impulse response sin(w t) / (pi t) at offset t from the centre.
double ideal_lowpass(double omega, double t) {
  if (t == 0.0) return omega / std::numbers::pi;
  return std::sin(omega * t) / (std::numbers::pi * t);
}

// The linear-phase lowpass half of a Linkwitz-Riley crossover: the zero-phase
// magnitude 1 / (1 + (f/fc)^order) sampled densely and inverted (a cosine
// sum over the half band), centred and windowed; unity gain at DC.
std::vector<double> linkwitz_riley_lowpass(const FilterSpec& spec) {
  const std::size_t n_taps = spec.taps;
  const double centre = static_cast<double>(n_taps - 1) / 2.0;
  const std::size_t grid = std::max<std::size_t>(8192, 16 * n_taps);
  std::vector<double> magnitude(grid + 1);
  for (std::size_t k = 0; k <= grid; ++k) {
    const double f = spec.sample_rate / 2.0 * static_cast<double>(k) / static_cast<double>(grid);
    magnitude[k] = 1.0 / (1.0 + std::pow(f / spec.cutoff_hz, spec.order));
  }
  std::vector<double> h(n_taps);
  double sum = 0.0;
  for (std::size_t n = 0; n < n_taps; ++n) {
    const double t = static_cast<double>(n) - centre;
    double acc = 0.0;  // trapezoid rule over [0, pi]
    for (std::size_t k = 0; k <= grid; ++k) {
      const double w = std::numbers::pi * static_cast<double>(k) / static_cast<double>(grid);
      acc += (k == 0 || k == grid ? 0.5 : 1.0) * magnitude[k] * std::cos(w * t);
    }
    h[n] = acc / static_cast<double>(grid) * window_value(spec, n);
    sum += h[n];
  }
  for (double& v : h) v /= sum;
  return h;
}

}  // namespace

bool is_linkwitz_riley(FilterType type) {
  return type == FilterType::lr_lowpass || type == FilterType::lr_highpass;
}

std::vector<float> design_fir(const FilterSpec& spec) {
  validate(spec);
  if (is_linkwitz_riley(spec.type)) {
    const std::vector<double> low = linkwitz_riley_lowpass(spec);
    std::vector<float> taps(low.size());
    const std::size_t centre = (low.size() - 1) / 2;
    for (std::size_t n = 0; n < low.size(); ++n) {
      const double value = spec.type == FilterType::lr_lowpass ? low[n] : -low[n];
      taps[n] = static_cast<float>(n == centre && spec.type == FilterType::lr_highpass ? 1.0 + value
                                                                                       : value);
    }
    return taps;
  }
  const std::size_t n_taps = spec.taps;
  const double centre = static_cast<double>(n_taps - 1) / 2.0;
  const double omega1 = 2.0 * std::numbers::pi * spec.cutoff_hz / spec.sample_rate;
  const double omega2 = 2.0 * std::numbers::pi * spec.cutoff2_hz / spec.sample_rate;

  std::vector<double> h(n_taps);
  for (std::size_t n = 0; n < n_taps; ++n) {
    const double t = static_cast<double>(n) - centre;
    const double impulse = t == 0.0 ? 1.0 : 0.0;  // only hit for odd lengths
    double ideal = 0.0;
    switch (spec.type) {
      case FilterType::lowpass:
        ideal = ideal_lowpass(omega1, t);
        break;
      case FilterType::highpass:
        ideal = impulse - ideal_lowpass(omega1, t);
        break;
      case FilterType::bandpass:
        ideal = ideal_lowpass(omega2, t) - ideal_lowpass(omega1, t);
        break;
      case FilterType::bandstop:
        ideal = impulse - (ideal_lowpass(omega2, t) - ideal_lowpass(omega1, t));
        break;
      case FilterType::lr_lowpass:
      case FilterType::lr_highpass:
        break;  // designed above
    }
    h[n] = ideal * window_value(spec, n);
  }
  // Mirror the first half so that the taps are symmetric to the last bit
  // (exactly linear phase), whatever rounding the window formulas have.
  for (std::size_t n = 0; n < n_taps / 2; ++n) h[n_taps - 1 - n] = h[n];

  // Scale so that the amplitude response (real, because the taps are
  // symmetric) is exactly 1 in the middle of the passband.
  double omega_pass = 0.0;
  switch (spec.type) {
    case FilterType::lowpass:
    case FilterType::bandstop:
      omega_pass = 0.0;
      break;
    case FilterType::highpass:
      omega_pass = std::numbers::pi;
      break;
    case FilterType::bandpass:
      omega_pass = (omega1 + omega2) / 2.0;
      break;
    case FilterType::lr_lowpass:
    case FilterType::lr_highpass:
      break;  // designed above
  }
  double gain = 0.0;
  for (std::size_t n = 0; n < n_taps; ++n) {
    gain += h[n] * std::cos(omega_pass * (static_cast<double>(n) - centre));
  }
  if (!(std::fabs(gain) > 1e-9)) {
    throw std::invalid_argument(std::string(type_name(spec.type)) + " with " +
                                std::to_string(n_taps) +
                                " taps has no gain in its passband: use more taps");
  }
  std::vector<float> taps(n_taps);
  for (std::size_t n = 0; n < n_taps; ++n) taps[n] = static_cast<float>(h[n] / gain);
  return taps;
}

StopbandCheck check_stopband(const FilterSpec& spec, const std::vector<float>& taps) {
  StopbandCheck check;
  // Attenuation and transition width (in cycles per sample, times taps - 1)
  // of each window, from Kaiser's formulas and the usual tables.
  double width_times_length = 0.0;
  switch (spec.window) {
    case WindowType::kaiser:
      check.promised_db = spec.kaiser_beta > 0.0 ? spec.kaiser_beta / 0.1102 + 8.7 : 21.0;
      width_times_length = std::max(check.promised_db - 7.95, 10.0) / 14.36;
      break;
    case WindowType::hann:
      check.promised_db = 44.0;
      width_times_length = 3.1;
      break;
    case WindowType::hamming:
      check.promised_db = 53.0;
      width_times_length = 3.3;
      break;
    case WindowType::blackman:
      check.promised_db = 74.0;
      width_times_length = 5.5;
      break;
    case WindowType::rectangular:
      check.promised_db = 21.0;
      width_times_length = 0.9;
      break;
  }
  const double transition_hz = spec.sample_rate * width_times_length /
                               static_cast<double>(std::max<std::size_t>(taps.size() - 1, 1));
  const auto in_stopband = [&](double f) {
    const auto away = [&](double edge) { return std::fabs(f - edge) > transition_hz; };
    switch (spec.type) {
      case FilterType::lowpass:
        return f > spec.cutoff_hz && away(spec.cutoff_hz);
      case FilterType::highpass:
        return f < spec.cutoff_hz && away(spec.cutoff_hz);
      case FilterType::bandpass:
        return (f < spec.cutoff_hz || f > spec.cutoff2_hz) && away(spec.cutoff_hz) &&
               away(spec.cutoff2_hz);
      case FilterType::bandstop:
        return f > spec.cutoff_hz && f < spec.cutoff2_hz && away(spec.cutoff_hz) &&
               away(spec.cutoff2_hz);
      case FilterType::lr_lowpass:
      case FilterType::lr_highpass:
        return false;  // a crossover's slope has no stopband to promise
    }
    return false;
  };
  const FrequencyResponse response = frequency_response(taps, spec.sample_rate);
  double worst = 0.0;
  bool any = false;
  for (std::size_t k = 0; k < response.value.size(); ++k) {
    if (!in_stopband(response.frequency_hz[k])) continue;
    any = true;
    worst = std::max(worst, std::abs(response.value[k]));
  }
  check.has_stopband = any;
  check.achieved_db = any ? -to_db(worst) : 0.0;
  return check;
}

FilterType parse_filter_type(const std::string& name) {
  if (name == "lowpass") return FilterType::lowpass;
  if (name == "highpass") return FilterType::highpass;
  if (name == "bandpass") return FilterType::bandpass;
  if (name == "bandstop") return FilterType::bandstop;
  if (name == "lr-lowpass") return FilterType::lr_lowpass;
  if (name == "lr-highpass") return FilterType::lr_highpass;
  throw std::invalid_argument(
      "unknown filter type '" + name +
      "' (expected lowpass, highpass, bandpass, bandstop, lr-lowpass or lr-highpass)");
}

WindowType parse_window_type(const std::string& name) {
  if (name == "kaiser") return WindowType::kaiser;
  if (name == "hann") return WindowType::hann;
  if (name == "hamming") return WindowType::hamming;
  if (name == "blackman") return WindowType::blackman;
  if (name == "rectangular") return WindowType::rectangular;
  throw std::invalid_argument("unknown window '" + name +
                              "' (expected kaiser, hann, hamming, blackman or rectangular)");
}

}  // namespace tapstream

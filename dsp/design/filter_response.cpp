#include "dsp/design/filter_response.hpp"

#include <fftw3.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>
#include <stdexcept>

namespace tapstream {

namespace {

struct FftwFree {
  void operator()(void* p) const { fftw_free(p); }
};

// The n-point real DFT of `samples` (zero-padded), n/2 + 1 bins. Double
// precision, so that a stopband of -150 dB is measured, not FFT noise.
std::vector<std::complex<double>> real_dft(const std::vector<double>& samples, std::size_t n) {
  std::unique_ptr<double, FftwFree> in(static_cast<double*>(fftw_malloc(n * sizeof(double))));
  std::unique_ptr<fftw_complex, FftwFree> out(
      static_cast<fftw_complex*>(fftw_malloc((n / 2 + 1) * sizeof(fftw_complex))));
  if (!in || !out) throw std::bad_alloc();
  // FFTW_ESTIMATE: one transform, so measuring would cost more than it saves.
  fftw_plan plan = fftw_plan_dft_r2c_1d(static_cast<int>(n), in.get(), out.get(), FFTW_ESTIMATE);
  std::fill(in.get(), in.get() + n, 0.0);
  std::copy(samples.begin(), samples.end(), in.get());
  fftw_execute(plan);
  fftw_destroy_plan(plan);
  std::vector<std::complex<double>> bins(n / 2 + 1);
  for (std::size_t k = 0; k < bins.size(); ++k) bins[k] = {out.get()[k][0], out.get()[k][1]};
  return bins;
}

}  // namespace

FrequencyResponse frequency_response(std::span<const float> taps, double sample_rate,
                                     std::size_t points) {
  if (taps.empty()) throw std::invalid_argument("no taps");
  const std::size_t n =
      std::bit_ceil(std::max({2 * (points - 1), 4 * taps.size(), std::size_t{16}}));
  std::vector<double> h(taps.begin(), taps.end());
  std::vector<double> nh(taps.size());
  for (std::size_t i = 0; i < taps.size(); ++i) nh[i] = static_cast<double>(i) * h[i];
  FrequencyResponse response;
  response.value = real_dft(h, n);
  const auto weighted = real_dft(nh, n);
  double peak = 0.0;
  for (const auto& v : response.value) peak = std::max(peak, std::abs(v));
  response.frequency_hz.resize(response.value.size());
  response.group_delay_frames.resize(response.value.size());
  for (std::size_t k = 0; k < response.value.size(); ++k) {
    response.frequency_hz[k] = sample_rate * static_cast<double>(k) / static_cast<double>(n);
    const auto& v = response.value[k];
    // The DFT's conjugate convention: H = sum h e^{-jwn}, and
    // group delay = Re( DFT(n h) / DFT(h) ).
    response.group_delay_frames[k] = std::abs(v) > peak * 1e-6
                                         ? (weighted[k] / v).real()
                                         : std::numeric_limits<double>::quiet_NaN();
  }
  return response;
}

FilterSummary summarize_filter(std::span<const float> taps, double sample_rate) {
  FilterSummary summary;
  summary.taps = taps.size();
  summary.all_zero = std::all_of(taps.begin(), taps.end(), [](float t) { return t == 0.0f; });
  double sum = 0.0, weighted = 0.0;
  for (std::size_t i = 0; i < taps.size(); ++i) {
    sum += taps[i];
    weighted += static_cast<double>(i) * taps[i];
  }
  summary.dc_gain_db = to_db(std::abs(sum));
  summary.group_delay_dc_frames =
      sum != 0.0 ? weighted / sum : std::numeric_limits<double>::quiet_NaN();

  const std::size_t last = taps.size() - 1;
  bool symmetric = true, antisymmetric = true;
  for (std::size_t i = 0; i <= last / 2; ++i) {
    symmetric = symmetric && taps[i] == taps[last - i];
    antisymmetric = antisymmetric && taps[i] == -taps[last - i];
  }
  summary.linear_phase = !summary.all_zero && (symmetric || antisymmetric);
  summary.linear_phase_latency_frames = static_cast<double>(last) / 2.0;

  const FrequencyResponse response = frequency_response(taps, sample_rate);
  std::vector<double> db(response.value.size());
  std::size_t peak = 0;
  for (std::size_t k = 0; k < db.size(); ++k) {
    db[k] = to_db(std::abs(response.value[k]));
    if (db[k] > db[peak]) peak = k;
  }
  summary.peak_gain_db = db[peak];
  summary.peak_hz = response.frequency_hz[peak];
  if (summary.all_zero) return summary;
  const double level = summary.peak_gain_db - 3.0;
  for (std::size_t k = 1; k < db.size(); ++k) {
    const bool above_before = db[k - 1] >= level, above_now = db[k] >= level;
    if (above_before == above_now) continue;
    // Linear interpolation in dB between the two grid points.
    const double t = (level - db[k - 1]) / (db[k] - db[k - 1]);
    summary.minus_3db_hz.push_back(response.frequency_hz[k - 1] +
                                   t * (response.frequency_hz[k] - response.frequency_hz[k - 1]));
  }
  return summary;
}

}  // namespace tapstream

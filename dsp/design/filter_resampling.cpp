#include "dsp/design/filter_resampling.hpp"

#include <soxr.h>

#include <cmath>
#include <string>

namespace tapstream {

std::vector<float> resample_filter(std::span<const float> taps, double from_rate, double to_rate) {
  if (!(from_rate > 0.0) || !(to_rate > 0.0)) {
    throw FilterResamplingError("resampling a filter from " + std::to_string(from_rate) + " to " +
                                std::to_string(to_rate) + " Hz: rates must be positive");
  }
  if (taps.empty() || from_rate == to_rate) return {taps.begin(), taps.end()};
  const auto length =
      static_cast<std::size_t>(std::ceil(double(taps.size()) * to_rate / from_rate));
  std::vector<float> out(length, 0.0f);
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_VHQ, 0);
  const soxr_runtime_spec_t runtime = soxr_runtime_spec(1);  // no threads of its own
  std::size_t done = 0;
  // One shot: the whole response in, flushed, the resampler's delay removed.
  const soxr_error_t error = soxr_oneshot(from_rate, to_rate, 1, taps.data(), taps.size(), nullptr,
                                          out.data(), out.size(), &done, &io, &quality, &runtime);
  if (error != nullptr) {
    throw FilterResamplingError(std::string("libsoxr refused to resample the filter: ") + error);
  }
  out.resize(done);
  // Same continuous response, sampled to_rate / from_rate times as often.
  const auto scale = static_cast<float>(from_rate / to_rate);
  for (float& tap : out) tap *= scale;
  return out;
}

}  // namespace tapstream

#include "dsp/files/sample_peak.hpp"

#include <bit>
#include <cstdint>

namespace tapstream {

namespace {

// Clones per instruction set, as dsp/cpu/cpu_simd's kernels (an ifunc picks
// one at load time); none under ThreadSanitizer, whose runtime is not up
// when the resolver runs.
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define TAPSTREAM_PEAK_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TAPSTREAM_PEAK_CLONES
#endif

// Signed: magnitudes fit in 31 bits, and a signed maximum vectorises even
// on the baseline instruction set (SSE2 has no unsigned one).
TAPSTREAM_PEAK_CLONES std::int32_t largest_finite_magnitude(const float* samples, std::size_t n,
                                                            std::int32_t most) noexcept {
  constexpr std::int32_t kMagnitude = 0x7fffffff;
  constexpr std::int32_t kInfinity = 0x7f800000;  // this and above: infinite or NaN
  for (std::size_t i = 0; i < n; ++i) {
    std::int32_t magnitude = std::bit_cast<std::int32_t>(samples[i]) & kMagnitude;
    magnitude = magnitude < kInfinity ? magnitude : 0;
    most = magnitude > most ? magnitude : most;
  }
  return most;
}

}  // namespace

float finite_peak(std::span<const float> samples, float peak) noexcept {
  const std::int32_t start = std::bit_cast<std::int32_t>(peak) & 0x7fffffff;
  return std::bit_cast<float>(largest_finite_magnitude(samples.data(), samples.size(), start));
}

}  // namespace tapstream

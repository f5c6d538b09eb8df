#pragma once
// Non-finite samples (NaN, +-infinity) are replaced by 0 before they reach a
// filter: one of them would otherwise spread over every output its delay
// line touches (a whole FFT block offline; the filter's length live, for
// good, since NaN - NaN is NaN). The test is on the exponent bits and
// branch-free, so that the compiler vectorises it and the audio callback
// can afford it on every period.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

namespace tapstream {

// Copies `in` to `out` (the same size; they may be the same memory) with
// every NaN and infinity replaced by 0; returns how many were.
inline std::size_t copy_zeroing_non_finite(std::span<const float> in,
                                           std::span<float> out) noexcept {
  constexpr std::uint32_t kExponent = 0x7f800000u;  // all ones: NaN or infinity
  std::uint32_t count = 0;
  const std::size_t n = in.size() < out.size() ? in.size() : out.size();
  for (std::size_t i = 0; i < n; ++i) {
    const auto bits = std::bit_cast<std::uint32_t>(in[i]);
    const std::uint32_t non_finite = (bits & kExponent) == kExponent;
    out[i] = std::bit_cast<float>(bits & (non_finite - 1u));
    count += non_finite;
  }
  return count;
}

inline std::size_t zero_non_finite(std::span<float> samples) noexcept {
  return copy_zeroing_non_finite(samples, samples);
}

// How many of `samples` are NaN or infinite, reading only: a file's blocks
// almost never hold one, and a pass that writes every sample back costs a
// file job as much again (docs/performance.md, the 2-core development VM).
inline std::size_t count_non_finite(std::span<const float> samples) noexcept {
  constexpr std::uint32_t kExponent = 0x7f800000u;
  std::uint32_t count = 0;
  for (const float x : samples) count += (std::bit_cast<std::uint32_t>(x) & kExponent) == kExponent;
  return count;
}

// The non-finite samples of a stream of interleaved frames: how many were
// replaced, and where the first was.
struct NonFiniteTally {
  std::uint64_t count = 0;
  std::uint64_t first_frame = 0;  // counting from 0
  std::size_t first_channel = 0;  // counting from 0

  // Zeroes those of `interleaved` (whole frames of `channels`, the first of
  // them frame `first` of the stream) and counts them.
  void scan(std::span<float> interleaved, std::size_t channels, std::uint64_t first) noexcept {
    if (count_non_finite(interleaved) == 0) return;
    if (count == 0) {
      for (std::size_t i = 0; i < interleaved.size(); ++i) {
        const auto bits = std::bit_cast<std::uint32_t>(interleaved[i]);
        if ((bits & 0x7f800000u) == 0x7f800000u) {
          first_frame = first + i / channels;
          first_channel = i % channels;
          break;
        }
      }
    }
    count += zero_non_finite(interleaved);
  }
};

}  // namespace tapstream

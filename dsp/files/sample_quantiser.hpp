#pragma once
// Float samples to integer PCM the way sox does it: scaled by 2^(bits-1)
// (full scale 1.0 is one step above the largest positive code), optionally
// TPDF-dithered, rounded to the nearest code (halves upwards: +0.5 LSB -> 1,
// -1.5 LSB -> -1), and clipped to the code range, every clipped sample
// counted. libsndfile's own float-to-integer path with clipping floors
// (libsndfile issue 362), hence this one. NaN becomes 0 and counts as clipped.

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

namespace tapstream {

enum class Dither {
  none,
  // Triangular PDF: the sum of two independent uniform values of +-0.5 LSB,
  // which makes the quantisation error independent of the signal.
  tpdf,
};
Dither parse_dither(const std::string& name);  // "none" | "tpdf"; throws std::invalid_argument

class SampleQuantiser {
 public:
  // bits: 8 to 32. A fixed seed: the same input gives the same output.
  SampleQuantiser(int bits, Dither dither, std::uint64_t seed = 0x7461707374726d31);

  // Codes left-justified in 32 bits (code << (32 - bits)), as libsndfile's
  // sf_write_int takes them for every PCM width. in.size() == out.size().
  void quantise(std::span<const float> in, std::span<int> out);

  std::uint64_t clipped_samples() const { return clipped_; }

 private:
  double uniform();  // in [-0.5, 0.5)

  int shift_;
  double scale_;
  double lowest_;
  double highest_;
  Dither dither_;
  std::uint64_t state_;
  std::uint64_t clipped_ = 0;
};

}  // namespace tapstream

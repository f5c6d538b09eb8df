#include "dsp/files/sample_quantiser.hpp"

#include <cmath>

namespace tapstream {

Dither parse_dither(const std::string& name) {
  if (name == "none") return Dither::none;
  if (name == "tpdf") return Dither::tpdf;
  throw std::invalid_argument("unknown dither '" + name + "' (expected none or tpdf)");
}

SampleQuantiser::SampleQuantiser(int bits, Dither dither, std::uint64_t seed)
    : shift_(32 - bits),
      scale_(std::ldexp(1.0, bits - 1)),
      lowest_(-std::ldexp(1.0, bits - 1)),
      highest_(std::ldexp(1.0, bits - 1) - 1.0),
      dither_(dither),
      state_(seed) {
  if (bits < 8 || bits > 32) {
    throw std::invalid_argument("integer samples of " + std::to_string(bits) + " bits");
  }
}

double SampleQuantiser::uniform() {
  // splitmix64: fast, and good enough for dither by a wide margin.
  state_ += 0x9e3779b97f4a7c15ULL;
  std::uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return std::ldexp(double(z >> 11), -53) - 0.5;
}

void SampleQuantiser::quantise(std::span<const float> in, std::span<int> out) {
  if (in.size() != out.size()) throw std::invalid_argument("quantise: sizes differ");
  for (std::size_t i = 0; i < in.size(); ++i) {
    const float x = in[i];
    if (std::isnan(x)) {
      out[i] = 0;
      ++clipped_;
      continue;
    }
    double code = double(x) * scale_;
    if (dither_ == Dither::tpdf) code += uniform() + uniform();
    code = std::floor(code + 0.5);
    if (code > highest_) {
      code = highest_;
      ++clipped_;
    } else if (code < lowest_) {
      code = lowest_;
      ++clipped_;
    }
    // Shifting in 64 bits: the left-justified code always fits in 32.
    out[i] = static_cast<int>(static_cast<std::int64_t>(code) * (std::int64_t{1} << shift_));
  }
}

}  // namespace tapstream

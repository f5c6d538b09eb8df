#include "dsp/files/pcm_codec.hpp"

#include <bit>
#include <cstring>

namespace tapstream {

namespace {

static_assert(std::endian::native == std::endian::little,
              "the fast sound-file path assumes a little-endian host");

// libsndfile multiplies by these (sf_read_float with normalisation on).
constexpr float kScale16 = 1.0f / 32768.0f;
constexpr float kScale32 = 1.0f / 2147483648.0f;

inline std::uint32_t load32(const std::uint8_t* p, bool big_endian) {
  std::uint32_t value;
  std::memcpy(&value, p, 4);
  return big_endian ? __builtin_bswap32(value) : value;
}

inline void store32(std::uint8_t* p, std::uint32_t value, bool big_endian) {
  if (big_endian) value = __builtin_bswap32(value);
  std::memcpy(p, &value, 4);
}

}  // namespace

void decode_samples(std::span<const std::uint8_t> in, PcmEncoding encoding, bool big_endian,
                    std::span<float> out) {
  const std::uint8_t* p = in.data();
  const std::size_t count = out.size();
  float* o = out.data();
  switch (encoding) {
    case PcmEncoding::float32:
      if (!big_endian) {
        std::memcpy(o, p, count * 4);
      } else {
        for (std::size_t i = 0; i < count; ++i)
          o[i] = std::bit_cast<float>(load32(p + 4 * i, true));
      }
      break;
    case PcmEncoding::pcm32:
      for (std::size_t i = 0; i < count; ++i) {
        o[i] =
            static_cast<float>(static_cast<std::int32_t>(load32(p + 4 * i, big_endian))) * kScale32;
      }
      break;
    case PcmEncoding::pcm16:
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint8_t* s = p + 2 * i;
        const auto value =
            static_cast<std::int16_t>(big_endian ? (s[0] << 8) | s[1] : (s[1] << 8) | s[0]);
        o[i] = static_cast<float>(value) * kScale16;
      }
      break;
    case PcmEncoding::pcm24:
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint8_t* s = p + 3 * i;
        const std::uint32_t bits = big_endian
                                       ? (std::uint32_t{s[0]} << 24) | (std::uint32_t{s[1]} << 16) |
                                             (std::uint32_t{s[2]} << 8)
                                       : (std::uint32_t{s[2]} << 24) | (std::uint32_t{s[1]} << 16) |
                                             (std::uint32_t{s[0]} << 8);
        o[i] = static_cast<float>(static_cast<std::int32_t>(bits)) * kScale32;
      }
      break;
  }
}

void encode_floats(std::span<const float> in, bool big_endian, std::span<std::uint8_t> out) {
  if (!big_endian) {
    std::memcpy(out.data(), in.data(), in.size() * 4);
    return;
  }
  for (std::size_t i = 0; i < in.size(); ++i) {
    store32(out.data() + 4 * i, std::bit_cast<std::uint32_t>(in[i]), true);
  }
}

void encode_codes(std::span<const int> in, PcmEncoding encoding, bool big_endian,
                  std::span<std::uint8_t> out) {
  std::uint8_t* o = out.data();
  switch (encoding) {
    case PcmEncoding::pcm32:
    case PcmEncoding::float32:  // not used: floats go through encode_floats
      for (std::size_t i = 0; i < in.size(); ++i) {
        store32(o + 4 * i, static_cast<std::uint32_t>(in[i]), big_endian);
      }
      break;
    case PcmEncoding::pcm16:
      for (std::size_t i = 0; i < in.size(); ++i) {
        const auto code = static_cast<std::uint32_t>(in[i]) >> 16;
        o[2 * i + (big_endian ? 0 : 1)] = static_cast<std::uint8_t>(code >> 8);
        o[2 * i + (big_endian ? 1 : 0)] = static_cast<std::uint8_t>(code);
      }
      break;
    case PcmEncoding::pcm24:
      for (std::size_t i = 0; i < in.size(); ++i) {
        const auto code = static_cast<std::uint32_t>(in[i]);
        std::uint8_t* d = o + 3 * i;
        if (big_endian) {
          d[0] = static_cast<std::uint8_t>(code >> 24);
          d[1] = static_cast<std::uint8_t>(code >> 16);
          d[2] = static_cast<std::uint8_t>(code >> 8);
        } else {
          d[0] = static_cast<std::uint8_t>(code >> 8);
          d[1] = static_cast<std::uint8_t>(code >> 16);
          d[2] = static_cast<std::uint8_t>(code >> 24);
        }
      }
      break;
  }
}

}  // namespace tapstream

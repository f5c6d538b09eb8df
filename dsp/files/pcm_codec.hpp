#pragma once
// Samples between their bytes in a file and floats, for the fast path of
// SoundFileReader and SoundFileWriter (dsp/files/pcm_header says where they
// are). Decoding gives exactly what libsndfile's sf_read_float gives for the
// same bytes (normalised: a code over 2^(bits-1), rounded to float for
// pcm32). Encoding takes what SampleQuantiser makes (codes left-justified in
// 32 bits, as sf_write_int takes them) or floats, and writes what libsndfile
// would write for them.

#include <cstddef>
#include <cstdint>
#include <span>

#include "dsp/files/pcm_header.hpp"

namespace tapstream {

// in.size() == out.size() * bytes_per_sample(encoding).
void decode_samples(std::span<const std::uint8_t> in, PcmEncoding encoding, bool big_endian,
                    std::span<float> out);

// Float samples as they are (encoding float32). out.size() == in.size() * 4.
void encode_floats(std::span<const float> in, bool big_endian, std::span<std::uint8_t> out);

// Integer codes left-justified in 32 bits into pcm16/24/32 (the top bits).
// out.size() == in.size() * bytes_per_sample(encoding).
void encode_codes(std::span<const int> in, PcmEncoding encoding, bool big_endian,
                  std::span<std::uint8_t> out);

}  // namespace tapstream

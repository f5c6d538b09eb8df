// Coefficient files of every kind tapstream reads: the first byte picks the
// container by extension (text, raw float32, raw float64, WAV, FLAC), the
// second the audio's channel count; the rest is the file.

#include <cstddef>
#include <cstdint>
#include <string>

#include "dsp/files/coefficient_file.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tapstream;
  if (size < 2) return 0;
  static const char* const names[] = {"taps.txt", "taps.raw", "taps.f64", "ir.wav", "ir.flac"};
  const std::string name = names[data[0] % 5];
  const std::size_t channels = 1 + data[1] % 8;
  const auto file = fuzzing::write_input(name, data + 2, size - 2);
  try {
    const CoefficientFileHeader header = read_coefficient_header(file);
    CoefficientFileOptions options;
    options.channels = channels;
    options.max_taps = 1 << 16;  // the daemon's limit is lower still; keeps runs fast
    options.sample_rate = header.sample_rate > 0 ? 48000 : 0;
    options.ignore_sample_rate = (data[1] & 0x80) != 0;
    const FilterBank bank = load_filter_bank_quietly(file, options);
    // A bank that loaded is valid: every channel has taps, and they are finite.
    for (std::size_t c = 0; c < bank.channels(); ++c) {
      const auto taps = bank.taps(c);
      if (taps.empty()) __builtin_trap();
      for (const float t : taps) {
        if (!(t == t) || t - t != 0.0f) __builtin_trap();
      }
    }
  } catch (const CoefficientFileError&) {
  }
  return 0;
}

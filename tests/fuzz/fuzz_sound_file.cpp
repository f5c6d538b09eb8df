// Opening and reading sound files through libsndfile (what `process` and the
// file endpoints do): the first byte picks the extension, the rest is the file.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dsp/files/sound_file.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tapstream;
  if (size < 1) return 0;
  static const char* const names[] = {"in.wav", "in.flac", "in.aiff", "in.ogg", "in.au", "in.caf"};
  const auto file = tapstream::fuzzing::write_input(names[data[0] % 6], data + 1, size - 1);
  try {
    SoundFileReader reader(file);
    const SoundFileInfo& info = reader.info();
    if (info.channels <= 0 || info.sample_rate <= 0) __builtin_trap();  // must have been refused
    std::vector<float> block(256 * static_cast<std::size_t>(info.channels));
    std::size_t frames = 0;
    // At most a few blocks' worth beyond what the header says (a file cut short reads less).
    while (const std::size_t got = reader.read(block)) {
      frames += got;
      if (frames > (1u << 20)) break;
    }
  } catch (const SoundFileError&) {
  }
  return 0;
}

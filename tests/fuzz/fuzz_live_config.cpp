// The daemon's TOML configuration (`tapstream run --config`), from text.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "daemon/config/config.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tapstream;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const LiveConfig config = parse_live_config(text, fuzzing::scratch().path(), "fuzz.toml");
    if (config.channels == 0 || config.block_frames == 0 || config.sample_rate <= 0) {
      __builtin_trap();  // the reader promises these are checked
    }
  } catch (const ConfigError&) {
  }
  return 0;
}

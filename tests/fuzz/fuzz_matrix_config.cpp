// Routing-matrix files (`process --matrix`, live matrices): the TOML and the
// coefficient files it names. The scratch directory holds one small filter,
// a.txt; any other file named is missing and must be refused cleanly.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "daemon/config/config.hpp"
#include "daemon/config/matrix_config.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tapstream;
  static const bool filters = [] {
    const char taps[] = "1\n0.5\n-0.25\n";
    fuzzing::write_input("a.txt", reinterpret_cast<const std::uint8_t*>(taps), std::strlen(taps));
    return true;
  }();
  (void)filters;
  const auto file = fuzzing::write_input("matrix.toml", data, size);
  try {
    MatrixFileOptions options;
    options.max_taps = 1 << 12;
    const RoutingMatrix matrix = load_matrix_file(file, options);
    (void)matrix;
  } catch (const ConfigError&) {
  }
  return 0;
}

// Job lists (`process --jobs FILE.csv`): the CSV reader and the checks of the
// header and rows. Any input must be read or refused with
// std::invalid_argument; the rows it returns must hold what a row must.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>

#include "daemon/commands/job_list.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tapstream;
  const auto file = fuzzing::write_input("jobs.csv", data, size);
  try {
    std::size_t previous_line = 1;
    for (const JobRow& row : read_job_list(file)) {
      // Rows come in file order, after the header, with every path given.
      if (row.line <= previous_line || row.input.empty() || row.filter.empty() ||
          row.output.empty()) {
        std::abort();
      }
      previous_line = row.line;
    }
  } catch (const std::invalid_argument&) {
  }
  return 0;
}

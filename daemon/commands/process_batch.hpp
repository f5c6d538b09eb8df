#pragma once
// `tapstream process IN... --out-dir DIR`: many files through one engine per
// channel count and sample rate (with --matrix, files whose channel count is
// not the matrix's inputs are reported and skipped). Each input (a file, or every regular file of
// a directory) is written to DIR under its own name (container by extension,
// as for one file); the next file decodes while the current one filters. One
// line per file, one progress bar for the whole batch; a file that cannot be
// read or written is reported by name and skipped, the others go on.

#include <atomic>
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "daemon/commands/offline_filter.hpp"
#include "dsp/files/sound_file.hpp"

namespace tapstream {

struct BatchSettings {
  std::vector<std::filesystem::path> inputs;  // files and directories
  std::filesystem::path out_dir;              // created if missing
  FilterChoice filters;                       // --taps or --matrix, and how to run them
  SampleFormat format = SampleFormat::same_as_input;
  bool tail = false;
  const std::atomic<bool>* cancel = nullptr;
};

// Returns the exit status: 0 when every file was done, 3 when some failed, 1
// when none could be done. Throws when the batch cannot run at all (no output
// directory, an engine error, interrupted).
int run_batch(const BatchSettings& settings);

}  // namespace tapstream

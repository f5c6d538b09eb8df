#pragma once
// `tapstream process IN... --out-dir DIR`: many files through one engine per
// channel count and sample rate (with --matrix, files whose channel count is
// not the matrix's inputs are reported and skipped). Each input (a file, or every regular file of
// a directory) is written to DIR under its own name (container by extension,
// as for one file); the next file decodes while the current one filters. One
// line per file, one progress bar for the whole batch; a file that cannot be
// read or written is reported by name and skipped, the others go on.
//
// `process --jobs FILE.csv` (daemon/commands/job_list.hpp) is the same batch
// with a filter, output and gain per row: rows are grouped by filter, gain,
// channel count and sample rate, so that each filter is loaded and transformed
// once (on the GPU, it stays there for all its rows) and one engine is alive at
// a time; a bad row is reported by its line and skipped. --shard takes a
// stride of the inputs or rows (daemon/commands/shard.hpp); whatever concerns
// two items at once (two writing one output, an output that is another's
// input) is checked over the whole list first, so that every shard decides
// alike.

#include <atomic>
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "daemon/commands/offline_filter.hpp"
#include "daemon/commands/shard.hpp"
#include "dsp/files/sound_file.hpp"

namespace tapstream {

struct BatchSettings {
  std::vector<std::filesystem::path> inputs;  // files and directories
  std::filesystem::path out_dir;              // created if missing
  // --jobs: the job list whose rows are the batch instead of inputs/out_dir;
  // `filters` then says how to run each row's filter (its taps or matrix
  // ignored), and its gain_db is that of rows without one.
  std::filesystem::path job_list;
  bool overwrite = false;  // --jobs: replace outputs that exist (else such rows are refused)
  Shard shard;             // this process's share of the inputs or rows
  // The GPUs to spread the files over (engine_devices' ordinals): one engine
  // per GPU, on a thread of its own, each taking the next file no engine has
  // taken; the lines per file still come in the batch's order. Empty or one:
  // one engine, on the caller's thread (the CPU engine: empty).
  std::vector<int> devices;
  FilterChoice filters;  // --taps or --matrix, and how to run them
  SampleFormat format = SampleFormat::same_as_input;
  std::string dither = "auto";  // --dither, as one file's (dither_for_format)
  bool tail = false;
  const std::atomic<bool>* cancel = nullptr;
};

// Returns the exit status: 0 when every file was done, 3 when some failed, 1
// when none could be done. Throws when the batch cannot run at all (no output
// directory, a bad job list, an engine error, interrupted).
int run_batch(const BatchSettings& settings);

}  // namespace tapstream

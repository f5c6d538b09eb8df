#pragma once
// `tapstream process IN... --out-dir DIR`: many files through one engine per
// channel count and sample rate. Each input (a file, or every regular file of
// a directory) is written to DIR under its own name (container by extension,
// as for one file); the next file decodes while the current one filters. One
// line per file, one progress bar for the whole batch; a file that cannot be
// read or written is reported by name and skipped, the others go on.

#include <atomic>
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "daemon/engine_factory.hpp"
#include "dsp/engine.hpp"
#include "dsp/sound_file.hpp"

namespace tapstream {

struct BatchSettings {
  std::vector<std::filesystem::path> inputs;  // files and directories
  std::filesystem::path out_dir;              // created if missing
  std::filesystem::path taps;
  float gain = 1.0f;  // linear
  Backend backend = Backend::automatic;
  Algorithm algorithm = Algorithm::automatic;
  SampleFormat format = SampleFormat::same_as_input;
  std::size_t block_frames = 0;  // 0: the engine factory's choice
  bool tail = false;
  bool ignore_rate = false;
  std::size_t max_taps = std::size_t(1) << 20;
  const std::atomic<bool>* cancel = nullptr;
};

// Returns the exit status: 0 when every file was done, 3 when some failed, 1
// when none could be done. Throws when the batch cannot run at all (no output
// directory, an engine error, interrupted).
int run_batch(const BatchSettings& settings);

}  // namespace tapstream

#pragma once
// The offline pipeline: Source -> Engine -> Sink for files, unpaced. It reads
// blocks of interleaved frames, filters each through the engine (which carries
// the halo from block to block) and writes the result; with a tail it then
// feeds zeros so that the filters' decay (M - 1 frames) is written too.
// Runs on the caller's thread; `cancel` may be set from a signal handler.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "dsp/engine.hpp"

namespace tapstream {

class SoundFileReader;
class SoundFileWriter;

// Reads up to buffer.size() / channels frames into `buffer` (interleaved) and
// returns how many; 0 means the end of the input.
using ReadFrames = std::function<std::size_t(std::span<float> buffer)>;
// Takes every sample of the given whole frames (interleaved).
using WriteFrames = std::function<void(std::span<const float> frames)>;

struct OfflineOptions {
  std::size_t block_frames = 8192;  // at most the engine's max_block_frames()
  std::size_t tail_frames = 0;      // zeros fed after the input (M - 1 for the full decay)
  // Called after every block with the frames written so far.
  std::function<void(std::uint64_t frames_written)> on_progress;
  // When it becomes true the pipeline stops at the next block and throws.
  const std::atomic<bool>* cancel = nullptr;
};

struct OfflineResult {
  std::uint64_t input_frames = 0;
  std::uint64_t output_frames = 0;  // input_frames + tail_frames
};

// Runs the whole input through `engine`. Throws std::invalid_argument for a
// block size the engine cannot take, std::runtime_error("interrupted") on
// cancel, and whatever read/write/engine throw.
OfflineResult run_offline(Engine& engine, const ReadFrames& read, const WriteFrames& write,
                          const OfflineOptions& options);

// The same from a sound file into a sound file (the writer is not committed).
OfflineResult run_offline(Engine& engine, SoundFileReader& reader, SoundFileWriter& writer,
                          const OfflineOptions& options);

}  // namespace tapstream

#include "daemon/pipeline/offline_pipeline.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsp/sound_file.hpp"

namespace tapstream {

OfflineResult run_offline(Engine& engine, const ReadFrames& read, const WriteFrames& write,
                          const OfflineOptions& options) {
  const std::size_t channels = engine.channels();
  const std::size_t block = options.block_frames;
  if (block == 0 || block > engine.max_block_frames()) {
    throw std::invalid_argument("block of " + std::to_string(block) +
                                " frames: the engine takes 1 to " +
                                std::to_string(engine.max_block_frames()));
  }
  std::vector<float> in(block * channels);
  std::vector<float> out(block * channels);
  OfflineResult result;

  const auto check_cancel = [&] {
    if (options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed)) {
      throw std::runtime_error("interrupted");
    }
  };
  const auto filter_and_write = [&](std::size_t frames) {
    const std::size_t samples = frames * channels;
    engine.process(std::span<const float>(in.data(), samples),
                   std::span<float>(out.data(), samples), frames, Layout::interleaved);
    write(std::span<const float>(out.data(), samples));
    result.output_frames += frames;
    if (options.on_progress) options.on_progress(result.output_frames);
  };

  for (;;) {
    check_cancel();
    const std::size_t frames = read(std::span<float>(in));
    if (frames == 0) break;
    if (frames > block) throw std::logic_error("source returned more frames than asked for");
    result.input_frames += frames;
    filter_and_write(frames);
  }

  std::fill(in.begin(), in.end(), 0.0f);
  for (std::size_t left = options.tail_frames; left > 0;) {
    check_cancel();
    const std::size_t frames = std::min(left, block);
    filter_and_write(frames);
    left -= frames;
  }
  return result;
}

OfflineResult run_offline(Engine& engine, SoundFileReader& reader, SoundFileWriter& writer,
                          const OfflineOptions& options) {
  if (std::size_t(reader.info().channels) != engine.channels()) {
    throw std::invalid_argument("input has " + std::to_string(reader.info().channels) +
                                " channels, the engine " + std::to_string(engine.channels()));
  }
  return run_offline(
      engine, [&reader](std::span<float> buffer) { return reader.read(buffer); },
      [&writer](std::span<const float> frames) { writer.write(frames); }, options);
}

}  // namespace tapstream

#pragma once
// Sound files as the live pipeline's devices: a source that plays a file into
// the pipeline and a sink that records its output, for tests and for streams
// that do not come from a sound card (`tapstream run --input F --output F`).
//
// One driver thread acts as the device callback: every period it pushes a
// period of the source file (silence after its end) and/or pulls a period
// for the sink. Paced, it keeps real time like a sound card (sleeping until
// each period is due, so xruns are counted as with a device); unpaced (both
// ends files only) it runs as fast as the engine goes and waits for the
// rings instead of counting xruns, so not a sample is lost.
//
// Threads: the driver thread is the pipeline's input and output side and the
// only user of the files; start()/stop()/finished() are called by one
// control thread. `finished_` is published with release after the sink has
// written its last frame, and read with acquire.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <thread>

#include "daemon/pipeline/live_pipeline.hpp"
#include "dsp/sound_file.hpp"

namespace tapstream {

struct FileEndpointOptions {
  std::filesystem::path input;   // empty: the input is a device (or nothing)
  std::filesystem::path output;  // empty: the output is a device (or nothing)
  bool paced = true;             // false only when both ends are files
  std::size_t period_frames = 256;
  int output_format = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
};

class FileEndpoints {
 public:
  // Opens the files; throws (naming the file) when the input's rate or
  // channel count differs from the pipeline's, or when unpaced is asked with
  // a device at either end.
  FileEndpoints(LivePipeline& pipeline, const FileEndpointOptions& options);
  ~FileEndpoints();  // stops; an uncommitted sink leaves no file
  FileEndpoints(const FileEndpoints&) = delete;
  FileEndpoints& operator=(const FileEndpoints&) = delete;

  void start();
  // Stops the driver thread and commits the sink: the output file then holds
  // everything played so far (latency_frames() of leading silence, then the
  // filtered input). Safe to call twice.
  void stop();

  // True once the whole source has come out of the pipeline: the output
  // (file or device) has taken source frames + latency frames. Never true
  // without a file source.
  bool finished() const;
  // Frames in the source file (0 without one).
  std::int64_t source_frames() const { return source_frames_; }
  // Frames written to the sink so far.
  std::int64_t sink_frames() const { return sink_frames_.load(std::memory_order_relaxed); }

 private:
  void drive();
  bool push_period(std::span<float> buffer);
  void pull_period(std::span<float> buffer);

  LivePipeline& pipeline_;
  FileEndpointOptions options_;
  std::unique_ptr<SoundFileReader> reader_;
  std::unique_ptr<SoundFileWriter> writer_;
  std::int64_t source_frames_ = 0;
  std::int64_t sink_limit_ = 0;  // sink frames that hold the whole source (when there is one)
  std::atomic<std::int64_t> sink_frames_{0};
  std::atomic<bool> running_{false};
  std::atomic<bool> finished_{false};
  std::thread driver_;
};

}  // namespace tapstream

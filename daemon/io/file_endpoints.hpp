#pragma once
// Sound files as the live pipeline's devices: a source that plays a file into
// the pipeline and a sink that records its output, for tests and for streams
// that do not come from a sound card (`tapstream run --input F --output F`).
//
// One driver thread acts as the device callback: every period it pushes a
// period of the source file (silence after its end) and/or pulls a period
// for the sink. Paced, it keeps real time like a sound card (sleeping until
// each period is due, so xruns are counted as with a device); unpaced (both
// ends files, or a sink after an input device) it runs as fast as the engine
// goes and waits for the rings instead of counting xruns, so not a sample is
// lost: behind a device, the sink keeps the device's clock.
//
// Threads: the driver thread is the pipeline's input and output side and the
// only user of the files; start()/stop()/finish_after()/finished() are
// called by one control thread. `finished_` is published with release after
// the sink has written its last frame (or by finish_after() when the sink is
// already past its limit), and read with acquire; stop() joins the driver
// before the file is committed.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <thread>

#include "daemon/pipeline/live_pipeline.hpp"
#include "dsp/files/sound_file.hpp"

namespace tapstream {

struct FileEndpointOptions {
  std::filesystem::path input;   // empty: the input is a device (or nothing)
  std::filesystem::path output;  // empty: the output is a device (or nothing)
  // false: as fast as the pipeline goes (a file at both ends), or a file
  // output that follows an input device's clock (it takes what the device
  // delivered, so it counts no underrun and writes exactly what came in).
  bool paced = true;
  std::size_t period_frames = 256;
  int output_format = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
  // The output file already holds the start of this stream (written before
  // the daemon restarted itself after a device loss): the new file begins
  // with its frames, then what this run writes. It replaces the old one only
  // when committed, as any output does, so nothing written is lost.
  bool continue_output = false;
};

class FileEndpoints {
 public:
  // Opens the files; throws (naming the file) when the input's rate or
  // channel count differs from the pipeline's, or when an unpaced input file
  // would feed a device.
  FileEndpoints(LivePipeline& pipeline, const FileEndpointOptions& options);
  ~FileEndpoints();  // stops; an uncommitted sink leaves no file
  FileEndpoints(const FileEndpoints&) = delete;
  FileEndpoints& operator=(const FileEndpoints&) = delete;

  void start();
  // Stops the driver thread and commits the sink: the output file then holds
  // everything played so far (latency_frames() of leading silence, then the
  // filtered input). Safe to call twice.
  void stop();

  // The input device has stopped after `input_frames` frames: the sink
  // writes up to latency + input_frames frames (every frame received, after
  // the reported latency), then stops pulling, so that it counts no underrun
  // for input that will never come. finished() says when.
  void finish_after(std::int64_t input_frames);
  // True once the whole source has come out of the pipeline: the output
  // (file or device) has taken source frames + latency frames, or the sink
  // its frames after finish_after(). Never true without a file source or
  // finish_after().
  bool finished() const;
  // Frames in the source file (0 without one).
  std::int64_t source_frames() const { return source_frames_; }
  // Frames written to the sink so far.
  std::int64_t sink_frames() const { return sink_frames_.load(std::memory_order_relaxed); }

 private:
  void drive();
  bool push_period(std::span<float> buffer);
  void pull_period(std::span<float> buffer);
  void continue_earlier_output();  // copies the earlier output's frames into the writer

  LivePipeline& pipeline_;
  FileEndpointOptions options_;
  std::chrono::nanoseconds period_;  // of period_frames at the sample rate
  std::unique_ptr<SoundFileReader> reader_;
  std::unique_ptr<SoundFileWriter> writer_;
  std::int64_t source_frames_ = 0;
  // Sink frames that hold the whole source (when there is one, or after
  // finish_after()); -1: none. Written by the control thread, read by the
  // driver (relaxed: a bound, nothing else is published through it).
  std::atomic<std::int64_t> sink_limit_{-1};
  std::int64_t continued_frames_ = 0;  // frames of the earlier output this one starts with
  std::atomic<std::int64_t> sink_frames_{0};
  std::atomic<bool> running_{false};
  std::atomic<bool> finished_{false};
  std::thread driver_;
};

}  // namespace tapstream

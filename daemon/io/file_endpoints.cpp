#include "daemon/io/file_endpoints.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

namespace tapstream {

FileEndpoints::FileEndpoints(LivePipeline& pipeline, const FileEndpointOptions& options)
    : pipeline_(pipeline), options_(options) {
  if (options.period_frames == 0) throw std::invalid_argument("file endpoints: period of 0 frames");
  if (!options.paced && (options.input.empty() || options.output.empty())) {
    throw std::invalid_argument(
        "unpaced file streaming needs a file at both ends (a device keeps its own time)");
  }
  if (!options.input.empty()) {
    if (!options.output.empty() && std::filesystem::weakly_canonical(options.input) ==
                                       std::filesystem::weakly_canonical(options.output)) {
      throw std::invalid_argument(
          fmt::format("--input and --output are the same file '{}'", options.input.string()));
    }
    reader_ = std::make_unique<SoundFileReader>(options.input);
    const auto& info = reader_->info();
    if (info.sample_rate != pipeline.sample_rate()) {
      throw SoundFileError(fmt::format("{}: sample rate {} Hz, the stream runs at {} Hz",
                                       options.input.string(), info.sample_rate,
                                       pipeline.sample_rate()));
    }
    if (static_cast<std::size_t>(info.channels) != pipeline.channels()) {
      throw SoundFileError(fmt::format("{}: {} channels, the stream has {}", options.input.string(),
                                       info.channels, pipeline.channels()));
    }
    source_frames_ = info.frames;
  }
  sink_limit_ = reader_ ? source_frames_ + static_cast<std::int64_t>(pipeline.latency_frames()) : 0;
  if (!options.output.empty()) {
    writer_ = std::make_unique<SoundFileWriter>(options.output, pipeline.sample_rate(),
                                                static_cast<int>(pipeline.channels()),
                                                options.output_format);
  }
}

FileEndpoints::~FileEndpoints() {
  running_.store(false);
  if (driver_.joinable()) driver_.join();
}

void FileEndpoints::start() {
  if (running_.exchange(true)) return;
  driver_ = std::thread([this] {
    try {
      drive();
    } catch (const std::exception& e) {
      spdlog::error("file stream stopped: {}", e.what());
    }
  });
}

void FileEndpoints::stop() {
  running_.store(false);
  if (driver_.joinable()) driver_.join();
  if (writer_) {
    writer_->commit();
    spdlog::info("wrote {} frames to {}", sink_frames(), options_.output.string());
    writer_.reset();
  }
}

bool FileEndpoints::finished() const {
  if (!reader_) return false;
  if (!options_.output.empty()) return finished_.load(std::memory_order_acquire);
  return pipeline_.stats().frames_out >= static_cast<std::uint64_t>(sink_limit_);
}

bool FileEndpoints::push_period(std::span<float> buffer) {
  const std::size_t channels = pipeline_.channels();
  const std::size_t frames = buffer.size() / channels;
  const std::size_t got = reader_->read(buffer);  // 0 after the end
  std::fill(buffer.begin() + got * channels, buffer.end(), 0.0f);
  if (options_.paced) {
    pipeline_.push_input(buffer.data(), frames);
    return true;
  }
  std::size_t done = 0;
  while (done < frames) {
    done += pipeline_.offer_input(buffer.data() + done * channels, frames - done);
    if (done < frames) {
      if (!running_.load(std::memory_order_relaxed)) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return true;
}

void FileEndpoints::pull_period(std::span<float> buffer) {
  const std::size_t channels = pipeline_.channels();
  const std::size_t frames = buffer.size() / channels;
  if (options_.paced) {
    pipeline_.pull_output(buffer.data(), frames);
  } else {
    std::size_t done = 0;
    while (done < frames) {
      done += pipeline_.take_output(buffer.data() + done * channels, frames - done);
      if (done < frames) {
        if (!running_.load(std::memory_order_relaxed)) return;
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }
  if (finished_.load(std::memory_order_relaxed)) return;
  std::int64_t keep = static_cast<std::int64_t>(frames);
  if (reader_) keep = std::min(keep, sink_limit_ - sink_frames_.load(std::memory_order_relaxed));
  writer_->write(buffer.first(static_cast<std::size_t>(keep) * channels));
  const std::int64_t written = sink_frames_.load(std::memory_order_relaxed) + keep;
  sink_frames_.store(written, std::memory_order_relaxed);
  if (reader_ && written >= sink_limit_) finished_.store(true, std::memory_order_release);
}

void FileEndpoints::drive() {
  const std::size_t samples = options_.period_frames * pipeline_.channels();
  std::vector<float> input(samples);
  std::vector<float> output(samples);
  const auto period = std::chrono::nanoseconds(
      static_cast<std::int64_t>(1e9 * double(options_.period_frames) / pipeline_.sample_rate()));
  auto due = std::chrono::steady_clock::now();
  while (running_.load(std::memory_order_relaxed)) {
    if (reader_ && !push_period(input)) break;
    if (writer_) {
      pull_period(output);
      // Unpaced, the work is done once the sink holds the whole source.
      if (!options_.paced && finished_.load(std::memory_order_relaxed)) break;
    }
    if (options_.paced) {
      due += period;
      const auto now = std::chrono::steady_clock::now();
      // Like a sound card, a late period is not made up for ever: after a
      // stall of over a second, time starts again from now.
      if (now - due > std::chrono::seconds(1)) due = now;
      std::this_thread::sleep_until(due);
    }
  }
}

}  // namespace tapstream

#include "daemon/io/file_endpoints.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

#include "dsp/realtime/thread_role.hpp"

namespace tapstream {

FileEndpoints::FileEndpoints(LivePipeline& pipeline, const FileEndpointOptions& options)
    : pipeline_(pipeline),
      options_(options),
      period_(
          static_cast<std::int64_t>(1e9 * double(options.period_frames) / pipeline.sample_rate())) {
  if (options.period_frames == 0) throw std::invalid_argument("file endpoints: period of 0 frames");
  if (!options.paced && options.output.empty()) {
    throw std::invalid_argument(
        "an unpaced file input needs a file output (a device output keeps its own time)");
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
    if (static_cast<std::size_t>(info.channels) != pipeline.input_channels()) {
      throw SoundFileError(fmt::format(
          "{}: {} channels, the stream has {}{}", options.input.string(), info.channels,
          pipeline.input_channels(),
          pipeline.input_channels() != pipeline.output_channels() ? " inputs (the matrix's)" : ""));
    }
    source_frames_ = info.frames;
  }
  if (reader_) {
    sink_limit_.store(source_frames_ + static_cast<std::int64_t>(pipeline.latency_frames()));
  }
  if (!options.output.empty()) {
    writer_ = std::make_unique<SoundFileWriter>(options.output, pipeline.sample_rate(),
                                                static_cast<int>(pipeline.output_channels()),
                                                options.output_format);
    if (options.continue_output) continue_earlier_output();
  }
}

void FileEndpoints::continue_earlier_output() {
  std::error_code error;
  if (!std::filesystem::is_regular_file(options_.output, error)) {
    spdlog::warn("{}: the output written before the restart is not there; starting it anew",
                 options_.output.string());
    return;
  }
  SoundFileReader earlier(options_.output);
  const auto& info = earlier.info();
  if (info.sample_rate != pipeline_.sample_rate() ||
      static_cast<std::size_t>(info.channels) != pipeline_.output_channels()) {
    throw SoundFileError(fmt::format(
        "{}: cannot continue it after the restart: it has {} channels at {} Hz, the stream {} at "
        "{} Hz",
        options_.output.string(), info.channels, info.sample_rate, pipeline_.output_channels(),
        pipeline_.sample_rate()));
  }
  std::vector<float> chunk(65536 * pipeline_.output_channels());
  while (const std::size_t frames = earlier.read(chunk)) {
    writer_->write(std::span<const float>(chunk).first(frames * pipeline_.output_channels()));
    continued_frames_ += static_cast<std::int64_t>(frames);
  }
  spdlog::info("{}: continuing the output after the restart: its {} frames from before stay",
               options_.output.string(), continued_frames_);
}

FileEndpoints::~FileEndpoints() {
  running_.store(false);
  if (driver_.joinable()) driver_.join();
}

void FileEndpoints::start() {
  if (running_.exchange(true)) return;
  driver_ = std::thread([this] {
    name_this_thread("ts-file-io");
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
    if (continued_frames_ > 0) {
      spdlog::info("wrote {} frames to {} ({} from before the restart, {} now)",
                   continued_frames_ + sink_frames(), options_.output.string(), continued_frames_,
                   sink_frames());
    } else {
      spdlog::info("wrote {} frames to {}", sink_frames(), options_.output.string());
    }
    writer_.reset();
  }
}

void FileEndpoints::finish_after(std::int64_t input_frames) {
  const std::int64_t limit = input_frames + static_cast<std::int64_t>(pipeline_.latency_frames());
  sink_limit_.store(limit, std::memory_order_relaxed);
  // A sink already past the limit (it played on while the device was gone) stops here.
  if (sink_frames() >= limit) finished_.store(true, std::memory_order_release);
}

bool FileEndpoints::finished() const {
  const std::int64_t limit = sink_limit_.load(std::memory_order_relaxed);
  if (limit < 0) return false;
  if (!options_.output.empty()) return finished_.load(std::memory_order_acquire);
  return pipeline_.stats().frames_out >= static_cast<std::uint64_t>(limit);
}

bool FileEndpoints::push_period(std::span<float> buffer) {
  const std::size_t channels = pipeline_.input_channels();
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
  const std::size_t channels = pipeline_.output_channels();
  const std::int64_t done_frames = sink_frames_.load(std::memory_order_relaxed);
  // Up to the limit only: what lies beyond it is not pulled, so a sink whose
  // input has ended counts no underrun for it (and does not wait for it).
  const auto wanted = [&] {
    const std::int64_t limit = sink_limit_.load(std::memory_order_relaxed);
    const auto period = static_cast<std::int64_t>(buffer.size() / channels);
    return static_cast<std::size_t>(
        limit < 0 ? period : std::clamp<std::int64_t>(limit - done_frames, 0, period));
  };
  if (finished_.load(std::memory_order_relaxed)) return;
  std::size_t frames = wanted();
  if (options_.paced) {
    pipeline_.pull_output(buffer.data(), frames);
  } else {
    // Unpaced, the sink follows its input's clock: it takes what has come
    // out, waiting for the rest (briefly between files, a quarter period
    // behind a device).
    const auto wait = reader_ ? std::chrono::microseconds(50) : period_ / 4;
    std::size_t done = 0;
    while (done < frames) {
      done += pipeline_.take_output(buffer.data() + done * channels, frames - done);
      if (done < frames) {
        if (!running_.load(std::memory_order_relaxed)) break;
        std::this_thread::sleep_for(wait);
        frames = std::max(done, wanted());  // finish_after() may have ended the input meanwhile
      }
    }
    frames = done;
  }
  writer_->write(buffer.first(frames * channels));
  const std::int64_t written = done_frames + static_cast<std::int64_t>(frames);
  sink_frames_.store(written, std::memory_order_relaxed);
  const std::int64_t limit = sink_limit_.load(std::memory_order_relaxed);
  if (limit >= 0 && written >= limit) finished_.store(true, std::memory_order_release);
}

void FileEndpoints::drive() {
  std::vector<float> input(options_.period_frames * pipeline_.input_channels());
  std::vector<float> output(options_.period_frames * pipeline_.output_channels());
  const auto period = period_;
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

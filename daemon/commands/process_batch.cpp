#include "daemon/commands/process_batch.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>

#include "daemon/commands/progress.hpp"
#include "daemon/pipeline/offline_pipeline.hpp"
#include "dsp/realtime/non_finite.hpp"

namespace tapstream {

namespace {

namespace fs = std::filesystem;

struct BatchFile {
  fs::path input;
  fs::path output;
  SoundFileInfo info;
};

// Every regular, non-hidden file of a directory (sorted), or the path itself.
std::vector<fs::path> expand(const std::vector<fs::path>& inputs) {
  std::vector<fs::path> files;
  for (const fs::path& input : inputs) {
    std::error_code error;
    if (!fs::is_directory(input, error)) {
      files.push_back(input);
      continue;
    }
    std::vector<fs::path> entries;
    for (const auto& entry : fs::directory_iterator(input)) {
      const std::string name = entry.path().filename().string();
      if (!name.empty() && name[0] != '.' && entry.is_regular_file(error)) {
        entries.push_back(entry.path());
      }
    }
    std::sort(entries.begin(), entries.end());
    files.insert(files.end(), entries.begin(), entries.end());
  }
  return files;
}

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code error;
  return fs::exists(b, error) && fs::equivalent(a, b, error) && !error;
}

// "path: problem", unless the message already starts with the path.
std::string about(const fs::path& file, const std::string& message) {
  const std::string name = file.string();
  return message.rfind(name, 0) == 0 ? message : name + ": " + message;
}

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

class Batch {
 public:
  explicit Batch(const BatchSettings& settings) : settings_(settings) {}

  int run() {
    std::error_code error;
    fs::create_directories(settings_.out_dir, error);
    if (error || !fs::is_directory(settings_.out_dir)) {
      throw std::runtime_error("--out-dir " + settings_.out_dir.string() +
                               ": cannot create the directory" +
                               (error ? ": " + error.message() : std::string()));
    }
    const std::vector<BatchFile> files = probe(expand(settings_.inputs));
    // One engine per channel count and sample rate, in the order first seen.
    std::vector<std::pair<std::pair<int, int>, std::vector<BatchFile>>> groups;
    for (const BatchFile& file : files) {
      const std::pair<int, int> key{file.info.channels, file.info.sample_rate};
      auto group =
          std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
      if (group == groups.end()) group = groups.insert(groups.end(), {key, {}});
      group->second.push_back(file);
      total_frames_ += std::uint64_t(std::max<std::int64_t>(file.info.frames, 0));
    }
    progress_ = std::make_unique<ProgressBar>(total_frames_, ProgressBar::stderr_is_terminal());
    for (const auto& group : groups) run_group(group.second);
    // The last outputs' flush to disk and rename, which overlapped the work
    // on the files after them (SoundFileWriter::commit).
    for (const BackgroundCommits::Failure& failure : commits_.wait()) {
      --done_;
      const auto input = input_of_.find(failure.destination);
      fail(input != input_of_.end() ? input->second : failure.destination,
           failure.destination.string() + ": " + failure.problem);
    }
    progress_->finish();

    const std::size_t count = done_ + failed_;
    if (failed_ > 0) {
      spdlog::warn("{} of {} files failed", failed_, count);
    } else {
      spdlog::info("{} files done", done_);
    }
    if (failed_ == 0) return damaged_ > 0 ? 3 : 0;
    return done_ > 0 ? 3 : 1;
  }

 private:
  void fail(const fs::path& file, const std::string& message) {
    progress_->finish();
    spdlog::error("{}", about(file, message));
    ++failed_;
  }

  // Headers of every input and where each goes; failures reported now.
  std::vector<BatchFile> probe(const std::vector<fs::path>& inputs) {
    progress_ = std::make_unique<ProgressBar>(0, false);
    std::vector<BatchFile> files;
    std::map<fs::path, fs::path> claimed;  // output -> the input that writes it
    for (const fs::path& input : inputs) {
      const fs::path output = settings_.out_dir / input.filename();
      try {
        if (same_file(input, output)) {
          throw std::invalid_argument("its output " + output.string() +
                                      " is the input itself: refusing to overwrite it");
        }
        if (same_file(settings_.filters.taps, output)) {
          throw std::invalid_argument("its output " + output.string() + " is the taps file");
        }
        if (same_file(settings_.filters.matrix, output)) {
          throw std::invalid_argument("its output " + output.string() + " is the matrix file");
        }
        if (const auto other = claimed.find(output); other != claimed.end()) {
          throw std::invalid_argument("its output " + output.string() + " is also the output of " +
                                      other->second.string());
        }
        const SoundFileReader reader(input);
        claimed[output] = input;
        input_of_[output] = input;
        files.push_back({input, output, reader.info()});
      } catch (const std::exception& e) {
        fail(input, e.what());
      }
    }
    return files;
  }

  void run_group(const std::vector<BatchFile>& files) {
    const SoundFileInfo& first = files.front().info;
    std::optional<OfflineFilter> filter;
    try {
      filter.emplace(settings_.filters, std::size_t(first.channels), first.sample_rate);
    } catch (const std::exception& e) {
      // The filters do not fit these files (channels, rate): each is reported.
      for (const BatchFile& file : files) fail(file.input, e.what());
      return;
    }
    spdlog::debug("{} files of {} channels at {} Hz through {}", files.size(), first.channels,
                  first.sample_rate, filter->description());

    const std::size_t tail = settings_.tail ? filter->max_taps() - 1 : 0;
    const int output_channels = int(filter->output_channels());
    // Each file's NaN and infinite samples, zeroed on the reader's thread and
    // reported when its job is done.
    std::vector<std::shared_ptr<NonFiniteTally>> non_finite(files.size());
    for (auto& tally : non_finite) tally = std::make_shared<NonFiniteTally>();
    std::vector<OfflineJob> jobs;
    for (std::size_t i = 0; i < files.size(); ++i) {
      const BatchFile& file = files[i];
      jobs.push_back({
          [&file, tail, this, tally = non_finite[i]] {
            auto reader =
                std::make_shared<SoundFileReader>(file.input, std::nullopt, settings_.cancel);
            const SoundFileInfo& info = reader->info();
            if (info.channels != file.info.channels || info.sample_rate != file.info.sample_rate) {
              throw SoundFileError(file.input.string() + ": changed while the batch ran");
            }
            const auto channels = std::size_t(info.channels);
            return OfflineSource{
                [reader, tally, channels, frames = std::uint64_t(0)](std::span<float> b) mutable {
                  const std::size_t got = reader->read(b);
                  tally->scan(b.first(got * channels), channels, frames);
                  frames += got;
                  return got;
                },
                tail};
          },
          [&file, this, output_channels] {
            auto writer = std::make_shared<SoundFileWriter>(
                file.output, file.info.sample_rate, output_channels,
                choose_output_format(file.info.format, settings_.format, "", file.output, false)
                    .format);
            return OfflineSink{[writer](std::span<const float> f) { writer->write(f); },
                               [this, writer] { commit(*writer); }};
          },
      });
    }

    const std::uint64_t before = frames_done_;
    const auto started = std::chrono::steady_clock::now();
    OfflineOptions options = filter->options();
    options.cancel = settings_.cancel;
    options.on_progress = [this, before](std::uint64_t written) {
      frames_done_ = before + written;
      progress_->update(frames_done_);
    };
    auto job_started = started;
    options.on_job_done = [&](std::size_t i, const OfflineJobResult& result) {
      const BatchFile& file = files[i];
      if (result.error) {
        fail(file.input, message_of(result.error));
        return;
      }
      const auto now = std::chrono::steady_clock::now();
      const double seconds = std::chrono::duration<double>(now - job_started).count();
      job_started = now;
      progress_->finish();
      spdlog::info("{} -> {}: {:.2f} s of audio in {:.3f} s", file.input.string(),
                   file.output.string(),
                   double(result.output_frames) / double(file.info.sample_rate), seconds);
      if (const NonFiniteTally& tally = *non_finite[i]; tally.count > 0) {
        spdlog::warn(
            "{}: {} NaN or infinite sample{} replaced by 0, the first at frame {} "
            "(counting from 0) of channel {}",
            file.input.string(), tally.count, tally.count == 1 ? "" : "s", tally.first_frame,
            tally.first_channel + 1);
        ++damaged_;
      }
      ++done_;
    };
    filter->run(jobs, options);
  }

  void commit(SoundFileWriter& writer) {
    writer.commit(&commits_);
    const ClipStats& clip = writer.clip_stats();
    if (clip.clipped_samples > 0) {
      progress_->finish();
      spdlog::warn(
          "{}: clipped {} samples, peak {:.2f} dBFS (lower --gain or write --format float)",
          writer.destination().string(), clip.clipped_samples,
          20.0 * std::log10(double(clip.peak)));
    }
  }

  const BatchSettings& settings_;
  std::unique_ptr<ProgressBar> progress_;
  std::uint64_t total_frames_ = 0;
  std::uint64_t frames_done_ = 0;
  std::size_t done_ = 0;
  std::size_t failed_ = 0;
  std::size_t damaged_ = 0;  // done, from input with NaN or infinite samples
  std::map<fs::path, fs::path> input_of_;  // output -> its input
  // Last, so that it is destroyed first: it commits what it still holds.
  BackgroundCommits commits_;
};

}  // namespace

int run_batch(const BatchSettings& settings) {
  return Batch(settings).run();
}

}  // namespace tapstream

#include "daemon/commands/process_batch.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>

#include "daemon/commands/job_list.hpp"
#include "daemon/commands/progress.hpp"
#include "daemon/pipeline/offline_pipeline.hpp"
#include "dsp/files/rate_file_name.hpp"
#include "dsp/realtime/non_finite.hpp"

namespace tapstream {

namespace {

namespace fs = std::filesystem;

// One input of the batch, planned: where it goes and through which filter.
// `label` names it in messages: the input's path, or the job list's line.
struct PlannedFile {
  std::string label;
  fs::path input;
  fs::path output;
  std::size_t filter = 0;  // index into Batch::filters_
  std::string problem;     // non-empty: refused before any work, for this reason
};

struct BatchFile {
  std::string label;
  fs::path input;
  fs::path output;
  std::size_t filter = 0;
  SoundFileInfo info;
  SoundFileMetadata metadata;  // carried into the output, as one file's is
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

// One spelling per file for comparing paths: symbolic links, "." and ".."
// resolved as far as the path exists.
fs::path canonical_name(const fs::path& path) {
  std::error_code error;
  fs::path name = fs::weakly_canonical(path, error);
  if (error) name = fs::absolute(path, error).lexically_normal();
  return name;
}

// "label: problem", unless the message already starts with the label.
std::string about(const std::string& label, const std::string& message) {
  return message.rfind(label, 0) == 0 ? message : label + ": " + message;
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
    std::vector<PlannedFile> planned;
    if (settings_.job_list.empty()) {
      std::error_code error;
      fs::create_directories(settings_.out_dir, error);
      if (error || !fs::is_directory(settings_.out_dir)) {
        throw std::runtime_error("--out-dir " + settings_.out_dir.string() +
                                 ": cannot create the directory" +
                                 (error ? ": " + error.message() : std::string()));
      }
      planned = plan_inputs();
    } else {
      planned = plan_job_list();
    }
    check_outputs(planned);
    // This process's share, after every check that concerns two items.
    const Shard& shard = settings_.shard;
    std::vector<PlannedFile> mine;
    for (std::size_t i = 0; i < planned.size(); ++i) {
      if (shard.takes(i)) mine.push_back(std::move(planned[i]));
    }
    if (shard.count > 1) {
      spdlog::info("{}: {} of {} {}s", shard.describe(), mine.size(), planned.size(), noun());
    }
    const std::vector<BatchFile> files = probe(mine);
    // One engine per filter, channel count and sample rate, in the order first seen.
    using GroupKey = std::tuple<std::size_t, int, int>;
    std::vector<std::pair<GroupKey, std::vector<BatchFile>>> groups;
    for (const BatchFile& file : files) {
      const GroupKey key{file.filter, file.info.channels, file.info.sample_rate};
      auto group =
          std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
      if (group == groups.end()) group = groups.insert(groups.end(), {key, {}});
      group->second.push_back(file);
      total_frames_ += std::uint64_t(std::max<std::int64_t>(file.info.frames, 0));
    }
    // The files in the order they are handed out (group after group), each
    // with its report and its claim.
    for (auto& group : groups) {
      groups_.push_back({reports_.size(), std::move(group.second)});
      for (const BatchFile& file : groups_.back().files) reports_.emplace_back(file.label);
    }
    progress_ = std::make_unique<ProgressBar>(total_frames_, ProgressBar::stderr_is_terminal());
    run_lanes();
    // The last outputs' flush to disk and rename, which overlapped the work
    // on the files after them (SoundFileWriter::commit).
    for (const BackgroundCommits::Failure& failure : commits_.wait()) {
      --done_;
      const auto label = label_of_.find(failure.destination);
      fail(label != label_of_.end() ? label->second : failure.destination.string(),
           failure.destination.string() + ": " + failure.problem);
    }
    progress_->finish();

    const std::size_t count = done_ + failed_;
    if (failed_ > 0) {
      spdlog::warn("{} of {} {}s failed", failed_, count, noun());
    } else {
      spdlog::info("{} {}s done", done_, noun());
    }
    if (failed_ == 0) return damaged_ > 0 ? 3 : 0;
    return done_ > 0 ? 3 : 1;
  }

 private:
  const char* noun() const { return settings_.job_list.empty() ? "file" : "row"; }

  void fail(const std::string& label, const std::string& message) {
    progress_->finish();
    spdlog::error("{}", about(label, message));
    ++failed_;
  }

  // The inputs (directories expanded), each to --out-dir under its own name.
  std::vector<PlannedFile> plan_inputs() {
    filters_.push_back(settings_.filters);
    std::vector<PlannedFile> planned;
    for (const fs::path& input : expand(settings_.inputs)) {
      planned.push_back({input.string(), input, settings_.out_dir / input.filename(), 0, {}});
    }
    return planned;
  }

  // The job list's rows; rows naming one filter file (however spelled) with
  // one gain share its FilterChoice, and so its engines.
  std::vector<PlannedFile> plan_job_list() {
    const std::vector<JobRow> rows = read_job_list(settings_.job_list);
    std::map<std::pair<fs::path, double>, std::size_t> known;
    std::vector<PlannedFile> planned;
    planned.reserve(rows.size());
    for (const JobRow& row : rows) {
      const double gain_db = row.gain_db.value_or(settings_.filters.gain_db);
      const auto key = std::make_pair(canonical_name(row.filter), gain_db);
      auto found = known.find(key);
      if (found == known.end()) {
        FilterChoice choice = settings_.filters;
        choice.taps.clear();
        choice.matrix.clear();
        (is_matrix_file(row.filter) ? choice.matrix : choice.taps) = row.filter;
        choice.gain_db = gain_db;
        found = known.emplace(key, filters_.size()).first;
        filters_.push_back(std::move(choice));
      }
      planned.push_back({settings_.job_list.string() + ":" + std::to_string(row.line),
                         row.input,
                         row.output,
                         found->second,
                         {}});
    }
    return planned;
  }

  // What concerns two items at once, over the whole list: an output that
  // another item (or this one) reads, or that an earlier item writes.
  void check_outputs(std::vector<PlannedFile>& planned) const {
    std::map<fs::path, std::string> read;  // what some item reads -> what it is to it
    for (const PlannedFile& file : planned) {
      read.emplace(canonical_name(file.input), "the input of " + file.label);
    }
    for (std::size_t f = 0; f < filters_.size(); ++f) {
      const FilterChoice& choice = filters_[f];
      const fs::path& filter = choice.matrix.empty() ? choice.taps : choice.matrix;
      const std::string what = choice.matrix.empty() ? "a taps file" : "a matrix file";
      read.emplace(canonical_name(filter), what);
      // A name with "$samplerate$": the file of every rate there is.
      for (const int rate : names_sample_rate(filter) ? rates_on_disk(filter) : std::vector<int>{})
        read.emplace(canonical_name(file_for_rate(filter, rate)), what);
    }
    std::map<fs::path, std::string> claimed;  // output -> the item that writes it
    for (PlannedFile& file : planned) {
      const fs::path output = canonical_name(file.output);
      const std::string quoted = "its output " + file.output.string();
      if (same_file(file.input, file.output) || output == canonical_name(file.input)) {
        file.problem = quoted + " is the input itself: refusing to overwrite it";
      } else if (const auto reader = read.find(output); reader != read.end()) {
        file.problem = quoted + " is " + reader->second + ": refusing to overwrite it";
      } else if (const auto other = claimed.find(output); other != claimed.end()) {
        file.problem = quoted + " is also the output of " + other->second;
      } else {
        claimed.emplace(output, file.label);
      }
    }
  }

  // Headers of every input of this shard; failures reported now.
  std::vector<BatchFile> probe(const std::vector<PlannedFile>& planned) {
    progress_ = std::make_unique<ProgressBar>(0, false);
    std::vector<BatchFile> files;
    for (const PlannedFile& file : planned) {
      try {
        if (!file.problem.empty()) throw std::invalid_argument(file.problem);
        std::error_code error;
        const fs::file_type output_type = fs::symlink_status(file.output, error).type();
        // (A path that cannot be looked at is left to the writer, which names why.)
        if (!settings_.job_list.empty() && !settings_.overwrite && !error &&
            output_type != fs::file_type::not_found) {
          throw std::invalid_argument("its output " + file.output.string() +
                                      " exists (--overwrite replaces it)");
        }
        const SoundFileReader reader(file.input);
        // A name whose type is unknown is refused now, not after the filtering.
        choose_output_format(reader.info().format, settings_.format, "", file.output, false);
        label_of_[file.output] = file.label;
        files.push_back(
            {file.label, file.input, file.output, file.filter, reader.info(), reader.metadata()});
      } catch (const std::exception& e) {
        fail(file.label, e.what());
      }
    }
    return files;
  }

  // The files of one filter, channel count and rate: `first` is the index
  // of files[0] among all the batch's files (its report and claim).
  struct Group {
    std::size_t first = 0;
    std::vector<BatchFile> files;
  };

  // What one file says (its lines, printed in the batch's order) and which
  // lane took it (-1: none yet).
  struct Report {
    explicit Report(std::string l) : label(std::move(l)) {}
    std::string label;
    std::vector<std::pair<spdlog::level::level_enum, std::string>>
        lines;              // guarded by report_mutex_
    bool finished = false;  // guarded by report_mutex_
    std::atomic<int> lane{-1};
  };

  // The files over the lanes: one engine per GPU of settings_.devices (one
  // lane on the caller's thread when there is one GPU or none), each lane
  // taking the next file no lane has taken (OfflineOptions::claim), group
  // after group. An error that ends a lane (an engine's, or the interrupt)
  // stops the others and is thrown once every lane has stopped.
  void run_lanes() {
    const std::size_t lanes = std::max<std::size_t>(settings_.devices.size(), 1);
    if (lanes == 1) {
      run_lane(0, settings_.cancel);
      return;
    }
    std::exception_ptr error;
    std::size_t running = lanes;
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<std::thread> threads;
    for (std::size_t lane = 0; lane < lanes; ++lane) {
      threads.emplace_back([&, lane] {
        try {
          run_lane(lane, &stop_lanes_);
        } catch (...) {
          const std::lock_guard lock(mutex);
          if (!error) error = std::current_exception();
          stop_lanes_ = true;
        }
        const std::lock_guard lock(mutex);
        --running;
        changed.notify_all();
      });
    }
    {
      // The interrupt (set by a signal handler, which cannot notify) is
      // passed on to the lanes within 50 ms.
      std::unique_lock lock(mutex);
      while (running > 0) {
        if (settings_.cancel != nullptr && settings_.cancel->load()) stop_lanes_ = true;
        changed.wait_for(lock, std::chrono::milliseconds(50));
      }
    }
    for (std::thread& thread : threads) thread.join();
    // After an error, the files done behind one that a stopped lane left
    // unfinished are still reported.
    progress_->finish();
    for (Report& report : reports_) {
      for (const auto& [level, text] : report.lines) spdlog::log(level, "{}", text);
      report.lines.clear();
    }
    if (settings_.cancel != nullptr && settings_.cancel->load()) {
      throw std::runtime_error("interrupted");
    }
    if (error) std::rethrow_exception(error);
  }

  // True when file `index` is (now) lane `lane`'s.
  bool claim(std::size_t index, int lane) {
    int unclaimed = -1;
    return reports_[index].lane.compare_exchange_strong(unclaimed, lane) || unclaimed == lane;
  }

  void run_lane(std::size_t lane, const std::atomic<bool>* cancel) {
    for (const Group& group : groups_) {
      if (cancel != nullptr && cancel->load()) return;
      // A lane builds a group's engine only for a file it has claimed.
      std::size_t first = 0;
      while (first < group.files.size() && !claim(group.first + first, int(lane))) ++first;
      if (first == group.files.size()) continue;
      run_group(group, first, lane, cancel);
    }
  }

  void run_group(const Group& group, std::size_t claimed, std::size_t lane,
                 const std::atomic<bool>* cancel) {
    const std::vector<BatchFile>& files = group.files;
    const SoundFileInfo& first = files.front().info;
    FilterChoice choice = filters_[files.front().filter];
    if (!settings_.devices.empty()) choice.engine.device = settings_.devices[lane];
    std::optional<OfflineFilter> filter;
    try {
      filter.emplace(choice, std::size_t(first.channels), first.sample_rate);
    } catch (const std::exception& e) {
      // The filters do not fit these files (channels, rate), or cannot be
      // read: each file this lane can claim is reported.
      for (std::size_t i = claimed; i < files.size(); ++i) {
        if (!claim(group.first + i, int(lane))) continue;
        file_failed(group.first + i, e.what());
      }
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
      const std::size_t index = group.first + i;
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
          [&file, this, output_channels, index] {
            // A job list may name outputs in folders yet to be made.
            if (!settings_.job_list.empty() && file.output.has_parent_path()) {
              std::error_code error;
              fs::create_directories(file.output.parent_path(), error);
              if (error) {
                throw SoundFileError(file.output.parent_path().string() +
                                     ": cannot create the folder: " + error.message());
              }
            }
            // Written as `process INPUT OUTPUT` writes one file: the same
            // encoding, dither and metadata.
            const int format =
                choose_output_format(file.info.format, settings_.format, "", file.output, false)
                    .format;
            SoundFileWriterOptions writer_options;
            writer_options.dither = dither_for_format(settings_.dither, format);
            writer_options.metadata = file.metadata;
            auto writer = std::make_shared<SoundFileWriter>(
                file.output, file.info.sample_rate, output_channels, format, writer_options);
            return OfflineSink{[writer](std::span<const float> f) { writer->write(f); },
                               [this, writer, index] { commit(*writer, index); }};
          },
      });
    }

    const auto started = std::chrono::steady_clock::now();
    OfflineOptions options = filter->options();
    options.cancel = cancel;
    std::uint64_t run_written = 0;
    options.on_progress = [this, &run_written](std::uint64_t written) {
      const std::uint64_t total = frames_done_ += written - run_written;
      run_written = written;
      const std::lock_guard lock(report_mutex_);
      progress_->update(total);
    };
    options.claim = [this, &group, lane](std::size_t job) {
      return !stop_lanes_.load() && claim(group.first + job, int(lane));
    };
    auto job_started = started;
    const std::string on_device =
        settings_.devices.size() > 1 ? " on GPU " + std::to_string(settings_.devices[lane]) : "";
    options.on_job_done = [&](std::size_t i, const OfflineJobResult& result) {
      const BatchFile& file = files[i];
      const std::size_t index = group.first + i;
      if (result.error) {
        file_failed(index, message_of(result.error));
        return;
      }
      const auto now = std::chrono::steady_clock::now();
      const double seconds = std::chrono::duration<double>(now - job_started).count();
      job_started = now;
      say(index, spdlog::level::info,
          fmt::format("{}{} -> {}: {:.2f} s of audio in {:.3f} s{}",
                      settings_.job_list.empty() ? "" : file.label + ": ", file.input.string(),
                      file.output.string(),
                      double(result.output_frames) / double(file.info.sample_rate), seconds,
                      on_device));
      bool damaged = false;
      if (const NonFiniteTally& tally = *non_finite[i]; tally.count > 0) {
        say(index, spdlog::level::warn,
            fmt::format("{}: {} NaN or infinite sample{} replaced by 0, the first at frame {} "
                        "(counting from 0) of channel {}",
                        file.input.string(), tally.count, tally.count == 1 ? "" : "s",
                        tally.first_frame, tally.first_channel + 1));
        damaged = true;
      }
      file_done(index, damaged);
    };
    filter->run(jobs, options);
  }

  // A line of file `index`'s report (printed when every file before it is done).
  void say(std::size_t index, spdlog::level::level_enum level, std::string text) {
    const std::lock_guard lock(report_mutex_);
    reports_[index].lines.emplace_back(level, std::move(text));
  }

  void file_failed(std::size_t index, const std::string& message) {
    const std::lock_guard lock(report_mutex_);
    Report& report = reports_[index];
    report.lines.emplace_back(spdlog::level::err, about(report.label, message));
    ++failed_;
    finish_report(index);
  }

  void file_done(std::size_t index, bool damaged) {
    const std::lock_guard lock(report_mutex_);
    ++done_;
    if (damaged) ++damaged_;
    finish_report(index);
  }

  // Marks file `index` finished and prints every finished report not yet
  // printed that has no unfinished one before it: the lines come in the
  // batch's order whichever lane finished first. Called with report_mutex_.
  void finish_report(std::size_t index) {
    reports_[index].finished = true;
    while (next_report_ < reports_.size() && reports_[next_report_].finished) {
      Report& report = reports_[next_report_++];
      if (!report.lines.empty()) progress_->finish();
      for (const auto& [level, text] : report.lines) spdlog::log(level, "{}", text);
      report.lines.clear();
    }
  }

  void commit(SoundFileWriter& writer, std::size_t index) {
    writer.commit(&commits_);
    const ClipStats& clip = writer.clip_stats();
    if (clip.clipped_samples > 0) {
      say(index, spdlog::level::warn,
          fmt::format(
              "{}: clipped {} samples, peak {:.2f} dBFS (lower --gain or write --format float)",
              writer.destination().string(), clip.clipped_samples,
              20.0 * std::log10(double(clip.peak))));
    }
  }

  const BatchSettings& settings_;
  std::vector<FilterChoice> filters_;      // the batch's one, or each distinct filter of a job list
  std::unique_ptr<ProgressBar> progress_;  // drawn under report_mutex_ once the lanes run
  std::uint64_t total_frames_ = 0;
  std::atomic<std::uint64_t> frames_done_ = 0;
  // The counts, guarded by report_mutex_ while the lanes run.
  std::size_t done_ = 0;
  std::size_t failed_ = 0;
  std::size_t damaged_ = 0;                   // done, from input with NaN or infinite samples
  std::map<fs::path, std::string> label_of_;  // output -> its input or job row
  std::vector<Group> groups_;                 // the files to filter, group after group
  std::mutex report_mutex_;
  std::deque<Report> reports_;            // one per file of groups_, in their order
  std::size_t next_report_ = 0;           // the first report not printed yet
  std::atomic<bool> stop_lanes_ = false;  // an error in one lane, or the interrupt, stops all
  // Last, so that it is destroyed first: it commits what it still holds.
  BackgroundCommits commits_;
};

}  // namespace

int run_batch(const BatchSettings& settings) {
  return Batch(settings).run();
}

}  // namespace tapstream

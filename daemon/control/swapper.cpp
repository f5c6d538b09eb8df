#include "daemon/control/swapper.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "daemon/config/matrix_config.hpp"
#include "daemon/control/file_text.hpp"
#include "dsp/files/coefficient_file.hpp"
#include "dsp/files/rate_file_name.hpp"
#include "dsp/model/matrix_engine.hpp"

namespace tapstream {

namespace {

namespace fs = std::filesystem;

// The most taps a file may hold; whether the engine takes them is checked
// apart, so that a refusal can name [filter] max_taps rather than the loader.
constexpr std::size_t file_max_taps = std::size_t{1} << 20;

float gain_factor(double gain_db) {
  return static_cast<float>(std::pow(10.0, gain_db / 20.0));
}

// `file` (which may hold "$samplerate$") for the rate in force.
FilterBank load_file(const LiveConfig& config, const fs::path& file, std::size_t channels) {
  const RateFile chosen = choose_rate_file(file, config.sample_rate, config.resample_filters);
  CoefficientFileOptions options;
  options.channels = channels;
  options.max_taps = file_max_taps;
  options.sample_rate = config.sample_rate;
  options.ignore_sample_rate = config.ignore_filter_sample_rate;
  options.resample = config.resample_filters;
  options.named_rate = chosen.named_rate;
  return load_filter_bank(chosen.file, options).scaled(gain_factor(config.gain_db));
}

MatrixFileOptions file_options(const LiveConfig& config) {
  MatrixFileOptions options;
  options.sample_rate = config.ignore_filter_sample_rate ? 0 : config.sample_rate;
  options.max_taps = file_max_taps;
  options.resample = config.resample_filters;
  return options;
}

RoutingMatrix with_gain(const RoutingMatrix& matrix, double gain_db) {
  if (gain_db == 0.0) return matrix;
  std::vector<MatrixPath> paths = matrix.paths();
  for (MatrixPath& path : paths) path.gain_db += gain_db;
  return RoutingMatrix::make(matrix.inputs(), matrix.outputs(), std::move(paths), file_max_taps);
}

RoutingMatrix read_live_matrix(const LiveConfig& config, const fs::path& file) {
  return with_gain(load_matrix_file(file, file_options(config)), config.gain_db);
}

std::string where_configured(const LiveConfig& config) {
  return config.config_file.empty() ? "the configuration" : config.config_file.string();
}

// "0->0, 1->1" for messages.
std::string pairs_of(const RoutingMatrix& matrix) {
  std::string pairs;
  for (const MatrixPath& path : matrix.paths()) {
    pairs += fmt::format("{}{}->{}", pairs.empty() ? "" : ", ", path.input, path.output);
  }
  return pairs;
}

}  // namespace

FilterBank load_configured_bank(const LiveConfig& config) {
  if (config.filter_files.size() == 1) {
    return load_file(config, config.filter_files.front(), config.channels);
  }
  std::vector<std::vector<float>> taps;
  std::vector<std::string> sources;
  for (const auto& file : config.filter_files) {
    const FilterBank one = load_file(config, file, 1);
    taps.emplace_back(one.taps(0).begin(), one.taps(0).end());
    sources.push_back(file.string());
  }
  return FilterBank::per_channel(std::move(taps), std::move(sources));
}

RoutingMatrix load_configured_matrix(const LiveConfig& config) {
  try {
    return read_live_matrix(config, config.matrix_file);
  } catch (const RateFileError& e) {
    throw ConfigError(e.what());
  } catch (const std::invalid_argument& e) {  // a gain that takes a path out of range
    throw ConfigError(config.matrix_file.string() + ": " + e.what());
  }
}

RoutingMatrix load_configured_filters(const LiveConfig& config) {
  return config.has_matrix() ? load_configured_matrix(config)
                             : RoutingMatrix::diagonal(load_configured_bank(config));
}

std::size_t engine_max_taps(const LiveConfig& config, std::size_t first_max_taps) {
  if (!config.max_taps_given) return std::max(default_max_taps, first_max_taps);
  if (config.engine.max_taps == 0) return first_max_taps;
  if (first_max_taps > config.engine.max_taps) {
    throw ConfigError(fmt::format(
        "{}: the {} {} taps, more than [filter] max_taps = {} (raise max_taps, or 0 for the "
        "{}' own length)",
        where_configured(config),
        config.has_matrix() ? "matrix's longest path has" : "filters have", first_max_taps,
        config.engine.max_taps, config.has_matrix() ? "paths" : "filters"));
  }
  return config.engine.max_taps;
}

Swapper::Swapper(LivePipeline& pipeline, const LiveConfig& config, RoutingMatrix initial)
    : pipeline_(pipeline),
      per_channel_(!config.has_matrix()),
      sample_rate_(config.sample_rate),
      file_(config.matrix_file),
      config_(config),
      current_(std::make_shared<const RoutingMatrix>(std::move(initial))),
      current_file_(config.matrix_file) {
  if (per_channel_) {
    for (std::size_t c = 0; c < current_->inputs(); ++c) {
      const fs::path& file = config.filter_file(c);
      sources_.push_back({file, false, stamp_of(file)});
    }
  } else {
    stamps_ = stamps_of(file_, *current_);
  }
  set_watched_locked();
}

fs::path Swapper::in_force(const fs::path& configured) const {
  try {
    return choose_rate_file(configured, sample_rate_, /*nearest=*/true).file;
  } catch (const RateFileError&) {
    return configured;  // no file for any rate: loading it says so
  }
}

Swapper::Stamp Swapper::stamp_of(const fs::path& configured) const {
  const fs::path file = in_force(configured);
  std::error_code error;
  Stamp stamp;
  stamp.modified = fs::last_write_time(file, error);
  stamp.size = error ? 0 : fs::file_size(file, error);
  return stamp;
}

Swapper::Stamps Swapper::stamps_of(const fs::path& file, const RoutingMatrix& matrix) const {
  Stamps stamps{{file, stamp_of(file)}};
  for (const MatrixPath& path : matrix.paths()) {
    if (!path.file.empty()) stamps.emplace(path.file, stamp_of(path.file));
  }
  return stamps;
}

void Swapper::set_watched_locked() {
  std::vector<fs::path> watched;
  if (per_channel_) {
    // The configured filter files (a `ctl load`'s file is not watched).
    for (const fs::path& file : config().filter_files) watched.push_back(in_force(file));
  } else {
    for (const auto& [file, stamp] : stamps_) watched.push_back(in_force(file));
  }
  std::lock_guard current_lock(current_mutex_);
  watched_ = std::move(watched);
}

std::string Swapper::reject(const std::string& what, const std::string& reason) {
  rejected_.fetch_add(1, std::memory_order_relaxed);
  spdlog::error("{} rejected, the running {} running: {}", what,
                per_channel_ ? "filters keep" : "matrix keeps", reason);
  return reason;
}

std::string Swapper::install_locked(std::shared_ptr<const RoutingMatrix> next,
                                    const std::string& what,
                                    const std::vector<std::size_t>& changed) {
  const auto running = current();
  try {
    const std::size_t max_taps = pipeline_.engine_max_taps();
    // An engine that delays natively counts taps alone (its delay line's reach
    // is check_matrix_swap's question); one that folds delays counts both.
    const std::size_t max_delay = pipeline_.engine_max_delay_frames();
    for (std::size_t p = 0; p < next->paths().size(); ++p) {
      const MatrixPath& path = next->paths()[p];
      const bool folded = max_delay == 0 && path.delay_frames > 0;
      if (!folded && path.delay_frames > max_delay) {
        const LiveConfig config = this->config();
        throw std::invalid_argument(fmt::format(
            "{}a delay of {} frames, more than the {} the engine's delay line was started with "
            "(the starting matrix's longest delay or [filter] max_delay_frames, whichever is "
            "more); raise [filter] max_delay_frames in {} and restart tapstream (a running "
            "engine cannot grow)",
            per_channel_ ? std::string() : RoutingMatrix::describe_path(p, path) + ": ",
            path.delay_frames, max_delay, where_configured(config)));
      }
      const std::size_t taps = path.taps.size() + (folded ? path.delay_frames : 0);
      if (taps <= max_taps) continue;
      const LiveConfig config = this->config();
      throw std::invalid_argument(fmt::format(
          "{}{} taps{}, more than the {} the engine was started with ([filter] max_taps{}); "
          "raise [filter] max_taps in {} and restart tapstream (a running engine cannot grow)",
          per_channel_ ? std::string() : RoutingMatrix::describe_path(p, path) + ": ", taps,
          folded ? " (delay included: this engine folds delays into taps)" : "", max_taps,
          config.max_taps_given ? fmt::format(" = {}", config.engine.max_taps) : " not set",
          where_configured(config)));
    }
    check_matrix_swap(*running, *next, max_taps, max_delay);
  } catch (const std::exception& e) {
    return reject(what, without_file_text(e.what()));
  }
  std::vector<PathTaps> changed_taps;
  for (const std::size_t p : changed) changed_taps.push_back({p, next->paths()[p].taps});
  const std::uint64_t sequence = pipeline_.post(next, std::move(changed_taps));
  if (!pipeline_.mailbox().wait_acknowledged(sequence, std::chrono::seconds(5))) {
    return reject(what, pipeline_.mailbox().rejected() == sequence
                            ? "the engine refused it: " + pipeline_.mailbox().refusal()
                            : "the engine did not take it within 5 s");
  }
  {
    std::lock_guard current_lock(current_mutex_);
    current_ = next;
  }
  if (per_channel_) {
    spdlog::info("{} installed at block {} ({} taps max)", what, pipeline_.stats().last_swap_block,
                 next->max_taps());
  } else {
    spdlog::info("{} installed at block {} ({} paths, {} taps max)", what,
                 pipeline_.stats().last_swap_block, next->paths().size(), next->max_taps());
  }
  return {};
}

std::string Swapper::load(const LoadRequest& request) {
  switch (request.target) {
    case LoadRequest::Target::channel:
    case LoadRequest::Target::all_channels:
      if (!per_channel_) {
        // Not a refusal of a filter: a request this kind of daemon does not take.
        return fmt::format(
            "this daemon runs the routing matrix {}: load path INPUT OUTPUT FILE replaces one "
            "path's filter, load matrix FILE the whole matrix",
            matrix_file().string());
      }
      return load_channels(request);
    case LoadRequest::Target::path:
      if (per_channel_ && request.input == request.output && request.input < current()->inputs()) {
        return load_channels(LoadRequest::channel(request.input, request.file));
      }
      return load_path(request.input, request.output, request.file);
    case LoadRequest::Target::matrix:
      if (per_channel_) {
        return "load matrix needs a routing matrix ([filter] matrix); this daemon runs one "
               "filter per channel (load CHANNEL|all FILE, or load path C C FILE)";
      }
      return load_matrix(request.file);
  }
  return "unknown load request";
}

std::string Swapper::load_channels(const LoadRequest& request) {
  std::lock_guard lock(mutex_);
  const auto running = current();
  const std::size_t channels = running->inputs();
  const LiveConfig config = this->config();
  std::optional<std::size_t> index;
  if (request.target == LoadRequest::Target::channel) {
    index = request.input;
    if (*index >= channels) {
      return reject("ctl load",
                    fmt::format("channel {}: the stream has {} channel{} (0..{})", *index, channels,
                                channels == 1 ? "" : "s", channels - 1));
    }
  }
  const fs::path& file = request.file;
  const std::string what = index ? fmt::format("filter {} for channel {}", file.string(), *index)
                                 : fmt::format("filter {} for all channels", file.string());
  const Stamp stamp = stamp_of(file);
  std::shared_ptr<const RoutingMatrix> next;
  try {
    // Loaded for the stream's real channel count, so that messages about an
    // impulse response's channels compare it with the stream's.
    FilterBank loaded = load_file(config, file, channels);
    if (index) {
      if (!loaded.is_shared()) {
        throw std::invalid_argument(fmt::format(
            "{} has one filter per channel; loading it for one channel needs a single filter "
            "(the stream has {} channels: `load all` gives each channel its own)",
            file.string(), channels));
      }
      const auto base = running->diagonal_bank();
      std::vector<std::vector<float>> taps;
      std::vector<std::string> sources;
      for (std::size_t c = 0; c < channels; ++c) {
        const auto t = c == *index ? loaded.taps(c) : base->taps(c);
        taps.emplace_back(t.begin(), t.end());
        sources.push_back(c == *index ? file.string() : base->source(c));
      }
      loaded = FilterBank::per_channel(std::move(taps), std::move(sources));
    }
    next = std::make_shared<const RoutingMatrix>(RoutingMatrix::diagonal(loaded));
  } catch (const std::exception& e) {
    return reject(what, without_file_text(e.what()));
  }
  std::string error = install_locked(std::move(next), what);
  if (!error.empty()) return error;
  for (std::size_t c = 0; c < channels; ++c) {
    if (!index || c == *index) sources_[c] = {file, true, stamp};
  }
  return {};
}

RoutingMatrix Swapper::build(const LiveConfig& config, const fs::path& file,
                             std::map<Pair, fs::path>& overrides) const {
  RoutingMatrix read = read_live_matrix(config, file);
  if (overrides.empty()) return read;
  std::vector<MatrixPath> paths = read.paths();
  for (auto it = overrides.begin(); it != overrides.end();) {
    MatrixPath* found = nullptr;
    for (MatrixPath& path : paths) {
      if (path.input == it->first.first && path.output == it->first.second) found = &path;
    }
    if (found == nullptr) {
      spdlog::warn("{} is no longer a path of {}: its `ctl load path` of {} is dropped",
                   fmt::format("input {} -> output {}", it->first.first, it->first.second),
                   file.string(), it->second.string());
      it = overrides.erase(it);
      continue;
    }
    found->taps = load_path_filter(it->second, file_options(config));
    found->source = it->second.string();
    found->file = it->second;
    ++it;
  }
  return RoutingMatrix::make(read.inputs(), read.outputs(), std::move(paths), file_max_taps);
}

std::string Swapper::set_paths(const std::vector<std::pair<std::size_t, std::vector<float>>>& taps,
                               const std::string& what) {
  std::lock_guard lock(mutex_);
  const auto running = current();
  std::vector<PathTaps> updates;
  std::vector<std::size_t> changed;
  for (const auto& [path, values] : taps) {
    updates.push_back({path, values});
    changed.push_back(path);
  }
  std::shared_ptr<const RoutingMatrix> next;
  try {
    if (updates.empty()) throw std::invalid_argument("no paths named");
    next = std::make_shared<const RoutingMatrix>(
        with_path_taps(*running, updates, pipeline_.engine_max_taps(),
                       pipeline_.engine_max_delay_frames(), "set_paths"));
  } catch (const std::exception& e) {
    return reject(what, e.what());
  }
  return install_locked(std::move(next), what, changed);
}

std::string Swapper::load_path(std::size_t input, std::size_t output, const fs::path& file) {
  std::lock_guard lock(mutex_);
  const std::string what =
      fmt::format("filter {} for input {} -> output {}", file.string(), input, output);
  const auto running = current();
  if (per_channel_) {
    return reject(what, fmt::format("input {} -> output {} is not a path of the running filters "
                                    "(one filter per channel: paths {}); routing one channel to "
                                    "another needs a restart with a [filter] matrix",
                                    input, output, pairs_of(*running)));
  }
  std::vector<MatrixPath> paths = running->paths();
  MatrixPath* found = nullptr;
  for (MatrixPath& path : paths) {
    if (path.input == input && path.output == output) found = &path;
  }
  if (found == nullptr) {
    return reject(what, fmt::format("input {} -> output {} is not a path of the running matrix "
                                    "(paths: {}); adding a path needs a restart with it in {}",
                                    input, output, pairs_of(*running), file_.string()));
  }
  std::shared_ptr<const RoutingMatrix> next;
  const Stamp stamp = stamp_of(file);
  try {
    found->taps = load_path_filter(file, file_options(config()));
    found->source = file.string();
    found->file = file;
    next = std::make_shared<const RoutingMatrix>(RoutingMatrix::make(
        running->inputs(), running->outputs(), std::move(paths), file_max_taps));
  } catch (const std::exception& e) {
    return reject(what, without_file_text(e.what()));
  }
  std::string error = install_locked(next, what);
  if (!error.empty()) return error;
  overrides_[{input, output}] = file;
  stamps_[file] = stamp;
  set_watched_locked();
  return {};
}

std::string Swapper::load_matrix(const fs::path& file) {
  std::lock_guard lock(mutex_);
  const std::string what = "matrix " + file.string();
  std::shared_ptr<const RoutingMatrix> next;
  try {
    next = std::make_shared<const RoutingMatrix>(read_live_matrix(config(), file));
  } catch (const std::exception& e) {
    return reject(what, without_file_text(e.what()));
  }
  Stamps stamps = stamps_of(file, *next);
  std::string error = install_locked(next, what);
  if (!error.empty()) return error;
  file_ = file;
  overrides_.clear();
  stamps_ = std::move(stamps);
  {
    std::lock_guard current_lock(current_mutex_);
    current_file_ = file;
  }
  set_watched_locked();
  return {};
}

std::string Swapper::reload(const LiveConfig& config, std::string* summary) {
  std::lock_guard lock(mutex_);
  if (per_channel_ && config.has_matrix()) {
    return reject("reloaded filters",
                  "the configuration now names a routing matrix ([filter] matrix); going from one "
                  "filter per channel to a matrix needs a restart");
  }
  if (!per_channel_ && !config.has_matrix()) {
    return reject("reloaded filters",
                  "the configuration has no [filter] matrix any more; going from a routing "
                  "matrix to one filter per channel needs a restart");
  }
  return per_channel_ ? reload_channels(config, summary) : reload_matrix(config, summary);
}

std::string Swapper::reload_channels(const LiveConfig& config, std::string* summary) {
  const LiveConfig running = this->config();
  const std::size_t channels = sources_.size();
  const bool gain_changed = config.gain_db != running.gain_db;
  std::vector<Source> wanted = sources_;
  std::vector<std::size_t> reloaded;
  for (std::size_t c = 0; c < channels; ++c) {
    // A configuration that names another file for a channel replaces what a
    // `ctl load` or an upload put there; one that names the same keeps it.
    if (config.filter_file(c) != running.filter_file(c)) wanted[c].from_ctl = false;
    if (!wanted[c].from_ctl) wanted[c].file = config.filter_file(c);
    const Stamp stamp = stamp_of(wanted[c].file);
    if (gain_changed || wanted[c].file != sources_[c].file || !(stamp == sources_[c].stamp)) {
      wanted[c].stamp = stamp;
      reloaded.push_back(c);
    }
  }
  // Said in the summary: which channels keep a loaded filter over the configuration's.
  std::string kept;
  for (std::size_t c = 0; c < channels; ++c) {
    if (!wanted[c].from_ctl) continue;
    kept += fmt::format(
        "{}channel {} keeps {} (loaded by ctl load or upload_filter; a "
        "configuration naming another file for it replaces it)",
        kept.empty() ? "; " : ", ", c, wanted[c].file.string());
  }
  if (reloaded.empty()) {
    if (summary) {
      *summary =
          "the filters stay: every channel's file has the size and time it had when loaded" + kept;
    }
    {
      std::scoped_lock both(current_mutex_);
      config_ = config;
    }
    set_watched_locked();
    return {};
  }
  const std::string what =
      fmt::format("reloaded filters ({} of {} channels)", reloaded.size(), channels);
  std::shared_ptr<const RoutingMatrix> next;
  try {
    // One read per distinct file; a file shared by every channel is loaded for all of them.
    std::map<fs::path, FilterBank> loaded;
    std::vector<std::vector<float>> taps;
    std::vector<std::string> sources;
    const auto base = current()->diagonal_bank();
    for (std::size_t c = 0; c < channels; ++c) {
      const bool again = std::find(reloaded.begin(), reloaded.end(), c) != reloaded.end();
      if (!again) {
        taps.emplace_back(base->taps(c).begin(), base->taps(c).end());
        sources.push_back(base->source(c));
        continue;
      }
      const fs::path& file = wanted[c].file;
      auto found = loaded.find(file);
      if (found == loaded.end()) {
        const bool shared_file = config.filter_files.size() == 1 || wanted[c].from_ctl;
        found = loaded.emplace(file, load_file(config, file, shared_file ? channels : 1)).first;
      }
      const FilterBank& one = found->second;
      const std::size_t from = one.channels() == channels ? c : 0;
      taps.emplace_back(one.taps(from).begin(), one.taps(from).end());
      sources.push_back(one.source(from));
    }
    next = std::make_shared<const RoutingMatrix>(
        RoutingMatrix::diagonal(FilterBank::per_channel(std::move(taps), std::move(sources))));
  } catch (const std::exception& e) {
    return reject(what, without_file_text(e.what()));
  }
  std::string error = install_locked(std::move(next), what);
  if (!error.empty()) return error;
  sources_ = std::move(wanted);
  {
    std::scoped_lock both(current_mutex_);
    config_ = config;
  }
  set_watched_locked();
  if (summary) {
    std::string list;
    for (const std::size_t c : reloaded) list += (list.empty() ? "" : ", ") + std::to_string(c);
    *summary = fmt::format("reloaded channel{} {}{}", reloaded.size() == 1 ? "" : "s", list, kept);
  }
  return {};
}

std::string Swapper::reload_matrix(const LiveConfig& config, std::string* summary) {
  const LiveConfig running = this->config();
  const bool new_file = config.matrix_file != running.matrix_file;
  const fs::path file = new_file ? config.matrix_file : file_;
  std::map<Pair, fs::path> overrides = new_file ? std::map<Pair, fs::path>() : overrides_;
  std::vector<std::string> changed;
  if (new_file) changed.push_back("[filter] matrix is now " + file.string());
  if (config.gain_db != running.gain_db) changed.push_back("[filter] gain_db");
  if (!new_file) {
    for (const auto& [watched, stamp] : stamps_) {
      if (!(stamp_of(watched) == stamp)) changed.push_back(watched.string());
    }
  }
  if (changed.empty()) {
    if (summary) {
      *summary =
          "the matrix stays: its file and every coefficient file have the size and time they had "
          "when loaded";
    }
    std::scoped_lock both(current_mutex_);
    config_ = config;
    return {};
  }
  std::string list;
  for (const auto& item : changed) list += (list.empty() ? "" : ", ") + item;
  const std::string what = "reloaded matrix " + file.string();
  std::shared_ptr<const RoutingMatrix> next;
  Stamps stamps;
  try {
    next = std::make_shared<const RoutingMatrix>(build(config, file, overrides));
    stamps = stamps_of(file, *next);
  } catch (const std::exception& e) {
    return reject(what, without_file_text(e.what()));
  }
  std::string error = install_locked(next, what);
  if (!error.empty()) return error;
  file_ = file;
  overrides_ = std::move(overrides);
  stamps_ = std::move(stamps);
  {
    std::scoped_lock both(current_mutex_);
    config_ = config;
    current_file_ = file;
  }
  set_watched_locked();
  if (summary) *summary = fmt::format("reloaded the matrix {} ({} changed)", file.string(), list);
  return {};
}

LiveConfig Swapper::config() const {
  std::lock_guard lock(current_mutex_);
  return config_;
}

std::shared_ptr<const RoutingMatrix> Swapper::current() const {
  std::lock_guard lock(current_mutex_);
  return current_;
}

fs::path Swapper::matrix_file() const {
  std::lock_guard lock(current_mutex_);
  return current_file_;
}

std::vector<fs::path> Swapper::watched_files() const {
  std::lock_guard lock(current_mutex_);
  return watched_;
}

}  // namespace tapstream

#include "daemon/control/matrix_swapper.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <stdexcept>

#include "daemon/control/file_text.hpp"
#include "daemon/matrix_config.hpp"
#include "dsp/matrix_engine.hpp"

namespace tapstream {

namespace {

namespace fs = std::filesystem;

// The most taps a file may hold; whether the engine takes them is checked
// apart, so that a refusal can name [filter] max_taps.
constexpr std::size_t file_max_taps = std::size_t{1} << 20;

MatrixFileOptions file_options(const LiveConfig& config) {
  MatrixFileOptions options;
  options.sample_rate = config.ignore_filter_sample_rate ? 0 : config.sample_rate;
  options.max_taps = file_max_taps;
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

}  // namespace

RoutingMatrix load_configured_matrix(const LiveConfig& config) {
  try {
    return read_live_matrix(config, config.matrix_file);
  } catch (const std::invalid_argument& e) {  // a gain that takes a path out of range
    throw ConfigError(config.matrix_file.string() + ": " + e.what());
  }
}

MatrixSwapper::MatrixSwapper(LivePipeline& pipeline, const LiveConfig& config,
                             RoutingMatrix initial)
    : pipeline_(pipeline),
      file_(config.matrix_file),
      config_(config),
      current_(std::make_shared<const RoutingMatrix>(std::move(initial))),
      current_file_(config.matrix_file) {
  stamps_ = stamps_of(file_, *current_);
  for (const auto& [file, stamp] : stamps_) watched_.push_back(file);
}

MatrixSwapper::Stamp MatrixSwapper::stamp_of(const fs::path& file) {
  std::error_code error;
  Stamp stamp;
  stamp.modified = fs::last_write_time(file, error);
  stamp.size = error ? 0 : fs::file_size(file, error);
  return stamp;
}

MatrixSwapper::Stamps MatrixSwapper::stamps_of(const fs::path& file, const RoutingMatrix& matrix) {
  Stamps stamps{{file, stamp_of(file)}};
  for (const MatrixPath& path : matrix.paths()) {
    if (!path.file.empty()) stamps.emplace(path.file, stamp_of(path.file));
  }
  return stamps;
}

std::string MatrixSwapper::reject(const std::string& what, const std::string& reason) {
  rejected_.fetch_add(1, std::memory_order_relaxed);
  spdlog::error("{} rejected, the running matrix keeps running: {}", what, reason);
  return reason;
}

RoutingMatrix MatrixSwapper::build(const LiveConfig& config, const fs::path& file,
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

std::string MatrixSwapper::install_locked(std::shared_ptr<const RoutingMatrix> next,
                                          const std::string& what) {
  const auto running = current();
  try {
    const std::size_t max_taps = pipeline_.engine_max_taps();
    for (std::size_t p = 0; p < next->paths().size(); ++p) {
      const MatrixPath& path = next->paths()[p];
      const std::size_t taps = path.delay_frames + path.taps.size();
      if (taps <= max_taps) continue;
      const LiveConfig config = this->config();
      throw std::invalid_argument(fmt::format(
          "{}: {} taps{}, more than the {} the engine was started with ([filter] max_taps{}); "
          "raise [filter] max_taps in {} and restart tapstream (a running engine cannot grow)",
          RoutingMatrix::describe_path(p, path), taps,
          path.delay_frames > 0 ? " (delay included)" : "", max_taps,
          config.max_taps_given ? fmt::format(" = {}", config.engine.max_taps) : " not set",
          where_configured(config)));
    }
    check_matrix_swap(*running, *next, max_taps);
  } catch (const std::exception& e) {
    return reject(what, without_file_text(e.what()));
  }
  const std::uint64_t sequence = pipeline_.mailbox().post(next);
  if (!pipeline_.mailbox().wait_acknowledged(sequence, std::chrono::seconds(5))) {
    return reject(what, pipeline_.mailbox().rejected() == sequence
                            ? "the engine refused it (see the log)"
                            : "the engine did not take it within 5 s");
  }
  {
    std::lock_guard current_lock(current_mutex_);
    current_ = next;
  }
  spdlog::info("{} installed at block {} ({} paths, {} taps max)", what,
               pipeline_.stats().last_swap_block, next->paths().size(), next->max_taps());
  return {};
}

std::string MatrixSwapper::load_path(std::size_t input, std::size_t output, const fs::path& file) {
  std::lock_guard lock(mutex_);
  const std::string what =
      fmt::format("filter {} for input {} -> output {}", file.string(), input, output);
  const auto running = current();
  std::vector<MatrixPath> paths = running->paths();
  MatrixPath* found = nullptr;
  std::string pairs;
  for (MatrixPath& path : paths) {
    if (path.input == input && path.output == output) found = &path;
    pairs += fmt::format("{}{}->{}", pairs.empty() ? "" : ", ", path.input, path.output);
  }
  if (found == nullptr) {
    return reject(what, fmt::format("input {} -> output {} is not a path of the running matrix "
                                    "(paths: {}); adding a path needs a restart with it in {}",
                                    input, output, pairs, file_.string()));
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
  std::lock_guard current_lock(current_mutex_);
  watched_.clear();
  for (const auto& [watched, s] : stamps_) watched_.push_back(watched);
  return {};
}

std::string MatrixSwapper::load_matrix(const fs::path& file) {
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
  std::lock_guard current_lock(current_mutex_);
  current_file_ = file;
  watched_.clear();
  for (const auto& [watched, s] : stamps_) watched_.push_back(watched);
  return {};
}

std::string MatrixSwapper::reload(const LiveConfig& config, std::string* summary) {
  std::lock_guard lock(mutex_);
  const LiveConfig running = this->config();
  if (!config.has_matrix()) {
    return reject("reloaded filters",
                  "the configuration has no [filter] matrix any more; going from a routing "
                  "matrix to one filter per channel needs a restart");
  }
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
    watched_.clear();
    for (const auto& [watched, s] : stamps_) watched_.push_back(watched);
  }
  if (summary) *summary = fmt::format("reloaded the matrix {} ({} changed)", file.string(), list);
  return {};
}

LiveConfig MatrixSwapper::config() const {
  std::lock_guard lock(current_mutex_);
  return config_;
}

std::shared_ptr<const RoutingMatrix> MatrixSwapper::current() const {
  std::lock_guard lock(current_mutex_);
  return current_;
}

fs::path MatrixSwapper::matrix_file() const {
  std::lock_guard lock(current_mutex_);
  return current_file_;
}

std::vector<fs::path> MatrixSwapper::watched_files() const {
  std::lock_guard lock(current_mutex_);
  return watched_;
}

}  // namespace tapstream

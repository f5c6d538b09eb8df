#include "daemon/control/filter_swapper.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <stdexcept>

#include "daemon/control/file_text.hpp"
#include "dsp/coefficient_file.hpp"

namespace tapstream {

namespace {

namespace fs = std::filesystem;

// The most taps a file may hold; whether the engine takes them is checked
// apart, so that a refusal can name [filter] max_taps rather than the loader.
constexpr std::size_t file_max_taps = std::size_t{1} << 20;

float gain_factor(double gain_db) {
  return static_cast<float>(std::pow(10.0, gain_db / 20.0));
}

FilterBank load_file(const LiveConfig& config, const fs::path& file, std::size_t channels) {
  CoefficientFileOptions options;
  options.channels = channels;
  options.max_taps = file_max_taps;
  options.sample_rate = config.sample_rate;
  options.ignore_sample_rate = config.ignore_filter_sample_rate;
  return load_filter_bank(file, options).scaled(gain_factor(config.gain_db));
}

std::string where_configured(const LiveConfig& config) {
  return config.config_file.empty() ? "the configuration" : config.config_file.string();
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

std::size_t engine_max_taps(const LiveConfig& config, std::size_t first_max_taps) {
  if (!config.max_taps_given) return std::max(default_max_taps, first_max_taps);
  if (config.engine.max_taps == 0) return first_max_taps;
  if (first_max_taps > config.engine.max_taps) {
    throw ConfigError(fmt::format(
        "{}: the {} {} taps{}, more than [filter] max_taps = {} (raise max_taps, or 0 for the "
        "{}' own length)",
        where_configured(config),
        config.has_matrix() ? "matrix's longest path has" : "filters have", first_max_taps,
        config.has_matrix() ? " (delay included)" : "", config.engine.max_taps,
        config.has_matrix() ? "paths" : "filters"));
  }
  return config.engine.max_taps;
}

FilterSwapper::FilterSwapper(LivePipeline& pipeline, const LiveConfig& config, FilterBank initial)
    : pipeline_(pipeline),
      config_(config),
      current_(std::make_shared<const FilterBank>(std::move(initial))) {
  for (std::size_t c = 0; c < pipeline_.channels(); ++c) {
    const fs::path& file = config.filter_file(c);
    sources_.push_back({file, false, stamp_of(file)});
  }
}

FilterSwapper::Stamp FilterSwapper::stamp_of(const fs::path& file) {
  std::error_code error;
  Stamp stamp;
  stamp.modified = fs::last_write_time(file, error);
  stamp.size = error ? 0 : fs::file_size(file, error);
  return stamp;
}

std::string FilterSwapper::reject(const std::string& what, const std::string& reason) {
  rejected_.fetch_add(1, std::memory_order_relaxed);
  spdlog::error("{} rejected, the running filters keep running: {}", what, reason);
  return reason;
}

void FilterSwapper::check(const FilterBank& bank) const {
  if (bank.channels() != pipeline_.channels()) {
    throw std::invalid_argument(fmt::format("the bank has {} channels, the stream {}",
                                            bank.channels(), pipeline_.channels()));
  }
  if (bank.max_taps() > pipeline_.engine_max_taps()) {
    const LiveConfig config = this->config();
    throw std::invalid_argument(fmt::format(
        "{} taps, more than the {} the engine was started with ([filter] max_taps{}); raise "
        "[filter] max_taps in {} and restart tapstream (a running engine cannot grow)",
        bank.max_taps(), pipeline_.engine_max_taps(),
        config.max_taps_given ? fmt::format(" = {}", config.engine.max_taps) : " not set",
        where_configured(config)));
  }
}

std::string FilterSwapper::install_locked(std::shared_ptr<const FilterBank> bank,
                                          const std::string& what) {
  try {
    check(*bank);
  } catch (const std::exception& e) {
    return reject(what, e.what());
  }
  const std::uint64_t sequence = pipeline_.mailbox().post(
      std::make_shared<const RoutingMatrix>(RoutingMatrix::diagonal(*bank)));
  if (!pipeline_.mailbox().wait_acknowledged(sequence, std::chrono::seconds(5))) {
    return reject(what, pipeline_.mailbox().rejected() == sequence
                            ? "the engine refused it (see the log)"
                            : "the engine did not take it within 5 s");
  }
  {
    std::lock_guard current_lock(current_mutex_);
    current_ = bank;
  }
  spdlog::info("{} installed at block {} ({} taps max)", what, pipeline_.stats().last_swap_block,
               bank->max_taps());
  return {};
}

std::string FilterSwapper::install(const std::function<FilterBank()>& build,
                                   const std::string& what) {
  std::lock_guard lock(mutex_);
  std::shared_ptr<const FilterBank> bank;
  try {
    bank = std::make_shared<const FilterBank>(build());
  } catch (const std::exception& e) {
    return reject(what, without_file_text(e.what()));
  }
  return install_locked(std::move(bank), what);
}

std::string FilterSwapper::load(const std::string& channel, const fs::path& file) {
  std::lock_guard lock(mutex_);
  const std::size_t channels = pipeline_.channels();
  const LiveConfig config = this->config();
  std::optional<std::size_t> index;
  if (channel != "all") {
    try {
      std::size_t used = 0;
      index = std::stoul(channel, &used);
      if (used != channel.size()) throw std::invalid_argument(channel);
    } catch (const std::exception&) {
      return reject("ctl load",
                    fmt::format("channel '{}': expected a channel number or 'all'", channel));
    }
    if (*index >= channels) {
      return reject("ctl load",
                    fmt::format("channel {}: the stream has {} channel{} (0..{})", *index, channels,
                                channels == 1 ? "" : "s", channels - 1));
    }
  }
  const std::string what = index ? fmt::format("filter {} for channel {}", file.string(), *index)
                                 : fmt::format("filter {} for all channels", file.string());
  const Stamp stamp = stamp_of(file);
  std::shared_ptr<const FilterBank> bank;
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
      std::vector<std::vector<float>> taps;
      std::vector<std::string> sources;
      for (std::size_t c = 0; c < channels; ++c) {
        const auto t = c == *index ? loaded.taps(c) : current()->taps(c);
        taps.emplace_back(t.begin(), t.end());
        sources.push_back(c == *index ? file.string() : current()->source(c));
      }
      loaded = FilterBank::per_channel(std::move(taps), std::move(sources));
    }
    bank = std::make_shared<const FilterBank>(std::move(loaded));
  } catch (const std::exception& e) {
    return reject(what, without_file_text(e.what()));
  }
  std::string error = install_locked(std::move(bank), what);
  if (!error.empty()) return error;
  for (std::size_t c = 0; c < channels; ++c) {
    if (!index || c == *index) sources_[c] = {file, true, stamp};
  }
  return {};
}

std::string FilterSwapper::reload(const LiveConfig& config, std::string* summary) {
  std::lock_guard lock(mutex_);
  if (config.has_matrix()) {
    return reject("reloaded filters",
                  "the configuration now names a routing matrix ([filter] matrix); going from one "
                  "filter per channel to a matrix needs a restart");
  }
  const LiveConfig running = this->config();
  const std::size_t channels = pipeline_.channels();
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
    std::scoped_lock both(current_mutex_);
    config_ = config;
    return {};
  }
  const std::string what =
      fmt::format("reloaded filters ({} of {} channels)", reloaded.size(), channels);
  std::shared_ptr<const FilterBank> bank;
  try {
    // One read per distinct file; a file shared by every channel is loaded for all of them.
    std::map<fs::path, FilterBank> loaded;
    std::vector<std::vector<float>> taps;
    std::vector<std::string> sources;
    const auto base = current();
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
    bank = std::make_shared<const FilterBank>(
        FilterBank::per_channel(std::move(taps), std::move(sources)));
  } catch (const std::exception& e) {
    return reject(what, without_file_text(e.what()));
  }
  std::string error = install_locked(std::move(bank), what);
  if (!error.empty()) return error;
  sources_ = std::move(wanted);
  {
    std::scoped_lock both(current_mutex_);
    config_ = config;
  }
  if (summary) {
    std::string list;
    for (const std::size_t c : reloaded) list += (list.empty() ? "" : ", ") + std::to_string(c);
    *summary = fmt::format("reloaded channel{} {}{}", reloaded.size() == 1 ? "" : "s", list, kept);
  }
  return {};
}

LiveConfig FilterSwapper::config() const {
  std::lock_guard lock(current_mutex_);
  return config_;
}

std::shared_ptr<const FilterBank> FilterSwapper::current() const {
  std::lock_guard lock(current_mutex_);
  return current_;
}

}  // namespace tapstream

#pragma once
// Every way a new filter reaches a running `tapstream run` ends here: `ctl
// load`, `ctl reload` and SIGHUP, the file watcher. A bank is loaded and
// validated on the calling (control) thread, then posted to the engine's
// mailbox and waited for; one that fails never reaches the mailbox, the
// running one keeps running, and the refusal is counted and explained.
//
// Each channel remembers where its filter came from (the configuration, or a
// `ctl load`) and the file's size and modification time when it was read, so
// that a reload re-reads only files that changed on disk and keeps `ctl load`s
// unless their own file changed.
//
// Threads: the control socket's, the watcher's and the main thread call in;
// `mutex_` serialises swaps; `current_mutex_` guards what status reads
// (current bank, configuration), so status never waits for a swap; the
// rejection count is an atomic read by anyone.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "daemon/config.hpp"
#include "daemon/control/swapper.hpp"
#include "daemon/pipeline/live_pipeline.hpp"
#include "dsp/filter_bank.hpp"

namespace tapstream {

// The bank a configuration names (one file for all channels, or one per
// channel), with its gain applied. Files may hold up to 2^20 taps; whether
// the engine takes them is FilterSwapper's (or engine_max_taps') question.
FilterBank load_configured_bank(const LiveConfig& config);

// The longest filter the engine is built for, from [filter] max_taps and the
// first bank: the key's value (default_max_taps when absent, or the first
// bank's length if that is longer; 0: the first bank's length). Throws
// ConfigError when the first bank is longer than an explicit max_taps.
std::size_t engine_max_taps(const LiveConfig& config, std::size_t first_max_taps);

class FilterSwapper final : public Swapper {
 public:
  FilterSwapper(LivePipeline& pipeline, const LiveConfig& config, FilterBank initial);

  // Installs a whole new bank. Returns "" on success, else the reason.
  std::string install(const std::function<FilterBank()>& build, const std::string& what);

  // `tapstream ctl load CHANNEL|all FILE`: "" or the reason.
  std::string load(const std::string& channel, const std::filesystem::path& file);

  // SIGHUP, `ctl reload`, the watcher: takes `config` (filters and gain) and
  // re-reads only the files that changed on disk or in the configuration.
  // Returns "" on success (then `summary` says what was reloaded), else the
  // reason; the running configuration stays on failure.
  std::string reload(const LiveConfig& config, std::string* summary = nullptr) override;

  // Counts a refusal that happened elsewhere (a configuration that did not
  // load) and logs it; returns `reason`.
  std::string reject(const std::string& what, const std::string& reason) override;

  LiveConfig config() const override;
  std::shared_ptr<const FilterBank> current() const;
  // Every refusal so far: unreadable or invalid files, too many taps, wrong
  // channel, an engine that refused or did not answer.
  std::uint64_t rejected() const override { return rejected_.load(std::memory_order_relaxed); }
  // The configured filter files.
  std::vector<std::filesystem::path> watched_files() const override {
    return config().filter_files;
  }

 private:
  struct Stamp {
    std::filesystem::file_time_type modified{};
    std::uintmax_t size = 0;
    bool operator==(const Stamp&) const = default;
  };
  struct Source {
    std::filesystem::path file;
    bool from_ctl = false;  // set by `ctl load`, not by the configuration
    Stamp stamp;
  };
  static Stamp stamp_of(const std::filesystem::path& file);

  void check(const FilterBank& bank) const;
  // check() and post under mutex_; "" or the reason.
  std::string install_locked(std::shared_ptr<const FilterBank> bank, const std::string& what);

  LivePipeline& pipeline_;
  std::mutex mutex_;             // one swap at a time
  std::vector<Source> sources_;  // per channel; under mutex_
  mutable std::mutex current_mutex_;
  LiveConfig config_;  // written under both mutexes
  std::shared_ptr<const FilterBank> current_;
  std::atomic<std::uint64_t> rejected_{0};
};

}  // namespace tapstream

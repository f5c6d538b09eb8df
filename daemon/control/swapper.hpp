#pragma once
// Every way a new filter reaches a running `tapstream run` ends here: `ctl
// load` (a channel, all channels, a path, a whole matrix file), `ctl reload`
// and SIGHUP, the web API's configuration and uploads, the file watcher, a
// restored state file. What runs is one RoutingMatrix (dsp/model/routing_matrix.hpp):
// the configured [filter] matrix, or, without one, the diagonal matrix of the
// configured filter per channel. A new matrix is built and validated on the
// calling (control) thread from the running one, checked against it (same
// inputs, outputs and paths: the engine swaps filters, gains, delays and
// polarities in place, with the one-block crossfade, but cannot reroute),
// then posted to the pipeline's mailbox and waited for. One that fails never
// reaches the mailbox; the running matrix keeps running, and the refusal is
// counted and explained.
//
// Where the filters come from, and what a reload re-reads:
// - A filter per channel (no [filter] matrix): each channel remembers its
//   file (the configuration's, or a `ctl load`'s) and the file's size and
//   modification time when it was read; a reload re-reads only the channels
//   whose file changed on disk or in the configuration (or all, when the
//   gain changed), and keeps `ctl load`s unless their own file changed or the
//   configuration names another file for that channel. Channel c is the path
//   c -> c: `load path c c FILE` is `load c FILE`.
// - A routing matrix: the configured matrix file, or the one a `ctl load
//   matrix` named, plus the paths whose filter a `ctl load path` replaced
//   (kept across reloads while that pair stays a path). A reload re-reads all
//   of it when any of its files changed on disk, or the gain or the
//   configured matrix file changed; a new configured matrix file drops the
//   `ctl` loads. Channel c is the path c -> c when there is one; `load all`
//   has no meaning (a matrix gives each path its own filter).
//
// Threads: the control socket's, the watcher's and the main thread call in;
// `mutex_` serialises swaps; `current_mutex_` guards what status reads
// (current matrix, configuration, watched files), so status never waits for
// a swap; the rejection count is an atomic read by anyone.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/control/load_request.hpp"
#include "daemon/pipeline/live_pipeline.hpp"
#include "dsp/model/filter_bank.hpp"
#include "dsp/model/routing_matrix.hpp"

namespace tapstream {

// The bank a configuration names (one file for all channels, or one per
// channel), with its gain applied. Files may hold up to 2^20 taps; whether
// the engine takes them is the Swapper's (or engine_max_taps') question.
FilterBank load_configured_bank(const LiveConfig& config);

// The matrix a configuration names ([filter] matrix), [filter] gain_db added
// to every path. Throws ConfigError naming the file, the path and the reason
// (a coefficient file may hold up to 2^20 taps; whether the engine takes
// them is engine_max_taps()' question).
RoutingMatrix load_configured_matrix(const LiveConfig& config);

// What a configuration runs: its [filter] matrix, or the diagonal matrix of
// its filter per channel.
RoutingMatrix load_configured_filters(const LiveConfig& config);

// The longest filter the engine is built for, from [filter] max_taps and the
// first matrix's longest path: the key's value (default_max_taps when absent,
// or the first matrix's length if that is longer; 0: the first matrix's
// length). Throws ConfigError when the first matrix is longer than an
// explicit max_taps.
std::size_t engine_max_taps(const LiveConfig& config, std::size_t first_max_taps);

class Swapper {
 public:
  // `initial` is load_configured_filters(config), running in `pipeline`.
  Swapper(LivePipeline& pipeline, const LiveConfig& config, RoutingMatrix initial);

  // Installs what `request` names. Returns "" on success, else the reason.
  std::string load(const LoadRequest& request);

  // New taps for some paths of the running matrix (the API's set_paths: taps
  // sent in the request, no file): `taps[k]` = (path index, its taps).
  // Checked against the running matrix and engine (each named path once, at
  // most the engine's max_taps, finite); the engine then transforms those
  // paths alone and crossfades them in over one block like any swap. They
  // last until a reload re-reads files (a channel's own; any of a matrix's,
  // which re-reads the whole matrix) or a restart (the state file keeps
  // files, not these). Returns "" on success, else the
  // reason naming the path; `what` names the request in logs.
  std::string set_paths(const std::vector<std::pair<std::size_t, std::vector<float>>>& taps,
                        const std::string& what);

  // SIGHUP, `ctl reload`, the web API's configuration, the watcher: takes
  // `config`'s filters and gain, re-reading only the files that changed on
  // disk or in the configuration. Returns "" on success (then `summary` says
  // what was reloaded), else the reason; the running filters and
  // configuration stay on failure.
  std::string reload(const LiveConfig& config, std::string* summary = nullptr);

  // Counts a refusal that happened elsewhere (a configuration that did not
  // load) and logs it; returns `reason`.
  std::string reject(const std::string& what, const std::string& reason);

  LiveConfig config() const;
  // The running matrix (for a filter per channel, its diagonal).
  std::shared_ptr<const RoutingMatrix> current() const;
  // Whether the daemon runs a filter per channel (no [filter] matrix).
  bool per_channel() const { return per_channel_; }
  // Where the running matrix was read from (the configured file, or a `ctl
  // load matrix`); empty for a filter per channel.
  std::filesystem::path matrix_file() const;
  // Every refusal so far: unreadable or invalid files, too many taps, no
  // such channel or path, an engine that refused or did not answer.
  std::uint64_t rejected() const { return rejected_.load(std::memory_order_relaxed); }
  // The files whose change on disk should reload (when [filter] watch is on).
  std::vector<std::filesystem::path> watched_files() const;
  // The file `configured` names at the rate in force: its "$samplerate$"
  // resolved (dsp/files/rate_file_name.hpp), the nearest rate's where that
  // rate has none; `configured` itself when it has no token or no file.
  std::filesystem::path in_force(const std::filesystem::path& configured) const;

 private:
  struct Stamp {
    std::filesystem::file_time_type modified{};
    std::uintmax_t size = 0;
    bool operator==(const Stamp&) const = default;
  };
  // A filter per channel: where channel c's filter came from.
  struct Source {
    std::filesystem::path file;
    bool from_ctl = false;  // set by `ctl load`, not by the configuration
    Stamp stamp;
  };
  using Pair = std::pair<std::size_t, std::size_t>;  // input, output
  using Stamps = std::map<std::filesystem::path, Stamp>;
  // The stamp of the file `file` names at the rate in force.
  Stamp stamp_of(const std::filesystem::path& file) const;

  std::string load_channels(const LoadRequest& request);
  std::string load_path(std::size_t input, std::size_t output, const std::filesystem::path& file);
  std::string load_matrix(const std::filesystem::path& file);
  std::string reload_channels(const LiveConfig& config, std::string* summary);
  std::string reload_matrix(const LiveConfig& config, std::string* summary);

  // Reads `file` for `config` and puts `overrides` on its paths (those whose
  // pair is no longer a path are dropped from `overrides`).
  RoutingMatrix build(const LiveConfig& config, const std::filesystem::path& file,
                      std::map<Pair, std::filesystem::path>& overrides) const;
  // Every file `matrix` (read from `file`) was made of, stamped now.
  Stamps stamps_of(const std::filesystem::path& file, const RoutingMatrix& matrix) const;
  // Checks `next` against the running matrix and engine and posts it; "" or
  // the reason. `changed`: the paths that differ from the running matrix
  // (their taps in `next`), which the engine then installs alone; empty: all.
  // Under mutex_.
  std::string install_locked(std::shared_ptr<const RoutingMatrix> next, const std::string& what,
                             const std::vector<std::size_t>& changed = {});
  // Publishes the files to watch (under mutex_).
  void set_watched_locked();

  LivePipeline& pipeline_;
  const bool per_channel_;
  // The rate in force: one for the swapper's life (a new rate is a new
  // process: docs/config.md, "Sample rate").
  const int sample_rate_;
  std::mutex mutex_;                                 // one swap at a time; guards what follows
  std::vector<Source> sources_;                      // a filter per channel
  std::filesystem::path file_;                       // a matrix: its file
  std::map<Pair, std::filesystem::path> overrides_;  // a matrix: `ctl load path`s
  Stamps stamps_;                                    // a matrix: its files
  mutable std::mutex current_mutex_;
  LiveConfig config_;  // written under both mutexes
  std::shared_ptr<const RoutingMatrix> current_;
  std::filesystem::path current_file_;          // file_, readable under current_mutex_
  std::vector<std::filesystem::path> watched_;  // under current_mutex_
  std::atomic<std::uint64_t> rejected_{0};
};

}  // namespace tapstream

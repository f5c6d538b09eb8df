#pragma once
// Every way a new routing matrix (or one path's filter) reaches a running
// `tapstream run` with [filter] matrix ends here: `ctl load path I O FILE`,
// `ctl load matrix FILE`, `ctl reload` and SIGHUP, the web API's
// configuration, the file watcher. The matrix is read and validated on the
// calling (control) thread, checked against the running one (same inputs,
// outputs and paths: the engine swaps filters, gains, delays and polarities
// in place, with the one-block crossfade, but cannot reroute), then posted to
// the pipeline's matrix mailbox and waited for. One that fails never reaches
// the mailbox; the running matrix keeps running, and the refusal is counted
// and explained.
//
// Where the matrix comes from: the configured matrix file, or the one a `ctl
// load matrix` named, plus the paths whose filter a `ctl load path` replaced
// (kept across reloads while that pair stays a path). A reload re-reads all
// of it when any of its files (the matrix file, a path's coefficient file, a
// `ctl load path` file) changed on disk, or the gain or the configured
// matrix file changed; a new configured matrix file drops the `ctl` loads.
//
// Threads: the control socket's, the watcher's and the main thread call in;
// `mutex_` serialises swaps; `current_mutex_` guards what status reads
// (current matrix, configuration), so status never waits for a swap.

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

#include "daemon/config.hpp"
#include "daemon/control/swapper.hpp"
#include "daemon/pipeline/live_pipeline.hpp"
#include "dsp/routing_matrix.hpp"

namespace tapstream {

// The matrix a configuration names ([filter] matrix), [filter] gain_db added
// to every path. Throws ConfigError naming the file, the path and the reason
// (a coefficient file may hold up to 2^20 taps; whether the engine takes
// them is engine_max_taps()' question).
RoutingMatrix load_configured_matrix(const LiveConfig& config);

class MatrixSwapper final : public Swapper {
 public:
  MatrixSwapper(LivePipeline& pipeline, const LiveConfig& config, RoutingMatrix initial);

  // `ctl load path I O FILE`: FILE (one filter) replaces the filter of the
  // path from input I to output O; its gain, delay and polarity stay. ""
  // or the reason (no such path: adding one needs a restart).
  std::string load_path(std::size_t input, std::size_t output, const std::filesystem::path& file);
  // `ctl load matrix FILE`: a whole matrix with the same paths. "" or the reason.
  std::string load_matrix(const std::filesystem::path& file);

  std::string reload(const LiveConfig& config, std::string* summary = nullptr) override;
  std::string reject(const std::string& what, const std::string& reason) override;
  LiveConfig config() const override;
  std::uint64_t rejected() const override { return rejected_.load(std::memory_order_relaxed); }
  // The matrix file and every coefficient file the running matrix was read from.
  std::vector<std::filesystem::path> watched_files() const override;

  std::shared_ptr<const RoutingMatrix> current() const;
  // Where the running matrix was read from (the configured file, or a `ctl load matrix`).
  std::filesystem::path matrix_file() const;

 private:
  struct Stamp {
    std::filesystem::file_time_type modified{};
    std::uintmax_t size = 0;
    bool operator==(const Stamp&) const = default;
  };
  using Pair = std::pair<std::size_t, std::size_t>;  // input, output
  using Stamps = std::map<std::filesystem::path, Stamp>;
  static Stamp stamp_of(const std::filesystem::path& file);

  // Reads `file` for `config` and puts `overrides` on its paths (those whose
  // pair is no longer a path are dropped from `overrides`).
  RoutingMatrix build(const LiveConfig& config, const std::filesystem::path& file,
                      std::map<Pair, std::filesystem::path>& overrides) const;
  // Every file `matrix` (read from `file`) was made of, stamped now.
  static Stamps stamps_of(const std::filesystem::path& file, const RoutingMatrix& matrix);
  // Checks `next` against the running matrix and engine and posts it; "" or the reason.
  std::string install_locked(std::shared_ptr<const RoutingMatrix> next, const std::string& what);

  LivePipeline& pipeline_;
  std::mutex mutex_;  // one swap at a time; guards what follows
  std::filesystem::path file_;
  std::map<Pair, std::filesystem::path> overrides_;  // `ctl load path`s
  Stamps stamps_;
  mutable std::mutex current_mutex_;
  LiveConfig config_;  // written under both mutexes
  std::shared_ptr<const RoutingMatrix> current_;
  std::filesystem::path current_file_;          // file_, readable under current_mutex_
  std::vector<std::filesystem::path> watched_;  // stamps_' files, under current_mutex_
  std::atomic<std::uint64_t> rejected_{0};
};

}  // namespace tapstream

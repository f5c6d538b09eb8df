#pragma once
// What the daemon asks of whichever swapper runs its filters: FilterSwapper
// (one filter per channel) or MatrixSwapper (a routing matrix). SIGHUP, `ctl
// reload`, the web API's configuration and the file watcher go through
// reload(); every refusal is counted and explained the same way.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "daemon/config.hpp"

namespace tapstream {

class Swapper {
 public:
  virtual ~Swapper() = default;

  // Takes `config`'s filters and gain, re-reading only the files that changed
  // on disk or in the configuration. Returns "" on success (then `summary`
  // says what was reloaded), else the reason; the running filters and
  // configuration stay on failure.
  virtual std::string reload(const LiveConfig& config, std::string* summary) = 0;
  // Counts a refusal that happened elsewhere (a configuration that did not
  // load) and logs it; returns `reason`.
  virtual std::string reject(const std::string& what, const std::string& reason) = 0;
  virtual LiveConfig config() const = 0;
  // Every refusal so far.
  virtual std::uint64_t rejected() const = 0;
  // The files whose change on disk should reload (when [filter] watch is on).
  virtual std::vector<std::filesystem::path> watched_files() const = 0;
};

}  // namespace tapstream

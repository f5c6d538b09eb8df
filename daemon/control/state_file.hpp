#pragma once
// The state file: what a person set at run time (volume, mute, the
// configuration applied through the API, uploaded filters) kept across
// restarts. JSON, written atomically (a temporary file in the same
// directory, fsync, rename), so a crash leaves the old state or the new one,
// never half of one. Only the control threads and the main thread use it,
// one at a time (save() takes a mutex).
//
//   {"version":1,"master":{"db":-6,"muted":false},
//    "channels":[{"db":0,"muted":false},...],
//    "config_text":"...TOML...", "filters":["/abs/left.txt","/abs/right.txt"]}

#include <cstddef>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tapstream {

class OutputStage;

struct DaemonState {
  struct Level {
    double db = 0;
    bool muted = false;
  };
  Level master;
  std::vector<Level> channels;
  std::string config_text;           // "" when no configuration was applied at run time
  std::vector<std::string> filters;  // per channel, the file it came from; empty: as configured
};

class StateFile {
 public:
  explicit StateFile(std::filesystem::path path) : path_(std::move(path)) {}
  const std::filesystem::path& path() const { return path_; }

  // The saved state, nullopt when there is no file yet. Throws
  // std::runtime_error naming the file when it cannot be read or parsed.
  std::optional<DaemonState> load() const;
  // Writes atomically; throws std::runtime_error naming the file.
  void save(const DaemonState& state);

 private:
  std::filesystem::path path_;
  std::mutex mutex_;
};

// Volume and mute of `stage` as state, and back (channels beyond the
// stage's are ignored).
DaemonState::Level level_of(const OutputStage& stage, std::optional<std::size_t> channel);
void apply_levels(const DaemonState& state, OutputStage& stage);

}  // namespace tapstream

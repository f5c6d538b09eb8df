#pragma once
// Watches filter files on disk (inotify) and reports a file once it has been
// completely rewritten, so that the daemon can reload it.
//
// It watches the files' directories rather than the files, so that a file
// replaced by rename (how editors and `tapstream design` save) is seen, and
// reports a file only after IN_CLOSE_WRITE (a writer closed it) or
// IN_MOVED_TO (a finished file was renamed onto it): a file still being
// written is never reported. Events for one file within `debounce` of each
// other are merged into one report, sent `debounce` after the last of them.
//
// Threads: the watcher runs one thread of its own; `on_change` is called on
// it, one call at a time. start() and stop() are called by the owner's thread.

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "daemon/control/stop_pipe.hpp"

namespace tapstream {

class FileWatcherError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class FileWatcher {
 public:
  using Callback = std::function<void(const std::filesystem::path& file)>;

  // `files` are made absolute; their directories must exist.
  FileWatcher(std::vector<std::filesystem::path> files, Callback on_change,
              std::chrono::milliseconds debounce = std::chrono::milliseconds(200));
  ~FileWatcher();  // stop()
  FileWatcher(const FileWatcher&) = delete;
  FileWatcher& operator=(const FileWatcher&) = delete;

  // Sets up the watches and starts the thread. Throws FileWatcherError naming
  // the directory that cannot be watched.
  void start();
  // Stops the thread; pending (debounced) reports are dropped. Safe to call twice.
  void stop();

  const std::vector<std::filesystem::path>& files() const { return files_; }

 private:
  void watch_loop();

  std::vector<std::filesystem::path> files_;
  Callback on_change_;
  std::chrono::milliseconds debounce_;
  int inotify_fd_ = -1;
  std::optional<StopPipe> stop_pipe_;                           // while the thread runs
  std::vector<std::pair<int, std::filesystem::path>> watches_;  // descriptor, directory
  std::thread thread_;
};

}  // namespace tapstream

#include "daemon/control/file_watcher.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "dsp/realtime/thread_role.hpp"

namespace tapstream {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

FileWatcher::FileWatcher(std::vector<fs::path> files, Callback on_change,
                         std::chrono::milliseconds debounce)
    : on_change_(std::move(on_change)), debounce_(debounce) {
  for (auto& file : files) {
    fs::path absolute = fs::absolute(file).lexically_normal();
    if (std::find(files_.begin(), files_.end(), absolute) == files_.end()) {
      files_.push_back(std::move(absolute));
    }
  }
}

FileWatcher::~FileWatcher() {
  stop();
}

void FileWatcher::start() {
  if (thread_.joinable()) return;
  inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ < 0) {
    throw FileWatcherError(std::string("inotify_init1: ") + std::strerror(errno));
  }
  try {
    for (const auto& file : files_) {
      const fs::path directory = file.parent_path();
      const int wd = ::inotify_add_watch(inotify_fd_, directory.c_str(),
                                         IN_CLOSE_WRITE | IN_MOVED_TO | IN_ONLYDIR);
      if (wd < 0) {
        throw FileWatcherError("cannot watch directory " + directory.string() + " (for " +
                               file.filename().string() + "): " + std::strerror(errno));
      }
      // The same directory gives the same descriptor; keep one entry.
      const bool known = std::any_of(watches_.begin(), watches_.end(),
                                     [wd](const auto& watch) { return watch.first == wd; });
      if (!known) watches_.emplace_back(wd, directory);
    }
    try {
      stop_pipe_.emplace();
    } catch (const std::system_error& e) {
      throw FileWatcherError(e.what());
    }
  } catch (...) {
    stop();
    throw;
  }
  thread_ = std::thread([this] {
    name_this_thread("ts-watch");
    make_this_thread_background();
    watch_loop();
  });
}

void FileWatcher::stop() {
  if (thread_.joinable()) {
    stop_pipe_->notify();
    thread_.join();
  }
  stop_pipe_.reset();
  if (inotify_fd_ >= 0) ::close(inotify_fd_);  // also removes the watches
  inotify_fd_ = -1;
  watches_.clear();
}

void FileWatcher::watch_loop() {
  std::map<fs::path, Clock::time_point> pending;  // file -> when to report it
  alignas(inotify_event) char buffer[16 * (sizeof(inotify_event) + NAME_MAX + 1)];

  while (true) {
    int timeout_ms = -1;
    if (!pending.empty()) {
      auto earliest = Clock::time_point::max();
      for (const auto& [file, due] : pending) earliest = std::min(earliest, due);
      const auto wait = std::chrono::ceil<std::chrono::milliseconds>(earliest - Clock::now());
      timeout_ms = static_cast<int>(std::max<std::chrono::milliseconds::rep>(wait.count(), 0));
    }
    pollfd fds[2] = {{stop_pipe_->read_fd(), POLLIN, 0}, {inotify_fd_, POLLIN, 0}};
    const int ready = ::poll(fds, 2, timeout_ms);
    if (ready < 0 && errno != EINTR) {
      spdlog::error("file watcher: poll: {}; no longer watching filter files",
                    std::strerror(errno));
      return;
    }
    if (ready > 0 && fds[0].revents != 0) return;  // stop()

    if (ready > 0 && (fds[1].revents & POLLIN)) {
      while (true) {
        const ssize_t length = ::read(inotify_fd_, buffer, sizeof buffer);
        if (length <= 0) break;  // EAGAIN: drained
        for (ssize_t offset = 0; offset < length;) {
          const auto* event = reinterpret_cast<const inotify_event*>(buffer + offset);
          offset += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
          if (event->mask & IN_Q_OVERFLOW) {
            // Events were lost: treat every file as possibly changed.
            for (const auto& file : files_) pending[file] = Clock::now() + debounce_;
            continue;
          }
          if (event->len == 0 || !(event->mask & (IN_CLOSE_WRITE | IN_MOVED_TO))) continue;
          const auto watch = std::find_if(watches_.begin(), watches_.end(),
                                          [&](const auto& w) { return w.first == event->wd; });
          if (watch == watches_.end()) continue;
          const fs::path file = watch->second / event->name;
          if (std::find(files_.begin(), files_.end(), file) != files_.end()) {
            pending[file] = Clock::now() + debounce_;  // a later event restarts the wait
          }
        }
      }
    }

    const auto now = Clock::now();
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->second <= now) {
        const fs::path file = it->first;
        it = pending.erase(it);
        try {
          on_change_(file);
        } catch (const std::exception& e) {
          spdlog::error("file watcher: reloading {}: {}", file.string(), e.what());
        }
      } else {
        ++it;
      }
    }
  }
}

}  // namespace tapstream

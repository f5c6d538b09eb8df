#pragma once
// Test support for the suites that run the tapstream binary or other programs
// as child processes: a private temporary directory, a child process with its
// output in files, reading a whole file back, and waiting until a daemon is
// ready.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "tests/wait_for.hpp"

extern char** environ;

namespace tapstream::testing {

// The whole file ("" if it cannot be read).
inline std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A fresh directory (mode 0700, from mkdtemp) under the system's temporary
// directory, named `prefix`-XXXXXX; removed with its contents at the end.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "tapstream-test") {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A child process with stdout/stderr in files; killed (SIGTERM, then
// SIGKILL) by the destructor if still running.
class Child {
 public:
  using Clock = std::chrono::steady_clock;

  Child(const std::vector<std::string>& argv, const std::filesystem::path& out,
        const std::filesystem::path& err) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Child() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    if (wait_for(std::chrono::seconds(5)) == -2) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool started() const { return pid_ > 0; }
  // The process id while it runs (-1 once it has been waited for).
  pid_t pid() const { return pid_; }
  // Nothing once it has been waited for: kill(-1, sig) would signal every
  // process the user may signal (the test runner, CI, the shell).
  void signal(int sig) const {
    if (pid_ > 0) kill(pid_, sig);
  }
  bool running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == 0) return true;
    exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    pid_ = -1;
    return false;
  }
  // The exit status, or -2 if still running after `timeout`.
  int wait_for(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (running()) {
      if (Clock::now() > deadline) return -2;
      // Polling for the exit (the condition), with `timeout` as its deadline.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return exit_status_;
  }

 private:
  pid_t pid_ = -1;
  int exit_status_ = -1;
};

// Waits until the daemon `daemon` is ready (`ready()`: its log says what the
// test needs); fails at once when it exits, and at the long deadline, with
// its log `log` (its stderr).
template <class Ready>
::testing::AssertionResult wait_for_daemon(Child& daemon, Ready&& ready,
                                           const std::filesystem::path& log) {
  if (!daemon.started()) return ::testing::AssertionFailure() << "the daemon did not start";
  bool exited = false;
  auto waited = wait_until(
      long_wait,
      [&] {
        exited = !daemon.running();
        return exited || ready();
      },
      [&] { return read_text(log); });
  if (!waited) return waited;
  if (exited) return ::testing::AssertionFailure() << "the daemon exited: " << read_text(log);
  return ::testing::AssertionSuccess();
}

}  // namespace tapstream::testing

#pragma once
// Test support for the suites that run `tapstream run` against a JACK server
// of their own (jack_end_to_end_test, daemon_load_test): child processes with
// their output in files, JACK clients of a named server, port look-up, and
// whether PortAudio can reach JACK at all.

#include <fcntl.h>
#include <jack/jack.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/audio_device.hpp"

extern char** environ;

namespace tapstream::testing {

inline std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

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
  void signal(int sig) const { kill(pid_, sig); }
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
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return exit_status_;
  }

 private:
  pid_t pid_ = -1;
  int exit_status_ = -1;
};

// A client of the named server; never starts a server of its own.
inline jack_client_t* open_client(const char* name, const std::string& server) {
  jack_status_t status{};
  return jack_client_open(name, static_cast<jack_options_t>(JackNoStartServer | JackServerName),
                          &status, server.c_str());
}

inline std::vector<std::string> find_ports(jack_client_t* client, const char* pattern,
                                           unsigned long flags) {
  std::vector<std::string> names;
  const char** ports = jack_get_ports(client, pattern, JACK_DEFAULT_AUDIO_TYPE, flags);
  if (ports == nullptr) return names;
  for (const char** p = ports; *p != nullptr; ++p) names.emplace_back(*p);
  jack_free(ports);
  return names;
}

// Whether this PortAudio build can reach a JACK server (it lists the JACK
// host API only while one runs, so ask with the server up).
inline bool portaudio_reaches_jack() {
  PortAudioLibrary library;
  for (const auto& device : list_audio_devices()) {
    if (device.host_api.find("JACK") != std::string::npos) return true;
  }
  return false;
}

}  // namespace tapstream::testing

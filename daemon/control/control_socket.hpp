#pragma once
// The control socket of `tapstream run`: a Unix domain socket that only its
// owner can reach (socket mode 0600 in a directory of mode 0700 owned by the
// user, peers checked with SO_PEERCRED), speaking the daemon's one request
// model, the JSON API of daemon/control/control_api.hpp (docs/api.md): one
// JSON request per line, one JSON reply per line.
//
//   {"id":1,"request":"get_status"}   -> {"id":1,"request":"get_status","ok":true,"result":{...}}
//   {"request":"load","channel":0,"file":"/abs/f.txt"}   (the owner's requests: load, reload, stop)
//
// `tapstream ctl` writes these requests from its text commands (`ctl status`,
// `ctl load 0 FILE`, ...: daemon/control/ctl_request.hpp). A line that is not
// a JSON object, or the retired {"command": ...} form, gets a bad_request
// error naming the JSON form; so do lines longer than
// max_control_request_bytes (the websocket's bound), which also close the
// connection. A client cannot crash the server or touch the audio path: the
// server only calls its answer function, on its own thread.
//
// Who may do what: only the owner reaches the socket, so the daemon answers
// its requests as the owner's (ApiSession::owner): its `load` may name any
// file, as the owner could in the configuration file.
//
// Threads: the server runs one thread of its own (poll() over the listening
// socket, the clients and a stop pipe); the answer function runs on that
// thread. start() and stop() are called by the thread that owns the
// ControlServer.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "daemon/control/request_size.hpp"
#include "daemon/control/stop_pipe.hpp"

namespace tapstream {

class ControlSocketError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Answers one JSON request line with one JSON reply line (the daemon's
// ControlApi::handle, with the owner's session).
using ControlAnswer = std::function<std::string(std::string_view request)>;

class ControlServer {
 public:
  static constexpr std::size_t max_request_bytes = max_control_request_bytes;
  static constexpr std::size_t max_clients = 16;

  ControlServer(std::filesystem::path socket_path, ControlAnswer answer);
  ~ControlServer();  // stop()
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Makes the directory (0700) if missing, refuses one that others can write
  // or that someone else owns, replaces a stale socket file (refuses when a
  // server answers on it, or when the path is not a socket), binds the socket
  // (0600), and starts the server thread. Throws ControlSocketError.
  void start();
  // Stops the thread, closes every connection and removes the socket file.
  // Safe to call twice.
  void stop();

  const std::filesystem::path& path() const { return path_; }

  // Answers one request line (without its newline); used by the server
  // thread, public for tests.
  std::string handle_request(std::string_view line) const;

 private:
  void serve();

  std::filesystem::path path_;
  ControlAnswer answer_;
  int listen_fd_ = -1;
  std::optional<StopPipe> stop_pipe_;  // while the server thread runs
  std::thread thread_;
};

// Sends one request line to the server at `socket_path` and returns its reply
// line (without the newline). Throws ControlSocketError when the server cannot
// be reached or does not answer within `timeout`.
std::string control_request(const std::filesystem::path& socket_path, std::string_view request,
                            std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace tapstream

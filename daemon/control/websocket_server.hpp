#pragma once
// The websocket API and the browser page of `tapstream run` ([web] in the
// configuration; docs/api.md): one HTTP endpoint that serves the page's
// static files and upgrades /ws to a websocket speaking the ControlApi
// request model, with meters pushed to subscribers.
//
// Protection: bound to 127.0.0.1 unless configured otherwise, and then
// (config.cpp insists) with a token that /ws requests must carry
// (?token=... or "Authorization: Bearer ..."), compared in constant time;
// every request must name this server (Host and Origin: localhost,
// 127.0.0.1, [::1] or [web] hosts, the server's port), which defeats DNS
// rebinding and cross-site pages; only the page's own files are served,
// streamed (http_request_policy.hpp, page_file.hpp); requests over 16 KiB of
// header, messages over max_message_bytes, more than
// max_messages_per_second, a client whose unsent replies pile up, more than
// max_clients websocket clients or max_connections connections are cut off.
// Every refusal is logged, with the client's names made printable.
// None of that reaches the audio: the server runs on its own thread and only
// calls ControlApi, which talks to the audio thread through atomics and the
// filter mailbox.
//
// Threads: one thread runs all connections (Boost.Asio's io_context);
// start() and stop() are called by the thread that owns the server. The
// Boost headers stay in websocket_server.cpp.

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/control/request_size.hpp"

namespace tapstream {

class ControlApi;

struct WebsocketServerOptions {
  std::string address = "127.0.0.1";
  int port = 0;                    // 0: any free port (see port())
  std::string token;               // "" = none asked
  std::filesystem::path web_root;  // static files; "" = none served
  // Host names besides localhost, 127.0.0.1 and [::1] that requests may
  // carry ([web] hosts; http_request_policy.hpp).
  std::vector<std::string> hosts;
  std::size_t max_clients = 128;  // websocket clients
  // Connections of any kind held at once (fewer if half the process's file
  // descriptors are fewer); more are closed as they come.
  std::size_t max_connections = 256;
  std::size_t max_message_bytes = max_control_request_bytes;  // the socket's bound too
  double max_messages_per_second = 100;  // sustained; bursts of twice that pass
  // A client that sends nothing for half of this is pinged; one that has not
  // answered (a pong counts) by the whole of it is gone and is closed.
  std::chrono::seconds idle_timeout{60};
};

class WebsocketServerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class WebsocketServer {
 public:
  WebsocketServer(WebsocketServerOptions options, ControlApi& api);
  ~WebsocketServer();  // stop()
  WebsocketServer(const WebsocketServer&) = delete;
  WebsocketServer& operator=(const WebsocketServer&) = delete;

  // Binds and starts the server thread; throws WebsocketServerError.
  void start();
  // Closes every connection and joins the thread. Safe to call twice.
  void stop();
  // The bound port (the chosen one when options.port was 0).
  int port() const;

  struct Impl;  // in websocket_server.cpp, with the Boost headers

 private:
  std::unique_ptr<Impl> impl_;
};

// True when both strings are equal, in a time that depends only on their
// lengths (for tokens).
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace tapstream

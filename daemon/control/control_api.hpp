#pragma once
// The one request model of the daemon's control plane: JSON requests, JSON
// replies with typed errors, answered the same way for a websocket client
// (daemon/control/websocket_server.hpp) and for a JSON line on the Unix
// control socket (daemon/control/control_socket.hpp). docs/api.md lists
// every request with an example.
//
//   {"id": 7, "request": "set_volume", "channel": "master", "db": -6}
//   -> {"id": 7, "ok": true, "result": {...}}
//   -> {"id": 7, "ok": false, "error": {"type": "invalid_value", "message": "..."}}
//
// Threads: handle() runs on control threads (the websocket server's and the
// control socket's); the shared state it changes is behind `mutex_` (config
// history, stop reason) or is itself thread-safe (OutputStage targets and
// meters, LivePipeline::stats(), the hooks, which serialise filter swaps).
// Nothing here touches the audio thread but through OutputStage's atomics
// and the filter mailbox.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/control/daemon_status.hpp"
#include "daemon/control/load_request.hpp"
#include "dsp/model/routing_matrix.hpp"
#include "dsp/realtime/output_stage.hpp"

namespace tapstream {

class LivePipeline;

// The error types a reply may carry (the "type" of its "error").
enum class ApiErrorType {
  bad_request,      // not JSON, not an object, a field missing or of the wrong type
  unknown_request,  // "request" names nothing known
  invalid_value,    // a field's value is out of range (channel, volume, interval)
  rejected,         // a filter or configuration failed validation; the running one stays
  not_allowed,      // e.g. a subscription over the Unix socket, `stop` over the websocket
  internal,
};
const char* to_string(ApiErrorType type);

class ApiError : public std::runtime_error {
 public:
  ApiError(ApiErrorType type, const std::string& message)
      : std::runtime_error(message), type_(type) {}
  ApiErrorType type() const { return type_; }

 private:
  ApiErrorType type_;
};

// What the daemon does for the API that the pipeline alone cannot.
struct ApiHooks {
  // The running routing matrix (a filter per channel: its diagonal, path c
  // on channel c).
  std::function<std::shared_ptr<const RoutingMatrix>()> matrix;
  // Loads what `request` names, validates and swaps it in; returns "" or the
  // reason it was refused.
  std::function<std::string(const LoadRequest& request)> load;
  // New taps for some paths (index, taps), sent in a set_paths request
  // (Swapper::set_paths); returns "" or the reason it was refused.
  std::function<std::string(const std::vector<std::pair<std::size_t, std::vector<float>>>& taps,
                            const std::string& what)>
      set_paths;
  // The running configuration, and its replacement (its reload keys are
  // taken, daemon/config/config_keys.hpp; returns "" or the reason; the keys whose
  // change waits for a restart are named in `restart_needed`, what the
  // filters did in `summary`).
  std::function<LiveConfig()> config;
  std::function<std::string(const LiveConfig&, std::vector<std::string>& restart_needed,
                            std::string& summary)>
      apply_config;
  // What the next start would refuse in a configuration ("" when nothing):
  // its filters are loaded and checked as a start checks them, so that the
  // API never stores a configuration that makes the next start fail.
  std::function<std::string(const LiveConfig&)> check_start;
  // Recent log lines, oldest first.
  std::function<std::vector<std::string>(std::size_t limit)> log;
  // Called after every change that the state file keeps.
  std::function<void()> state_changed;
  // The daemon's status (daemon/control/daemon_status.hpp): get_status.
  std::function<DaemonStatus()> status;
  // The owner's requests (ApiSession::owner): reads the configuration file
  // again as SIGHUP does, returning what it did or throwing with the reason;
  // asks the daemon to stop cleanly, returning a message.
  std::function<std::string()> reload;
  std::function<std::string()> stop;
};

// One client's place: its meter cursor and subscription.
struct ApiSession {
  MeterCursor meters;
  std::optional<std::chrono::milliseconds> meter_interval;  // subscribed when set
  bool can_subscribe = true;
  // The control socket's client, whom only the owner can be: may `load` any
  // file (as the configuration file may name it), `reload` and `stop`. A
  // websocket client is not: those requests get not_allowed there.
  bool owner = false;
};

// What the API may change (docs/api.md, "What the API may change"): volume,
// mute and gains up to [control] max_gain_db (0 dB unless the configuration
// file raises it); filters it uploaded (at most [control] max_upload_files
// and max_upload_mib kept, the oldest one not in use removed to make room)
// or files inside the configuration file's folder (symlinks resolved); the
// configuration's reload and restart keys. The file-only keys (where audio
// comes from and goes to, what listens, which files the daemon writes) are
// refused by name. No reply quotes a file that the API did not upload.
class ControlApi {
 public:
  static constexpr std::size_t max_upload_bytes = 8 << 20;
  static constexpr auto min_meter_interval = std::chrono::milliseconds(20);

  // `upload_dir` receives uploaded coefficient files (made when needed).
  ControlApi(LivePipeline& pipeline, ApiHooks hooks, std::filesystem::path upload_dir);
  ~ControlApi();

  // Answers one request (JSON text); never throws.
  std::string handle(std::string_view request, ApiSession& session);
  // Answers a binary websocket frame: a 4-byte little-endian length H, H
  // bytes of JSON request, then data for it (set_paths' taps, little-endian
  // float32); never throws.
  std::string handle_binary(std::string_view message, ApiSession& session);
  // The meters a subscription pushes (daemon/control/meter_fanout.hpp).
  const OutputStage& output_stage() const;
  // The config text the API applied last (empty when none: the file's holds).
  std::string applied_config_text() const;
  // Replaces hooks.state_changed; call before any request is handled.
  void set_state_changed(std::function<void()> changed);
  // Makes `text` the applied configuration (restored from the state file).
  void remember_applied_config(std::string text);
  // Sets what get_state reports as the reason the daemon stops.
  void set_stop_reason(const std::string& reason);

  // Validates configuration text against the running daemon; returns every
  // problem found (empty: valid). Public for tests and the state file.
  std::vector<std::string> validate_config(const std::string& text,
                                           std::optional<LiveConfig>* parsed = nullptr) const;

 private:
  std::string handle(std::string_view request, ApiSession& session, std::string_view binary,
                     const std::string& framing_error = {});

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tapstream

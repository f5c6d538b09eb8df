#pragma once
// The control socket of `tapstream run`: a Unix domain socket that only its
// owner can reach (socket mode 0600 in a directory of mode 0700 owned by the
// user, peers checked with SO_PEERCRED), speaking one line of text per
// request and one line of JSON per reply:
//
//   status                -> {"ok":true,"backend":"cpu",...}            (see DaemonStatus)
//   load CHANNEL FILE     -> {"ok":true,"message":"..."} or {"ok":false,"error":"..."}
//   load all FILE            FILE is an absolute path (the rest of the line, spaces allowed);
//                            CHANNEL counts from 0.
//   load path I O FILE    -> FILE replaces the filter of the path from input I to
//                            output O (from 0); with a filter per channel, the paths are
//                            C -> C (load path C C FILE is load C FILE)
//   load matrix FILE      -> with a routing matrix: a whole matrix file with the same paths
//   reload                -> reads the configuration again, as SIGHUP does
//   stop                  -> stops the daemon cleanly (exit status 0)
//
// A request may also be one JSON object on one line, with the same meaning:
//   {"command":"status"}
//   {"command":"load","channel":0,"file":"/abs/f.txt"}    ("channel":"all" for all)
//   {"command":"load","input":0,"output":1,"file":"/abs/f.txt"}   (load path)
//   {"command":"load","matrix":"/abs/m.toml"}                   (load matrix)
//
// Anything else (unknown or malformed requests, lines longer than
// max_control_request_bytes, the websocket's bound) gets
// {"ok":false,"error":"..."}; a client cannot crash the server or touch the
// audio path: the server only calls the handlers below, on its own thread.
//
// Who may do what: only the owner reaches the socket, so the text requests
// (load, reload, stop) may name any file, as the owner could in the
// configuration file. A JSON request of the shared model ({"request": ...})
// gets exactly what the websocket gets (daemon/control/control_api.hpp): one
// model, one set of rules.
//
// Threads: the server runs one thread of its own (poll() over the listening
// socket, the clients and a stop pipe); the handlers run on that thread.
// start() and stop() are called by the thread that owns the ControlServer.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "daemon/control/load_request.hpp"
#include "daemon/control/request_size.hpp"
#include "daemon/control/stop_pipe.hpp"
#include "dsp/latency_stats.hpp"

namespace tapstream {

class ControlSocketError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What `status` reports; filled by the daemon's status handler. One document
// for both kinds of daemon: a filter per channel is the diagonal matrix, its
// paths C -> C. Its JSON has `inputs`, `outputs` and `matrix` {`file` (empty
// for a filter per channel), `paths`}, and `filters`, the same paths each
// with its index as `channel` (the key a filter per channel always had).
struct DaemonStatus {
  struct Path {  // one path of the running matrix
    std::size_t input = 0;
    std::size_t output = 0;
    std::string file;      // where its taps came from ("lp.txt", "ir.wav channel 2")
    std::size_t taps = 0;  // its filter's, without the delay
    double gain_db = 0.0;  // [filter] gain_db included
    std::size_t delay_frames = 0;
    bool invert = false;
  };
  std::string backend;       // engine name: "cpu", "cuda"
  std::string engine;        // engine description (algorithm)
  std::string input_device;  // EndpointConfig::describe() or the device's name
  std::string output_device;
  int sample_rate = 0;
  std::size_t block_frames = 0;
  std::size_t channels = 0;        // the output's
  std::size_t input_channels = 0;  // differs from channels only with a matrix
  std::size_t latency_frames = 0;  // input-to-output latency the daemon adds
  std::string latency_mode;        // "buffered" or "zero"
  std::string matrix_file;         // with a routing matrix: its file (else empty)
  std::vector<Path> paths;         // the running paths (a filter per channel: C -> C)
  std::uint64_t blocks = 0;
  std::uint64_t underruns = 0;
  std::uint64_t overruns = 0;
  std::uint64_t late_periods = 0;      // zero mode: periods whose output missed the deadline
  std::uint64_t late_unstarted = 0;    // of those, not yet begun by the engine thread
  std::uint64_t nonfinite_inputs = 0;  // NaN or infinite input samples, given to the engine as 0
  std::uint64_t swaps = 0;
  std::uint64_t rejected_swaps = 0;
  double uptime_s = 0;
  LatencyStats::Summary processing;  // engine time per block
};

// The one-line JSON of a status reply, starting with "ok":true.
std::string status_to_json(const DaemonStatus& status);

struct ControlHandlers {
  // Returns the current status.
  std::function<DaemonStatus()> status;
  // Every form of `load` (a channel, all, a path, a matrix): validates and
  // swaps in what `request` names; returns a one-line message for the reply.
  // Throws a std::exception whose what() is the reason for a rejection
  // (including a request this kind of daemon does not take).
  std::function<std::string(const LoadRequest& request)> load;
  // Reads the configuration again (as SIGHUP); returns what it did, throws
  // with the reason.
  std::function<std::string()> reload;
  // Asks the daemon to stop cleanly (drain, close); returns a message.
  std::function<std::string()> stop;
  // Answers a request line that starts with '{': the JSON request model of
  // daemon/control/control_api.hpp, shared with the websocket API.
  std::function<std::string(std::string_view line)> json;
};

class ControlServer {
 public:
  static constexpr std::size_t max_request_bytes = max_control_request_bytes;
  static constexpr std::size_t max_clients = 16;

  ControlServer(std::filesystem::path socket_path, ControlHandlers handlers);
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
  ControlHandlers handlers_;
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

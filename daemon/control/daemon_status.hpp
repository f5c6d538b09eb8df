#pragma once
// The daemon's one status document: what the API's get_status answers on the
// control socket and the websocket (`tapstream ctl status` prints it with
// "ok":true in front), and what get_state, get_info and get_stats show parts
// of. One document for both kinds of daemon: a filter per channel is the
// diagonal matrix, its paths C -> C.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/control/json.hpp"
#include "dsp/realtime/latency_stats.hpp"

namespace tapstream {

// What the daemon knows of itself; filled by the daemon's status hook. Its
// JSON has `inputs`, `outputs` and `matrix` {`file` (empty for a filter per
// channel), `paths`}, and `filters`, the same paths each with its index as
// `channel` (the key a filter per channel always had).
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
  int sample_rate = 0;               // the rate in force (filters are read for it)
  std::string sample_rate_from;      // "device" (sample_rate = "device") or "configuration"
  std::size_t block_frames = 0;      // frames per engine call (a re-plan follows the period)
  std::size_t period_frames = 0;     // the device's period (0: no device, or not yet called)
  std::uint64_t period_changes = 0;  // device periods that changed while running
  std::uint64_t replans = 0;         // engines re-planned for a new period
  std::size_t channels = 0;          // the output's
  std::size_t input_channels = 0;    // differs from channels only with a matrix
  std::size_t latency_frames = 0;    // input-to-output latency the daemon adds
  std::string latency_mode;          // "buffered" or "zero"
  std::string matrix_file;           // with a routing matrix: its file in use (else empty)
  std::vector<Path> paths;           // the running paths (a filter per channel: C -> C)
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
  // The device callback's thread (LivePipeline::callback_scheduling) and
  // whether the process's memory is locked (dsp/realtime/memory_lock.hpp).
  int callback_thread = 0;           // its thread id; 0: no callback yet (or file endpoints)
  int callback_priority = 0;         // SCHED_FIFO/RR priority; 0: normal
  bool callback_raised = false;      // raised by tapstream (the engine runs in it)
  std::string callback_raise_error;  // why raising it was refused; empty: not refused
  bool memory_locked = false;
};

// The status document of `status` (an object, without "ok").
Json status_document(const DaemonStatus& status);

}  // namespace tapstream

#pragma once
// The live daemon's configuration: a TOML file (see config/live-default.toml
// for every key with its default). Everything is checked when the file is
// loaded, so that `tapstream run` fails at start, with the key, the value and
// the reason, rather than minutes later in the audio path.
//
//   sample_rate = 48000 | "device"  # Hz, or the rate the device (JACK server) runs at, followed
//   block_frames = 256           # frames per engine block
//   channels = 2
//   ring_margin_frames = 256     # safety margin of the I/O rings, frames
//   latency = "buffered" | "zero"  # zero: each period's output in its own callback
//   [input]   device = "default" | "name" | index    or   file = "in.wav", realtime = true
//   [output]  device = "default" | "name" | index    or   file = "out.wav"
//   [filter]  file = "f.txt"  or  files = ["left.txt", "right.txt"]  or  matrix = "m.toml"
//             gain_db = 0.0, watch = true, max_taps = 2048, ignore_sample_rate = false,
//             resample = true   ("$samplerate$" in any file name: the rate in force)
//   [engine]  backend = "auto"|"cpu"|"cuda", algorithm = "auto"|"direct"|"fft",
//             streams = 2, kernel = "auto", device = 0 (or devices = "all" / [0, 1]), spin_us = 0
//   [control] socket = "/run/user/1000/tapstream/control.sock"   ("" = no socket),
//             max_gain_db = 0.0, max_upload_files = 16, max_upload_mib = 64
//   [web]     port = 0, address = "127.0.0.1", token = "", root = "", idle_timeout_s = 60,
//             requests_per_second = 100, hosts = []   (names besides localhost, 127.0.0.1, [::1] that clients may use)
//   [state]   file = ""
//   [jack]    client_name = "tapstream", autoconnect = true,
//             connect_inputs / connect_outputs = "none" | "pattern" | ["one per channel", ...]
//   [log]     level = "info", file = ""
//
// Relative paths are resolved against the directory of the configuration file.

#include <spdlog/common.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/engine_factory.hpp"
#include "daemon/io/jack_connections.hpp"
#include "daemon/pipeline/latency_mode.hpp"
#include "dsp/model/engine.hpp"

namespace tapstream {

// Every problem with a configuration; what() is one line naming the file, the
// key, the value and the reason, e.g.
// "live.toml: block_frames = 0: must be between 1 and 65536".
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where audio comes from or goes to: a PortAudio device or a sound file.
struct EndpointConfig {
  // A sound file instead of a device (absolute). Empty: use a device.
  std::filesystem::path file;
  // The device by name (exact PortAudio name) when not empty...
  std::string device_name;
  // ...else by PortAudio index when >= 0, else the host's default device.
  int device_index = -1;
  // Input files only: deliver the file at the sample rate, as a device would
  // (false: as fast as the pipeline takes it).
  bool realtime = true;

  bool is_file() const { return !file.empty(); }
  bool is_default_device() const { return file.empty() && device_name.empty() && device_index < 0; }
  // "default device", "device 'hw:0'", "device #3" or "file /x/in.wav", for logs and status.
  std::string describe() const;
};

// The longest filter a swap may bring when [filter] max_taps is not given:
// 43 ms at 48 kHz, four times the shipped filters; a live engine built for
// more taps does more work per block, and only a restart changes it.
inline constexpr std::size_t default_max_taps = 2048;

struct LiveConfig {
  std::filesystem::path config_file;  // where this came from (empty when parsed from text)

  // The rate in force: the configured one, or with sample_rate = "device"
  // the device's once it is known (run_command sets it; 48000 until then).
  int sample_rate = 48000;
  // sample_rate = "device": take the rate the device or JACK server runs at,
  // and follow it when it changes (docs/config.md, "Sample rate").
  bool sample_rate_from_device = false;
  std::size_t block_frames = 256;
  // The output's channels, and the input's too but with a matrix (whose
  // file gives both: `channels` is then its outputs).
  std::size_t channels = 2;
  std::size_t ring_margin_frames = 256;  // buffered mode only
  LatencyMode latency = LatencyMode::buffered;

  EndpointConfig input;
  EndpointConfig output;

  // One file for all channels, or one per channel (absolute paths), or...
  // Each may hold "$samplerate$" (dsp/files/rate_file_name.hpp): resolved for
  // the rate in force whenever filters are read, never here.
  std::vector<std::filesystem::path> filter_files;
  // ...a routing matrix: [filter] matrix, the file `process --matrix` takes
  // (absolute); its paths are read by load_configured_matrix().
  std::filesystem::path matrix_file;
  std::size_t matrix_inputs = 0;  // the matrix file's inputs (its outputs are `channels`)
  double gain_db = 0.0;
  bool watch_filters = true;
  bool ignore_filter_sample_rate = false;
  // [filter] resample: a filter made for another rate (a header that says so,
  // or the nearest rate's "$samplerate$" file where the rate in force has
  // none) is resampled with libsoxr; false refuses it, naming what is missing.
  bool resample_filters = true;

  Backend backend = Backend::automatic;
  // max_block_frames is block_frames; max_taps is [filter] max_taps when
  // given (0: the first bank's length, so a later swap to a longer filter is
  // refused), else default_max_taps or the first bank's length if longer.
  EngineOptions engine;
  bool max_taps_given = false;
  // [engine] devices: the GPUs the matrix's outputs are sharded over (one
  // engine each; resolved against the GPUs there are when the engine is
  // made: engine_devices). Empty (not set): engine.device alone.
  DeviceList devices;
  // zero mode, engine thread's hand-off (CUDA, matrix): LivePipelineOptions::engine_spin.
  std::chrono::microseconds engine_spin{0};

  std::filesystem::path control_socket;  // empty: no control socket
  // What the control API (websocket, and JSON requests on the socket) may
  // do; only the configuration file sets these (daemon/config/config_keys.hpp):
  // the highest volume or gain it may set...
  double api_max_gain_db = 0.0;
  // ...and how many filters it may keep uploaded, in files and bytes (the
  // oldest one not in use makes room for a new one).
  std::size_t api_max_upload_files = 16;
  std::size_t api_max_upload_bytes = std::size_t{64} << 20;
  // The websocket API and browser page (daemon/control/websocket_server.hpp).
  int web_port = 0;  // 0: off
  std::string web_address = "127.0.0.1";
  std::string web_token;                      // required from clients when not on loopback
  std::filesystem::path web_root;             // static files of the page; empty: the installed ones
  std::chrono::seconds web_idle_timeout{60};  // a silent client is pinged at half of it
  int web_requests_per_second = 100;          // sustained, per client; bursts of twice that pass
  // Host names requests may carry besides localhost, 127.0.0.1 and [::1]
  // (lower case; a name, an IPv4 address or a bracketed IPv6 address).
  std::vector<std::string> web_hosts;
  std::filesystem::path state_file;  // volume, mute, filters kept across restarts; empty: none
  JackConfig jack;                   // the client's name and connections under JACK
  spdlog::level::level_enum log_level = spdlog::level::info;
  std::filesystem::path log_file;  // empty: log to stderr only

  bool has_matrix() const { return !matrix_file.empty(); }
  std::size_t input_channels() const { return has_matrix() ? matrix_inputs : channels; }
  std::size_t output_channels() const { return channels; }

  // The filter file of `channel` (the one shared file when there is only one).
  const std::filesystem::path& filter_file(std::size_t channel) const {
    return filter_files.size() == 1 ? filter_files.front() : filter_files.at(channel);
  }
};

// Reads and checks a configuration file. Throws ConfigError.
LiveConfig load_live_config(const std::filesystem::path& file);

// Parses configuration text; relative paths are resolved against `base_dir`;
// `name` is used in error messages. Throws ConfigError.
LiveConfig parse_live_config(std::string_view text, const std::filesystem::path& base_dir,
                             std::string_view name = "<config>");

// $XDG_RUNTIME_DIR/tapstream/control.sock, or /tmp/tapstream-UID/control.sock
// when XDG_RUNTIME_DIR is not set.
std::filesystem::path default_control_socket();

}  // namespace tapstream

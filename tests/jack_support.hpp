#pragma once
// Test support for the suites that run `tapstream run` against a JACK server
// of their own (jack_*_test, daemon_load_test): a private JACK server, JACK
// clients of a named server, port look-up, the test's feeder and recorder
// clients streaming through the daemon, and whether PortAudio can reach JACK
// at all. Child processes and temporary directories are in process_support.hpp.

#include <gtest/gtest.h>
#include <jack/jack.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "daemon/io/audio_device.hpp"
#include "tests/process_support.hpp"
#include "tests/wait_for.hpp"

namespace tapstream::testing {

// A client of the named server; never starts a server of its own.
inline jack_client_t* open_client(const char* name, const std::string& server) {
  jack_status_t status{};
  return jack_client_open(name, static_cast<jack_options_t>(JackNoStartServer | JackServerName),
                          &status, server.c_str());
}

// Makes `server` the JACK server of this process and of the children it
// starts from now on (JACK_DEFAULT_SERVER), with no D-Bus audio device
// reservation; returns `server`.
inline std::string use_jack_server(std::string server) {
  setenv("JACK_DEFAULT_SERVER", server.c_str(), 1);
  setenv("JACK_NO_AUDIO_RESERVATION", "1", 1);
  return server;
}

// `argv` run so that the child is stopped when the test process dies, a crash
// included (no destructor runs then): setpriv's parent-death signal, kept
// across the exec. SIGTERM, not SIGKILL: a killed jackd leaves its entry in
// JACK's shared registry of servers, and after 8 of them no jackd starts
// ("Too many servers already active"). Without setpriv (util-linux), `argv`
// as it is.
inline std::vector<std::string> dies_with_test(std::vector<std::string> argv) {
  if (!std::filesystem::exists("/usr/bin/setpriv")) return argv;
  argv.insert(argv.begin(), {"/usr/bin/setpriv", "--pdeathsig", "TERM"});
  return argv;
}

// A JACK server of the test's own, whatever else runs on the machine: jackd's
// dummy driver (no sound hardware, real time) at `rate` Hz and `period`
// frames, named `name`-PID and made this process's server, with its output
// (jackd.out, jackd.err) in a private temporary directory that the test uses
// for its own files too. -S: synchronous mode, the server waits for every
// client each cycle, so a late client on a loaded machine delays the cycle
// instead of losing it, and the xruns the daemon counts are its own. jackd
// dies with the test, even a crashed one (dies_with_test).
struct PrivateJackServer {
  // `ports`: capture and playback ports of the dummy driver ("system").
  // `realtime`: run JACK's threads (and so its clients' process callbacks)
  // at SCHED_FIFO priority, as a live setup does; needs the privilege.
  PrivateJackServer(const std::string& name, int rate, std::size_t period, std::size_t ports = 2,
                    bool realtime = false)
      : dir(name),
        server(use_jack_server(name + "-" + std::to_string(getpid()))),
        jackd(
            dies_with_test({"jackd", "-S", realtime ? "--realtime" : "--no-realtime", "-t", "10000",
                            "-d", "dummy", "-r", std::to_string(rate), "-p", std::to_string(period),
                            "-C", std::to_string(ports), "-P", std::to_string(ports)}),
            dir / "jackd.out", dir / "jackd.err") {}

  // A client of this server, retried while the server comes up (for up to
  // long_wait); nullptr if it never does.
  jack_client_t* open_client_when_up(const char* client_name) const {
    jack_client_t* client = nullptr;
    const bool up = static_cast<bool>(wait_until(
        long_wait, [&] { return (client = open_client(client_name, server)) != nullptr; },
        [&] { return read_text(dir / "jackd.err"); }, std::chrono::milliseconds(50)));
    return up ? client : nullptr;
  }

  // Destroyed in reverse: jackd is stopped before its directory is removed.
  TempDir dir;
  std::string server;
  Child jackd;
};

inline std::vector<std::string> find_ports(jack_client_t* client, const char* pattern,
                                           unsigned long flags) {
  std::vector<std::string> names;
  const char** ports = jack_get_ports(client, pattern, JACK_DEFAULT_AUDIO_TYPE, flags);
  if (ports == nullptr) return names;
  for (const char** p = ports; *p != nullptr; ++p) names.emplace_back(*p);
  jack_free(ports);
  return names;
}

// The daemon's JACK ports (its client's in_N and out_N, named "tapstream" by default), once
// PortAudio has opened the stream: waits up to `seconds`, failing at once if
// the daemon exits (its `log` says why). Call through ASSERT_NO_FATAL_FAILURE.
struct DaemonPorts {
  std::vector<std::string> in, out;
};
inline void wait_for_daemon_ports(jack_client_t* client, Child& daemon, std::size_t channels,
                                  const std::filesystem::path& log, DaemonPorts& ports,
                                  std::chrono::seconds timeout = long_wait) {
  ASSERT_TRUE(wait_until(
      timeout,
      [&] {
        ports.in = find_ports(client, "tapstream.*:in_", JackPortIsInput);
        ports.out = find_ports(client, "tapstream.*:out_", JackPortIsOutput);
        return !daemon.running() || (ports.in.size() >= channels && ports.out.size() >= channels);
      },
      [&] { return read_text(log); }, std::chrono::milliseconds(20)))
      << "the daemon's " << channels << " JACK ports";
  ASSERT_TRUE(daemon.running()) << "the daemon exited: " << read_text(log);
  ASSERT_EQ(ports.in.size(), channels) << read_text(log);
  ASSERT_EQ(ports.out.size(), channels) << read_text(log);
}

// Waits until `cycles`, counted by a process callback of the test's graph,
// has moved on by 2: a graph change (a connection) made before the call takes
// effect at the start of the next cycle, so two cycles on it is in use.
inline ::testing::AssertionResult wait_for_cycles(const std::atomic<std::uint64_t>& cycles) {
  const std::uint64_t from = cycles.load(std::memory_order_acquire);
  return wait_until(
      long_wait, [&] { return cycles.load(std::memory_order_acquire) >= from + 2; },
      [&] { return std::to_string(cycles.load() - from) + " JACK cycles since the change"; });
}

// Registers the feeder's out_N and the recorder's in_N ports, one of each per
// channel (N from 1). Call through ASSERT_NO_FATAL_FAILURE.
inline void register_stream_ports(jack_client_t* feeder, jack_client_t* recorder,
                                  std::span<jack_port_t*> out_ports,
                                  std::span<jack_port_t*> in_ports) {
  for (std::size_t c = 0; c < out_ports.size(); ++c) {
    const std::string n = std::to_string(c + 1);
    out_ports[c] = jack_port_register(feeder, ("out_" + n).c_str(), JACK_DEFAULT_AUDIO_TYPE,
                                      JackPortIsOutput, 0);
    in_ports[c] = jack_port_register(recorder, ("in_" + n).c_str(), JACK_DEFAULT_AUDIO_TYPE,
                                     JackPortIsInput, 0);
    ASSERT_TRUE(out_ports[c] != nullptr && in_ports[c] != nullptr);
  }
}

// Opens the test's two clients of `jack`: `feeder`, once the server is up,
// and `recorder`. Call through ASSERT_NO_FATAL_FAILURE.
inline void open_feeder_and_recorder(const PrivateJackServer& jack, jack_client_t*& feeder,
                                     jack_client_t*& recorder) {
  ASSERT_TRUE(jack.jackd.started()) << "could not start jackd";
  feeder = jack.open_client_when_up("feeder");
  ASSERT_NE(feeder, nullptr) << "jackd did not come up: " << read_text(jack.dir / "jackd.err");
  recorder = open_client("recorder", jack.server);
  ASSERT_NE(recorder, nullptr);
}

// Registers the stream ports (register_stream_ports), gives the feeder and
// the recorder their process callbacks, both called with `stream`, and
// activates both clients. Call through ASSERT_NO_FATAL_FAILURE.
inline void activate_stream_clients(jack_client_t* feeder, jack_client_t* recorder,
                                    std::span<jack_port_t*> out_ports,
                                    std::span<jack_port_t*> in_ports, JackProcessCallback feed,
                                    JackProcessCallback record, void* stream) {
  ASSERT_NO_FATAL_FAILURE(register_stream_ports(feeder, recorder, out_ports, in_ports));
  jack_set_process_callback(feeder, feed, stream);
  jack_set_process_callback(recorder, record, stream);
  ASSERT_EQ(jack_activate(feeder), 0);
  ASSERT_EQ(jack_activate(recorder), 0);
}

// Feeds the daemon's inputs from the feeder instead of the dummy capture ports
// PortAudio connected them to, and records its outputs; both clients must be
// active. Call through ASSERT_NO_FATAL_FAILURE.
inline void route_through_daemon(jack_client_t* feeder, jack_client_t* recorder,
                                 std::span<jack_port_t* const> out_ports,
                                 std::span<jack_port_t* const> in_ports,
                                 const std::vector<std::string>& daemon_in,
                                 const std::vector<std::string>& daemon_out) {
  for (std::size_t c = 0; c < out_ports.size(); ++c) {
    for (const auto& source : find_ports(feeder, "system:capture_.*", JackPortIsOutput)) {
      jack_disconnect(feeder, source.c_str(), daemon_in[c].c_str());
    }
    ASSERT_EQ(jack_connect(feeder, jack_port_name(out_ports[c]), daemon_in[c].c_str()), 0);
    ASSERT_EQ(jack_connect(recorder, daemon_out[c].c_str(), jack_port_name(in_ports[c])), 0);
  }
}

// Ends a stream: deactivates both clients, stops the daemon with SIGTERM,
// which must end it with 128 + the signal (README, "Exit codes") after a
// clean drain (its `log` says why not), and closes both clients.
inline void stop_stream(jack_client_t* feeder, jack_client_t* recorder, Child& daemon,
                        const std::filesystem::path& log) {
  jack_deactivate(recorder);
  jack_deactivate(feeder);
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait_for(testing::long_wait), 128 + SIGTERM) << read_text(log);
  jack_client_close(recorder);
  jack_client_close(feeder);
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

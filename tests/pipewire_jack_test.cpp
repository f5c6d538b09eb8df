// tapstream as a JACK client of PipeWire (`pw-jack tapstream run`), against a
// private PipeWire the test starts: its own configuration (a dummy driver and
// a null source and sink, ports configured without a session manager), its
// own XDG_RUNTIME_DIR, no D-Bus. The test's feeder and recorder are JACK
// clients of the same PipeWire through PipeWire's libjack, loaded at run time
// (this executable is linked with jackd2's), and stream a random signal
// through the daemon in same-period mode at a 1024-frame quantum: every
// recorded cycle must be exactly the convolution of what went in. A forced
// quantum (clock.force-quantum 512, then 256, in the "settings" metadata) is
// followed without a restart (status: the new period, the engine re-planned).
// PipeWire itself may drop a cycle of the feeder's output at a quantum change,
// or when its (here not real-time) threads run late; the recorder's copy of
// the feeder's output says where, and the filter's length after such a drop
// is excused and counted. (At 128-frame quanta a loaded 2-core machine drops
// so many that the check would excuse most of the stream.) A forced rate
// (clock.force-rate 96000) is noticed: the daemon, whose filters are for
// 48 kHz, stops cleanly naming both rates; one with sample_rate = "device"
// follows the rate back to 48 kHz, restarting itself in place. Skips, saying
// why, where PipeWire is not installed or cannot start. About 8 s.

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <jack/jack.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "dsp/files/coefficient_file.hpp"
#include "tests/daemon_period.hpp"
#include "tests/jack_support.hpp"
#include "tests/noise_stream.hpp"
#include "tests/process_support.hpp"
#include "tests/reference.hpp"
#include "tests/wait_for.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::Child;
using testing::read_text;

constexpr int rate = 48000;
constexpr std::size_t channels = 2;
constexpr std::size_t taps = 4096;
const fs::path pipewire_libjack = "/usr/lib/x86_64-linux-gnu/pipewire-0.3/jack/libjack.so.0";

// A private PipeWire: a dummy driver (what runs the graph without hardware),
// a null sink and a null source for the daemon's devices, the modules a JACK
// client needs, and the "settings" metadata the core keeps (clock.force-*).
constexpr const char* pipewire_conf = R"(
context.properties = {
    core.daemon = true
    core.name = pipewire-0
    default.clock.rate = 48000
    default.clock.allowed-rates = [ 48000 96000 ]
    default.clock.quantum = 1024
    default.clock.min-quantum = 32
    default.clock.max-quantum = 2048
    support.dbus = false
    mem.allow-mlock = false
    log.level = 2
}
context.spa-libs = {
    audio.convert.* = audioconvert/libspa-audioconvert
    support.*       = support/libspa-support
}
context.modules = [
    { name = libpipewire-module-protocol-native }
    { name = libpipewire-module-access }
    { name = libpipewire-module-metadata }
    { name = libpipewire-module-spa-node-factory }
    { name = libpipewire-module-client-node }
    { name = libpipewire-module-adapter }
    { name = libpipewire-module-link-factory }
]
context.objects = [
    { factory = spa-node-factory
      args = { factory.name = support.node.driver node.name = Dummy-Driver
               node.group = pipewire.dummy priority.driver = 20000 } }
    { factory = adapter
      args = { factory.name = support.null-audio-sink node.name = null-sink
               node.description = null-sink media.class = Audio/Sink audio.position = [ FL FR ]
               adapter.auto-port-config = { mode = dsp monitor = true position = preserve } } }
    { factory = adapter
      args = { factory.name = support.null-audio-sink node.name = null-source
               node.description = null-source media.class = Audio/Source/Virtual
               audio.position = [ FL FR ]
               adapter.auto-port-config = { mode = dsp monitor = true position = preserve } } }
]
)";

// The JACK calls the test makes, from PipeWire's libjack.
struct PipewireJack {
  void* library = nullptr;
  decltype(&jack_client_open) client_open = nullptr;
  decltype(&jack_client_close) client_close = nullptr;
  decltype(&jack_port_register) port_register = nullptr;
  decltype(&jack_port_name) port_name = nullptr;
  decltype(&jack_port_get_buffer) port_get_buffer = nullptr;
  decltype(&jack_last_frame_time) last_frame_time = nullptr;
  decltype(&jack_set_process_callback) set_process_callback = nullptr;
  decltype(&jack_activate) activate = nullptr;
  decltype(&jack_deactivate) deactivate = nullptr;
  decltype(&jack_connect) connect = nullptr;
  decltype(&jack_disconnect) disconnect = nullptr;
  decltype(&jack_get_ports) get_ports = nullptr;
  decltype(&jack_free) free = nullptr;

  // Empty when it loaded; else why not.
  std::string load() {
    // Its own copy, bound to itself: jackd2's libjack is loaded already.
    library = dlopen(pipewire_libjack.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (library == nullptr) return dlerror();
    const auto find = [&](auto& function, const char* name) {
      function =
          reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(library, name));
      return function != nullptr;
    };
    if (!(find(client_open, "jack_client_open") && find(client_close, "jack_client_close") &&
          find(port_register, "jack_port_register") && find(port_name, "jack_port_name") &&
          find(port_get_buffer, "jack_port_get_buffer") &&
          find(last_frame_time, "jack_last_frame_time") &&
          find(set_process_callback, "jack_set_process_callback") &&
          find(activate, "jack_activate") && find(deactivate, "jack_deactivate") &&
          find(connect, "jack_connect") && find(disconnect, "jack_disconnect") &&
          find(get_ports, "jack_get_ports") && find(free, "jack_free"))) {
      return "a JACK function is missing from " + pipewire_libjack.string();
    }
    return {};
  }

  std::vector<std::string> ports(jack_client_t* client, const char* pattern,
                                 unsigned long flags) const {
    std::vector<std::string> names;
    const char** found = get_ports(client, pattern, JACK_DEFAULT_AUDIO_TYPE, flags);
    if (found == nullptr) return names;
    for (const char** p = found; *p != nullptr; ++p) names.emplace_back(*p);
    free(found);
    return names;
  }
};

// `pw-metadata -n settings 0 KEY VALUE` on the private PipeWire.
bool set_setting(const fs::path& dir, const std::string& key, const std::string& value) {
  Child child({"pw-metadata", "-n", "settings", "0", key, value}, dir / "metadata.out",
              dir / "metadata.err");
  return child.wait_for(std::chrono::seconds(20)) == 0;
}

using Stream = testing::NoiseStream<channels>;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized = true;
#elif defined(__has_feature)
constexpr bool sanitized = __has_feature(address_sanitizer) || __has_feature(thread_sanitizer);
#else
constexpr bool sanitized = false;
#endif

TEST(PipewireJack, TheDaemonUnderPwJackFiltersExactlyFollowsAForcedQuantumAndStopsOnAForcedRate) {
  if (!fs::exists("/usr/bin/pipewire") || !fs::exists("/usr/bin/pw-jack") ||
      !fs::exists("/usr/bin/pw-metadata") || !fs::exists(pipewire_libjack)) {
    GTEST_SKIP() << "PipeWire is not installed (packages pipewire, pipewire-bin, pipewire-jack)";
  }
  if (sanitized) {
    GTEST_SKIP() << "PipeWire's libjack is loaded with RTLD_DEEPBIND (jackd2's is loaded "
                    "already), which the sanitizer runtimes refuse; this suite runs in the "
                    "Release build";
  }
  const std::uint64_t seed = 24003;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  testing::TempDir dir("tapstream-pipewire");
  const fs::path runtime = dir.path() / "run";
  fs::create_directory(runtime);
  fs::permissions(runtime, fs::perms::owner_all, fs::perm_options::replace);
  {
    std::ofstream conf(dir.path() / "pipewire.conf");
    conf << pipewire_conf;
  }
  // The test's clients, PipeWire and the daemon meet in the private runtime
  // directory, whatever session the test runs in.
  setenv("XDG_RUNTIME_DIR", runtime.c_str(), 1);
  setenv("PIPEWIRE_RUNTIME_DIR", runtime.c_str(), 1);
  unsetenv("PIPEWIRE_REMOTE");
  unsetenv("PIPEWIRE_QUANTUM");
  unsetenv("DBUS_SESSION_BUS_ADDRESS");
  Child pipewire(
      testing::dies_with_test({"pipewire", "-c", (dir.path() / "pipewire.conf").string()}),
      dir.path() / "pipewire.out", dir.path() / "pipewire.err");
  const bool up = static_cast<bool>(testing::wait_until(
      std::chrono::seconds(10),
      [&] { return !pipewire.running() || fs::exists(runtime / "pipewire-0"); },
      "the PipeWire socket", std::chrono::milliseconds(20)));
  if (!up || !pipewire.running()) {
    GTEST_SKIP() << "PipeWire cannot start here: " << read_text(dir.path() / "pipewire.err");
  }
  PipewireJack jack;
  if (const std::string error = jack.load(); !error.empty()) {
    GTEST_SKIP() << "PipeWire's libjack does not load: " << error;
  }
  jack_status_t status{};
  jack_client_t* feeder = nullptr;
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] { return (feeder = jack.client_open("feeder", JackNoStartServer, &status)) != nullptr; },
      [&] { return read_text(dir.path() / "pipewire.err"); }, std::chrono::milliseconds(50)))
      << "a JACK client of PipeWire";
  jack_client_t* recorder = jack.client_open("recorder", JackNoStartServer, &status);
  ASSERT_NE(recorder, nullptr);

  std::vector<std::vector<float>> filters;
  std::string files;
  for (std::size_t c = 0; c < channels; ++c) {
    auto h = testing::random_signal(taps, seed + c);
    for (auto& t : h) t /= std::sqrt(float(h.size()));
    const fs::path file = dir.path() / ("taps-" + std::to_string(c) + ".txt");
    save_text_taps(file, h, "PipeWire test filter");
    files += (c == 0 ? "\"" : ", \"") + file.string() + "\"";
    filters.push_back(std::move(h));
  }
  const fs::path socket = dir.path() / "ctl.sock";
  {
    std::ofstream config(dir.path() / "zero.toml");
    config << "sample_rate = " << rate << "\nblock_frames = 1024\nchannels = " << channels
           << "\n[input]\ndevice = \"null-source\"\n[output]\ndevice = \"null-sink\"\n"
           << "[filter]\nfiles = [" << files
           << "]\nwatch = false\n[engine]\nbackend = \"cpu\"\n[control]\nsocket = \""
           << socket.string() << "\"\n";
  }
  setenv("TAPSTREAM_FFTW_PLANNER", "estimate", 1);  // the daemon starts at once
  Child daemon(testing::dies_with_test({"pw-jack", TAPSTREAM_BINARY, "run", "--config",
                                        (dir.path() / "zero.toml").string(), "--latency", "zero"}),
               dir.path() / "daemon.out", dir.path() / "daemon.err");
  ASSERT_TRUE(daemon.started());
  std::vector<std::string> daemon_in, daemon_out;
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] {
        daemon_in = jack.ports(feeder, "tapstream.*:in_", JackPortIsInput);
        daemon_out = jack.ports(feeder, "tapstream.*:out_", JackPortIsOutput);
        return !daemon.running() || (daemon_in.size() == channels && daemon_out.size() == channels);
      },
      [&] { return read_text(dir.path() / "daemon.err"); }, std::chrono::milliseconds(20)))
      << "the daemon's JACK ports";
  ASSERT_TRUE(daemon.running()) << "the daemon exited: " << read_text(dir.path() / "daemon.err");
  std::sort(daemon_in.begin(), daemon_in.end());
  std::sort(daemon_out.begin(), daemon_out.end());

  // 2 s recorded, of a signal that goes on longer (each recorded cycle is
  // found in it, see check_placed_cycles).
  const std::size_t record_frames = 2 * rate, signal_frames = 2 * record_frames;
  Stream s(jack.port_get_buffer, jack.last_frame_time);
  s.feeder = feeder;
  s.recorder = recorder;
  for (std::size_t c = 0; c < channels; ++c) {
    s.signal[c] = testing::random_signal(signal_frames, seed + 100 + c);
    const std::string n = std::to_string(c + 1);
    s.out_ports[c] = jack.port_register(feeder, ("out_" + n).c_str(), JACK_DEFAULT_AUDIO_TYPE,
                                        JackPortIsOutput, 0);
    s.in_ports[c] = jack.port_register(recorder, ("in_" + n).c_str(), JACK_DEFAULT_AUDIO_TYPE,
                                       JackPortIsInput, 0);
    s.tap_ports[c] = jack.port_register(recorder, ("fed_" + n).c_str(), JACK_DEFAULT_AUDIO_TYPE,
                                        JackPortIsInput, 0);
    ASSERT_TRUE(s.out_ports[c] != nullptr && s.in_ports[c] != nullptr && s.tap_ports[c] != nullptr);
  }
  s.prepare(record_frames, record_frames / 128 + 2);
  jack.set_process_callback(feeder, &Stream::feed, &s);
  jack.set_process_callback(recorder, &Stream::record, &s);
  ASSERT_EQ(jack.activate(feeder), 0);
  ASSERT_EQ(jack.activate(recorder), 0);
  for (std::size_t c = 0; c < channels; ++c) {
    for (const auto& source : jack.ports(feeder, "null-source:.*", JackPortIsOutput)) {
      jack.disconnect(feeder, source.c_str(), daemon_in[c].c_str());
    }
    ASSERT_EQ(jack.connect(feeder, jack.port_name(s.out_ports[c]), daemon_in[c].c_str()), 0);
    ASSERT_EQ(jack.connect(recorder, daemon_out[c].c_str(), jack.port_name(s.in_ports[c])), 0);
    ASSERT_EQ(jack.connect(feeder, jack.port_name(s.out_ports[c]), jack.port_name(s.tap_ports[c])),
              0);
  }
  ASSERT_TRUE(testing::wait_for_cycles(s.cycles)) << "the connections in use";
  EXPECT_TRUE(testing::wait_for_period(socket, dir.path(), 1024, 0));
  s.armed.store(true, std::memory_order_release);

  const auto recorded_past = [&](std::size_t frames) {
    return testing::wait_until(
        testing::long_wait, [&] { return s.recorded.load(std::memory_order_acquire) >= frames; },
        [&] { return std::to_string(s.recorded.load()) + " frames recorded"; },
        std::chrono::milliseconds(5));
  };
  ASSERT_TRUE(recorded_past(rate / 5));
  ASSERT_TRUE(set_setting(dir.path(), "clock.force-quantum", "512"))
      << read_text(dir.path() / "metadata.err");
  EXPECT_TRUE(testing::wait_for_period(socket, dir.path(), 512, 1));
  ASSERT_TRUE(recorded_past(s.recorded.load() + rate / 10));
  ASSERT_TRUE(set_setting(dir.path(), "clock.force-quantum", "256"));
  EXPECT_TRUE(testing::wait_for_period(socket, dir.path(), 256, 2));
  EXPECT_TRUE(recorded_past(record_frames));
  jack.deactivate(recorder);
  jack.deactivate(feeder);
  ASSERT_EQ(s.recorded.load(), record_frames) << "recording incomplete";

  const std::size_t cycles = s.recorded_cycles.load();
  std::size_t sizes[3] = {0, 0, 0};
  for (std::size_t k = 0; k < cycles; ++k) {
    sizes[0] += s.cycle_frames[k] == 1024;
    sizes[1] += s.cycle_frames[k] == 512;
    sizes[2] += s.cycle_frames[k] == 256;
  }
  EXPECT_GT(sizes[0], 5u) << "cycles of the configured 1024-frame quantum";
  EXPECT_GT(sizes[1], 10u) << "cycles of the forced 512-frame quantum";
  EXPECT_GT(sizes[2], 10u) << "cycles of the forced 256-frame quantum";
  const auto late = testing::status_of(socket, dir.path()).value("late_periods", 0u);
  for (std::size_t c = 0; c < channels; ++c) {
    // Where the signal was in each recorded cycle: PipeWire may drop a cycle of
    // the feeder's output on a quantum change (for the daemon and the recorder
    // alike), so what went in is the recorder's copy of it, cycle by cycle.
    const auto placed = testing::check_placed_cycles(s.recording[c], s.tapped[c], s.signal[c],
                                                     filters[c], s.cycle_frames, cycles, 1e-4);
    const auto want = testing::reference_convolution(s.tapped[c], filters[c]);
    // Where the daemon and the recorder may have seen different cycles around
    // a drop, the filter's length after it is excused (and counted).
    const auto check = testing::check_cycles(s.recording[c], want, s.cycle_frames, cycles, 1e-4,
                                             placed.gap_frames, taps + 2048);
    std::printf(
        "channel %zu: %zu cycles (%zu of 1024, %zu of 512, %zu of 256 frames): %zu exact, %zu "
        "silent (late), %zu wrong, %zu excused; daemon late periods %llu; PipeWire dropped %zu "
        "frames in %zu places\n",
        c, cycles, sizes[0], sizes[1], sizes[2], check.exact, check.silent, check.wrong,
        check.excused, static_cast<unsigned long long>(late), placed.dropped,
        placed.gap_frames.size());
    EXPECT_EQ(check.wrong, 0u) << "channel " << c << ": first wrong frame " << check.first_wrong
                               << " (cycle " << check.first_wrong_cycle << "), error "
                               << check.worst_error;
    EXPECT_LE(check.silent, std::size_t(late)) << "a silent cycle is a late period";
    EXPECT_LE(check.silent, 2u + cycles / 50) << "channel " << c;
    // Not a test of a machine too loaded to stream at all.
    EXPECT_GE(check.exact, cycles / 2) << "channel " << c;
  }
  const std::string log = read_text(dir.path() / "daemon.err");
  EXPECT_NE(log.find("device period changed: 1024 -> 512 frames"), std::string::npos) << log;

  // A forced rate: the filters are for 48 kHz, so the daemon stops, cleanly
  // and saying why (following it is `sample_rate = "device"`'s work).
  ASSERT_TRUE(set_setting(dir.path(), "clock.force-rate", "96000"));
  EXPECT_EQ(daemon.wait_for(testing::long_wait), 1) << read_text(dir.path() / "daemon.err");
  const std::string stopped = read_text(dir.path() / "daemon.err");
  EXPECT_NE(stopped.find("sample rate changed: 48000 -> 96000 Hz"), std::string::npos) << stopped;
  EXPECT_NE(stopped.find("stopped:"), std::string::npos) << "a clean stop: " << stopped;

  // With sample_rate = "device" the rate is followed instead: the daemon
  // starts at the server's 96 kHz and, forced back to 48 kHz, restarts
  // itself in place (same PID) at the new rate.
  {
    std::ofstream config(dir.path() / "device.toml");
    config << "sample_rate = \"device\"\nblock_frames = 256\nchannels = " << channels
           << "\n[input]\ndevice = \"null-source\"\n[output]\ndevice = \"null-sink\"\n"
           << "[filter]\nfiles = [" << files
           << "]\nwatch = false\n[engine]\nbackend = \"cpu\"\n[control]\nsocket = \""
           << socket.string() << "\"\n";
  }
  Child follower(
      testing::dies_with_test({"pw-jack", TAPSTREAM_BINARY, "run", "--config",
                               (dir.path() / "device.toml").string(), "--latency", "zero"}),
      dir.path() / "follower.out", dir.path() / "follower.err");
  const auto runs_at = [&](int hz) {
    nlohmann::json now;
    return testing::wait_until(
        testing::long_wait,
        [&] {
          now = testing::status_of(socket, dir.path());
          return !follower.running() || (now.is_object() && now.value("sample_rate", 0) == hz &&
                                         now.value("period_frames", 0u) > 0);
        },
        [&] { return now.dump() + "\n" + read_text(dir.path() / "follower.err"); },
        std::chrono::milliseconds(100));
  };
  EXPECT_TRUE(runs_at(96000));
  const pid_t pid = follower.pid();
  ASSERT_TRUE(set_setting(dir.path(), "clock.force-rate", "48000"));
  EXPECT_TRUE(runs_at(48000));
  EXPECT_TRUE(follower.running()) << read_text(dir.path() / "follower.err");
  EXPECT_EQ(follower.pid(), pid) << "restarted in place";
  jack.client_close(recorder);
  jack.client_close(feeder);
}

}  // namespace
}  // namespace tapstream

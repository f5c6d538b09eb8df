// `tapstream run` as a JACK client, on a JACK dummy server of the test's own
// (a few seconds each): a sample rate the server refuses is said first, the
// client's name and connections are the configured ones, a file recorded from
// JACK holds exactly the frames received, and a file output survives a JACK
// server restart.

#include <gtest/gtest.h>
#include <jack/jack.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dsp/files/coefficient_file.hpp"
#include "dsp/files/sound_file.hpp"
#include "tests/jack_support.hpp"
#include "tests/wait_for.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;

constexpr int rate = 48000;
constexpr std::size_t channels = 2;

using testing::Child;
using testing::find_ports;
using testing::open_client;
using testing::portaudio_reaches_jack;
using testing::PrivateJackServer;
using testing::read_text;

// A configuration for the JACK "system" device (or a file output), a
// one-tap filter of 1 (output = input), no control socket; `extra` is
// appended (a [jack] table).
void write_config(const fs::path& dir, int sample_rate, bool file_output,
                  const std::string& extra) {
  save_text_taps(dir / "one.txt", {1.0f}, "identity");
  std::ofstream config(dir / "live.toml");
  config << "sample_rate = " << sample_rate << "\nchannels = " << channels
         << "\n[input]\ndevice = \"system\"\n[output]\n"
         << (file_output ? "file = \"out.wav\"" : "device = \"system\"")
         << "\n[filter]\nfile = \"one.txt\"\nwatch = false\n[engine]\nbackend = \"cpu\"\n"
         << "[control]\nsocket = \"\"\n"
         << extra;
}

Child start_daemon(const fs::path& dir) {
  return Child({TAPSTREAM_BINARY, "run", "--config", (dir / "live.toml").string()},
               dir / "daemon.out", dir / "daemon.err");
}

// Waits until the daemon's `count` ports (named by `pattern`) are there and,
// when asked, the log says the devices are open; false if it exits first.
::testing::AssertionResult wait_for_ports(Child& daemon, const std::string& server,
                                          const std::string& pattern, std::size_t count,
                                          const fs::path& log = {}) {
  // One probe client for the whole wait, opened once the server answers: a
  // client opened and closed at every poll (hundreds while a loaded machine
  // starts the daemon) churns the server's client table for nothing.
  jack_client_t* probe = nullptr;
  std::size_t seen = 0;
  const auto up = testing::wait_until(
      testing::long_wait,
      [&] {
        if (!daemon.running()) return true;
        if (probe == nullptr) probe = open_client("probe", server);
        if (probe != nullptr) seen = find_ports(probe, pattern.c_str(), 0).size();
        return seen == count &&
               (log.empty() || read_text(log).find("devices open") != std::string::npos);
      },
      [&] {
        return std::to_string(seen) + " ports " + pattern + (probe ? "" : " (no server)") +
               "; the daemon's log:\n" + (log.empty() ? "" : read_text(log));
      },
      std::chrono::milliseconds(50));
  if (probe != nullptr) jack_client_close(probe);
  if (!up) return up;
  if (!daemon.running()) return ::testing::AssertionFailure() << "the daemon exited";
  return ::testing::AssertionSuccess();
}

// The ports connected to `port`.
std::vector<std::string> connections(jack_client_t* client, const std::string& port) {
  std::vector<std::string> names;
  const char** found =
      jack_port_get_all_connections(client, jack_port_by_name(client, port.c_str()));
  if (found == nullptr) return names;
  for (const char** p = found; *p != nullptr; ++p) names.emplace_back(*p);
  jack_free(found);
  std::sort(names.begin(), names.end());
  return names;
}

// A JACK client whose output ports play a constant.
struct ConstantSource {
  ConstantSource(const std::string& name, const std::string& server, float value) : value(value) {
    client = open_client(name.c_str(), server);
    if (client == nullptr) return;
    for (std::size_t c = 0; c < channels; ++c) {
      ports[c] = jack_port_register(client, ("out_" + std::to_string(c + 1)).c_str(),
                                    JACK_DEFAULT_AUDIO_TYPE, JackPortIsOutput, 0);
    }
    jack_set_process_callback(client, &ConstantSource::process, this);
    jack_activate(client);
  }
  ~ConstantSource() {
    if (client != nullptr) jack_client_close(client);
  }
  static int process(jack_nframes_t frames, void* arg) {
    auto& self = *static_cast<ConstantSource*>(arg);
    for (auto* port : self.ports) {
      auto* out = static_cast<float*>(jack_port_get_buffer(port, frames));
      std::fill(out, out + frames, self.value);
    }
    self.played.fetch_add(frames, std::memory_order_relaxed);
    return 0;
  }
  // Waits until this source has played `frames` more frames: on the JACK
  // server's clock, which a loaded machine slows (-S), not the wall clock.
  ::testing::AssertionResult wait_for_frames(std::uint64_t frames) const {
    const std::uint64_t from = played.load();
    return testing::wait_until(
        testing::long_wait, [&] { return played.load() >= from + frames; },
        [&] { return std::to_string(played.load() - from) + " frames played"; });
  }
  float value;
  std::atomic<std::uint64_t> played{0};
  jack_client_t* client = nullptr;
  jack_port_t* ports[channels] = {};
};

// A number the daemon's log prints just before `marker` (e.g. " frames in").
long long logged_number(const std::string& log, const std::string& marker) {
  const auto at = log.rfind(marker);
  if (at == std::string::npos) return -1;
  auto start = at;
  while (start > 0 && std::isdigit(static_cast<unsigned char>(log[start - 1]))) --start;
  return start == at ? -1 : std::stoll(log.substr(start, at - start));
}

std::vector<float> read_channel0(const fs::path& file) {
  SoundFileReader reader(file);
  std::vector<float> all(static_cast<std::size_t>(reader.info().frames) * channels);
  std::size_t done = 0;
  while (done < all.size()) {
    const std::size_t frames = reader.read(std::span<float>(all).subspan(done));
    if (frames == 0) break;
    done += frames * channels;
  }
  std::vector<float> first;
  for (std::size_t i = 0; i < done; i += channels) first.push_back(all[i]);
  return first;
}

#define SKIP_WITHOUT_JACKD() \
  if (!fs::exists("/usr/bin/jackd")) GTEST_SKIP() << "jackd not installed (jackd2)"
#define SKIP_WITHOUT_JACK(client)                        \
  ASSERT_NE(client, nullptr) << "jackd did not come up"; \
  if (!portaudio_reaches_jack()) GTEST_SKIP() << "this PortAudio has no JACK host API"

TEST(JackDaemon, ARefusedSampleRateIsReportedFirstWithTheRatesTheServerOffers) {
  SKIP_WITHOUT_JACKD();
  PrivateJackServer jack("tapstream-jack-rate", rate, 256);
  jack_client_t* probe = jack.open_client_when_up("probe");
  SKIP_WITHOUT_JACK(probe);
  jack_client_close(probe);
  const fs::path& dir = jack.dir.path();
  write_config(dir, 44100, false, "");
  Child daemon = start_daemon(dir);
  EXPECT_EQ(daemon.wait_for(std::chrono::seconds(20)), 1) << "a device error exits with 1";
  const std::string err = read_text(dir / "daemon.err");
  EXPECT_EQ(read_text(dir / "daemon.out"), "") << "nothing before the error (no latency line)";
  EXPECT_EQ(err.rfind("error: ", 0), 0u) << "the error is the first line: " << err;
  EXPECT_NE(err.find("sample_rate = 44100"), std::string::npos) << err;
  EXPECT_NE(err.find("does not run at 44100 Hz; it offers 48000 Hz"), std::string::npos) << err;
}

TEST(JackDaemon, TheClientNameAndConnectionsAreTheConfiguredOnes) {
  SKIP_WITHOUT_JACKD();
  PrivateJackServer jack("tapstream-jack-connect", rate, 256);
  jack_client_t* probe = jack.open_client_when_up("probe");
  SKIP_WITHOUT_JACK(probe);
  ConstantSource feeder("feeder", jack.server, 0.5f);
  ASSERT_NE(feeder.client, nullptr);
  const fs::path& dir = jack.dir.path();
  // Inputs: one pattern spread over the channels; outputs: one port per
  // channel, crossed (an exact name: system:playback_1 does not take _10).
  write_config(dir, rate, false,
               "[jack]\nclient_name = \"tapfilter\"\nconnect_inputs = \"feeder:out_.*\"\n"
               "connect_outputs = [\"system:playback_2\", \"system:playback_1\"]\n");
  Child daemon = start_daemon(dir);
  ASSERT_TRUE(wait_for_ports(daemon, jack.server, "^tapfilter:", 2 * channels, dir / "daemon.err"))
      << read_text(dir / "daemon.err");
  EXPECT_EQ(connections(probe, "tapfilter:in_0"), std::vector<std::string>{"feeder:out_1"});
  EXPECT_EQ(connections(probe, "tapfilter:in_1"), std::vector<std::string>{"feeder:out_2"});
  EXPECT_EQ(connections(probe, "tapfilter:out_0"), std::vector<std::string>{"system:playback_2"});
  EXPECT_EQ(connections(probe, "tapfilter:out_1"), std::vector<std::string>{"system:playback_1"});
  EXPECT_TRUE(connections(probe, "system:capture_1").empty()) << "PortAudio's own are undone";
  EXPECT_TRUE(find_ports(probe, "^PortAudio", 0).empty());
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait_for(testing::long_wait), 128 + SIGTERM);
  jack_client_close(probe);
}

TEST(JackDaemon, WithAutoconnectOffThePortsStayUnconnected) {
  SKIP_WITHOUT_JACKD();
  PrivateJackServer jack("tapstream-jack-noauto", rate, 256);
  jack_client_t* probe = jack.open_client_when_up("probe");
  SKIP_WITHOUT_JACK(probe);
  const fs::path& dir = jack.dir.path();
  write_config(dir, rate, false, "[jack]\nautoconnect = false\n");
  Child daemon = start_daemon(dir);
  ASSERT_TRUE(wait_for_ports(daemon, jack.server, "^tapstream:", 2 * channels, dir / "daemon.err"))
      << read_text(dir / "daemon.err");
  for (const auto& port : find_ports(probe, "^tapstream:", 0)) {
    EXPECT_TRUE(connections(probe, port).empty()) << port;
  }
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait_for(testing::long_wait), 128 + SIGTERM);
  jack_client_close(probe);
}

TEST(JackDaemon, AFileRecordedFromJackHoldsExactlyTheFramesReceivedAfterACleanStop) {
  SKIP_WITHOUT_JACKD();
  PrivateJackServer jack("tapstream-jack-record", rate, 256);
  jack_client_t* probe = jack.open_client_when_up("probe");
  SKIP_WITHOUT_JACK(probe);
  jack_client_close(probe);
  ConstantSource feeder("feeder", jack.server, 0.5f);
  const fs::path& dir = jack.dir.path();
  write_config(dir, rate, true, "[jack]\nconnect_inputs = \"feeder:out_.*\"\n");
  Child daemon = start_daemon(dir);
  ASSERT_TRUE(wait_for_ports(daemon, jack.server, "^tapstream:", channels, dir / "daemon.err"))
      << read_text(dir / "daemon.err");
  ASSERT_TRUE(feeder.wait_for_frames(rate)) << "a second of audio streamed";
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait_for(testing::long_wait), 128 + SIGTERM);
  const std::string log = read_text(dir / "daemon.err");
  const long long received = logged_number(log, " frames in");
  const long long written = logged_number(log, " frames to ");
  const std::string out = read_text(dir / "daemon.out");
  const long long latency = std::stoll(out.substr(out.find("latency: ") + 9));
  ASSERT_GT(received, rate / 2) << log;
  EXPECT_EQ(written, received + latency) << "the latency's silence, then every frame received";
  EXPECT_NE(log.find("underruns 0,"), std::string::npos) << log;
  const auto recorded = read_channel0(dir / "out.wav");
  ASSERT_EQ(static_cast<long long>(recorded.size()), written);
  for (long long i = 0; i < latency; ++i) ASSERT_EQ(recorded[i], 0.0f) << i;
  // The feeder was connected just after the stream started: its 0.5 from then
  // on, to the last frame.
  EXPECT_EQ(recorded.back(), 0.5f);
}

// The daemon restarts itself when its JACK server goes; the restarted daemon
// continues the output file: what was written before stays (0.5 from the
// first server's feeder), what comes after follows (0.25 from the second's).
TEST(JackDaemon, AFileOutputSurvivesAJackServerRestart) {
  SKIP_WITHOUT_JACKD();
  auto first = std::make_unique<PrivateJackServer>("tapstream-jack-restart", rate, 256);
  jack_client_t* probe = first->open_client_when_up("probe");
  SKIP_WITHOUT_JACK(probe);
  jack_client_close(probe);
  const std::string server = first->server;
  const testing::TempDir dir("tapstream-jack-restart-files");
  auto feeder = std::make_unique<ConstantSource>("feeder", server, 0.5f);
  write_config(dir.path(), rate, true, "[jack]\nconnect_inputs = \"feeder:out_.*\"\n");
  Child daemon = start_daemon(dir.path());
  ASSERT_TRUE(wait_for_ports(daemon, server, "^tapstream:", channels, dir.path() / "daemon.err"))
      << read_text(dir.path() / "daemon.err");
  ASSERT_TRUE(feeder->wait_for_frames(rate)) << "a second of audio streamed";

  feeder.reset();
  first.reset();  // the server goes away (SIGTERM, waited for)
  // The daemon notices and restarts itself in place (exec, same PID and log).
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] {
        return !daemon.running() ||
               read_text(dir.path() / "daemon.err").find("restarts itself") != std::string::npos;
      },
      [&] { return read_text(dir.path() / "daemon.err"); }));
  ASSERT_TRUE(daemon.running()) << read_text(dir.path() / "daemon.err");
  // A new server of the same name (the daemon's environment names it).
  Child jackd2({"jackd", "-n", server, "-S", "--no-realtime", "-d", "dummy", "-r",
                std::to_string(rate), "-p", "256"},
               dir.path() / "jackd2.out", dir.path() / "jackd2.err");
  std::unique_ptr<ConstantSource> feeder2;
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] {
        feeder2 = std::make_unique<ConstantSource>("feeder", server, 0.25f);
        return feeder2->client != nullptr;
      },
      [&] { return read_text(dir.path() / "jackd2.err"); }, std::chrono::milliseconds(100)))
      << "the second JACK server did not come up";
  ASSERT_TRUE(wait_for_ports(daemon, server, "^tapstream:", channels))
      << "the daemon did not reconnect: " << read_text(dir.path() / "daemon.err");
  ASSERT_TRUE(feeder2->wait_for_frames(rate / 2)) << "half a second streamed after the restart";
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait_for(testing::long_wait), 128 + SIGTERM);
  const std::string log = read_text(dir.path() / "daemon.err");
  EXPECT_NE(log.find("continuing the output after the restart"), std::string::npos) << log;
  // The restarted daemon's latency is the same: the line is not printed again.
  const std::string out = read_text(dir.path() / "daemon.out");
  const auto latency_line = out.find("latency: ");
  EXPECT_NE(latency_line, std::string::npos) << out;
  EXPECT_EQ(out.find("latency: ", latency_line + 1), std::string::npos) << out;

  const auto recorded = read_channel0(dir.path() / "out.wav");
  const auto first_quarter = std::find(recorded.begin(), recorded.end(), 0.25f);
  const auto last_half = std::find(recorded.rbegin(), recorded.rend(), 0.5f);
  ASSERT_NE(last_half, recorded.rend()) << "the output before the restart is gone: " << log;
  ASSERT_NE(first_quarter, recorded.end()) << "nothing after the restart: " << log;
  EXPECT_LT(recorded.rend() - last_half, first_quarter - recorded.begin() + 1)
      << "what came before the restart comes first";
  EXPECT_GT(std::count(recorded.begin(), recorded.end(), 0.5f), rate / 2)
      << "the second of audio before the restart is kept";
}

}  // namespace
}  // namespace tapstream

// The control API against `tapstream run` on a JACK device, without sound
// hardware: each test starts a private JACK dummy server, a daemon on its
// "system" device with the websocket on a free loopback port, a feeder client
// that drives both daemon inputs with a constant 0.5 and a recorder client on
// the daemon's first output (JACK runs feeder -> daemon -> recorder within a
// cycle, so the recorder's frame clock is the daemon's output clock). With a
// 1-tap unit filter the recording is 0.5 times the output gain, sample by
// sample. Checked: every request type of docs/api.md, bad requests and their
// typed errors, the token beyond loopback, a flooding client cut off while
// another keeps its meters and no period is late, and a fader move reaching
// the recorded output within one period plus the ramp. About 15 s; skipped
// where jackd or PortAudio's JACK host API is absent.

#include <gtest/gtest.h>
#include <jack/jack.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/jack_support.hpp"
#include "tests/wait_for.hpp"
#include "tests/web_api_support.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using testing::api_error;
using testing::api_ok;
using testing::Child;
using testing::find_ports;
using testing::portaudio_reaches_jack;
using testing::PrivateJackServer;
using testing::read_text;
using testing::WebsocketClient;

constexpr int rate = 48000;
constexpr std::size_t period = 256;
constexpr std::size_t channels = 2;
constexpr float level = 0.5f;
constexpr std::size_t record_frames = 3 * rate / 2;

// Shared by the two JACK process callbacks and the test thread: the recorder
// writes `recording`, then publishes it with a release store of `recorded`;
// the test reads after an acquire load of it.
struct Graph {
  jack_client_t* feeder = nullptr;
  jack_client_t* recorder = nullptr;
  jack_port_t* out_ports[channels] = {};
  jack_port_t* in_ports[channels] = {};

  std::atomic<float> latest{0.0f};  // daemon output 0's newest sample, armed or not
  std::atomic<bool> armed{false};
  std::vector<float> recording = std::vector<float>(record_frames);  // daemon output 0
  std::atomic<std::size_t> recorded{0};
};

int feed(jack_nframes_t frames, void* arg) {
  auto& g = *static_cast<Graph*>(arg);
  for (auto* port : g.out_ports) {
    auto* out = static_cast<float*>(jack_port_get_buffer(port, frames));
    std::fill(out, out + frames, level);
  }
  return 0;
}

int record(jack_nframes_t frames, void* arg) {
  auto& g = *static_cast<Graph*>(arg);
  const auto* in = static_cast<const float*>(jack_port_get_buffer(g.in_ports[0], frames));
  if (frames > 0) g.latest.store(in[frames - 1], std::memory_order_relaxed);
  if (!g.armed.load(std::memory_order_acquire)) return 0;
  const std::size_t at = g.recorded.load(std::memory_order_relaxed);
  const std::size_t n = std::min<std::size_t>(frames, record_frames - at);
  std::copy(in, in + n, g.recording.begin() + static_cast<std::ptrdiff_t>(at));
  g.recorded.store(at + n, std::memory_order_release);
  return 0;
}

// The daemon's ports: every port of the given direction that is not the
// dummy driver's, the feeder's or the recorder's (whatever the daemon's JACK
// client is named).
std::vector<std::string> daemon_ports(jack_client_t* client, unsigned long flags) {
  std::vector<std::string> ports;
  for (const auto& name : find_ports(client, nullptr, flags)) {
    if (name.starts_with("system:") || name.starts_with("feeder:") || name.starts_with("recorder:"))
      continue;
    ports.push_back(name);
  }
  return ports;
}

class JackWebApi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists("/usr/bin/jackd")) GTEST_SKIP() << "jackd not installed (package jackd2)";
    jack_ = std::make_unique<PrivateJackServer>("tapstream-jack-web", rate, period);
    ASSERT_NO_FATAL_FAILURE(
        testing::open_feeder_and_recorder(*jack_, graph_.feeder, graph_.recorder));
    if (!portaudio_reaches_jack()) GTEST_SKIP() << "this PortAudio has no JACK host API";
    ASSERT_NO_FATAL_FAILURE(testing::activate_stream_clients(
        graph_.feeder, graph_.recorder, graph_.out_ports, graph_.in_ports, feed, record, &graph_));
    std::ofstream(dir() / "unit.txt") << "1.0\n";
    port_ = testing::free_port();
  }

  void TearDown() override {
    daemon_.reset();  // before its server
    for (auto* client : {graph_.recorder, graph_.feeder}) {
      if (client != nullptr) jack_client_close(client);
    }
    jack_.reset();
  }

  const fs::path& dir() const { return jack_->dir.path(); }

  void write_config(const std::string& web_extra) {
    std::ofstream(dir() / "live.toml")
        << "sample_rate = " << rate << "\nblock_frames = 256\nchannels = " << channels
        << "\nring_margin_frames = 1024\n"  // generous: the CI machine is shared and loaded
        << "[input]\ndevice = \"system\"\n[output]\ndevice = \"system\"\n"
        << "[filter]\nfile = \"unit.txt\"\nmax_taps = 1024\nwatch = false\n"
        << "[engine]\nbackend = \"cpu\"\n[control]\nsocket = \"sock/control.sock\"\n"
        << "[web]\nport = " << port_ << "\n"
        << web_extra;
  }

  void launch() {
    daemon_ = std::make_unique<Child>(std::vector<std::string>{TAPSTREAM_BINARY, "run", "--config",
                                                               (dir() / "live.toml").string()},
                                      dir() / "daemon.out", dir() / "daemon.err");
    ASSERT_TRUE(daemon_->started());
  }

  // Starts the daemon (`web_extra` goes into its [web] table), waits for its
  // websocket and its JACK ports, routes feeder -> daemon -> recorder and
  // lets the level settle. Call through ASSERT_NO_FATAL_FAILURE.
  void start(const std::string& web_extra = "") {
    write_config(web_extra);
    ASSERT_NO_FATAL_FAILURE(launch());
    std::vector<std::string> in, out;
    ASSERT_TRUE(testing::wait_until(
        testing::long_wait,
        [&] {
          in = daemon_ports(graph_.feeder, JackPortIsInput);
          out = daemon_ports(graph_.feeder, JackPortIsOutput);
          return !daemon_->running() ||
                 (read_text(dir() / "daemon.out").find("web: http") != std::string::npos &&
                  in.size() >= channels && out.size() >= channels);
        },
        [&] { return read_text(dir() / "daemon.err"); }))
        << "the daemon's websocket and JACK ports";
    ASSERT_TRUE(daemon_->running()) << "the daemon exited: " << read_text(dir() / "daemon.err");
    ASSERT_EQ(in.size(), channels) << "daemon input ports";
    ASSERT_EQ(out.size(), channels) << "daemon output ports";
    ASSERT_NO_FATAL_FAILURE(testing::route_through_daemon(
        graph_.feeder, graph_.recorder, graph_.out_ports, graph_.in_ports, in, out));
    // The feeder's level has come through the ring (tens of ms) to the recorder.
    ASSERT_TRUE(testing::wait_until(
        testing::long_wait,
        [&] { return std::abs(graph_.latest.load(std::memory_order_relaxed) - level) < 1e-4f; },
        [&] { return "recorder reads " + std::to_string(graph_.latest.load()); }));
  }

  std::unique_ptr<PrivateJackServer> jack_;
  Graph graph_;
  int port_ = 0;
  std::unique_ptr<Child> daemon_;
};

TEST_F(JackWebApi, EveryRequestTypeAnswersAsDocumented) {
  ASSERT_NO_FATAL_FAILURE(start());
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());
  const json info = api_ok(client, {{"request", "get_info"}});
  EXPECT_NE(info["input"].get<std::string>().find("system"), std::string::npos) << info.dump();
  // A first read of the meters covers the periods before the feeder was
  // connected; the checks read from here on.
  api_ok(client, {{"request", "get_meters"}});
  testing::expect_every_request_type_answers_as_documented(client, rate, level, level);
}

TEST_F(JackWebApi, BadRequestsGetTypedErrorsAndAnOversizedOneIsCutOff) {
  ASSERT_NO_FATAL_FAILURE(start());
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());
  testing::expect_bad_requests_get_typed_errors(client);

  WebsocketClient big(port_, "/ws");
  ASSERT_TRUE(big.open());
  big.send(std::string(13 << 20, ' '));  // over the 12 MiB limit
  EXPECT_FALSE(big.receive(std::chrono::seconds(5)).has_value()) << "no reply, the end";
  // The server logs the cut-off after closing the connection: poll the log.
  EXPECT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] {
        return read_text(dir() / "daemon.err").find("cut off: message too big") !=
               std::string::npos;
      },
      [&] { return read_text(dir() / "daemon.err"); }));
  // The well-behaved client is still served.
  EXPECT_EQ(api_ok(client, {{"request", "get_state"}})["state"], "running");
}

TEST_F(JackWebApi, AnAddressBeyondLoopbackNeedsATokenAndAWrongOneIsRefused) {
  write_config("address = \"0.0.0.0\"\n");
  ASSERT_NO_FATAL_FAILURE(launch());
  // A configuration it refuses is a runtime error (exit 1), as any bad configuration file.
  EXPECT_EQ(daemon_->wait_for(testing::long_wait), 1);
  EXPECT_NE(read_text(dir() / "daemon.err").find("web.token"), std::string::npos)
      << read_text(dir() / "daemon.err");

  const std::string token = "correct-horse-battery-staple";
  ASSERT_NO_FATAL_FAILURE(start("address = \"0.0.0.0\"\ntoken = \"" + token + "\"\n"));
  int status = 0;
  WebsocketClient none(port_, "/ws", &status);
  EXPECT_EQ(status, 401);
  std::string wrong_last = token, wrong_first = token;
  wrong_last.back() = 'X';
  wrong_first.front() = 'X';
  for (const auto& wrong : {wrong_last, wrong_first, token + "X", token.substr(1)}) {
    WebsocketClient refused(port_, "/ws?token=" + wrong, &status);
    EXPECT_EQ(status, 401) << wrong;
    EXPECT_FALSE(refused.open());
  }
  WebsocketClient right(port_, "/ws?token=" + token, &status);
  EXPECT_EQ(status, 101);
  ASSERT_TRUE(right.open());
  EXPECT_EQ(api_ok(right, {{"request", "get_state"}})["state"], "running");
  EXPECT_NE(read_text(dir() / "daemon.err").find("wrong or missing token"), std::string::npos);
}

TEST_F(JackWebApi, AFloodingClientIsCutOffWhileAnotherKeepsItsMetersAndNoPeriodIsLate) {
  ASSERT_NO_FATAL_FAILURE(start());
  WebsocketClient watcher(port_, "/ws");
  ASSERT_TRUE(watcher.open());

  // A client subscribed at 50 ms, read on a thread of its own throughout.
  std::atomic<bool> stop{false};
  std::vector<Clock::time_point> events;  // read after the reader has joined
  std::atomic<int> event_count{0};
  WebsocketClient subscriber(port_, "/ws");
  ASSERT_TRUE(subscriber.open());
  api_ok(subscriber, {{"request", "subscribe_meters"}, {"interval_ms", 50}});
  std::thread reader([&] {
    while (!stop.load()) {
      const auto message = subscriber.receive(std::chrono::seconds(2));
      if (!message) break;
      if (json::parse(*message).value("event", "") == "meters") {
        events.push_back(Clock::now());
        event_count.fetch_add(1);
      }
    }
  });
  // The subscription runs: a few meter events have come.
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait, [&] { return event_count.load() >= 3; },
      [&] { return std::to_string(event_count.load()) + " meter events"; }));
  const json before = api_ok(watcher, {{"request", "get_stats"}});

  const auto flood_started = Clock::now();
  WebsocketClient flood(port_, "/ws");
  ASSERT_TRUE(flood.open());
  int sent = 0;
  while (sent < 5000 && flood.send(R"({"request":"get_stats"})")) ++sent;
  int replies = 0;
  while (flood.receive(std::chrono::seconds(2))) ++replies;  // until the server closes
  // After the flood, the subscriber is still served: 5 more events (250 ms).
  const int after_flood = event_count.load();
  EXPECT_TRUE(testing::wait_until(
      testing::long_wait, [&] { return event_count.load() >= after_flood + 5; },
      [&] {
        return std::to_string(event_count.load() - after_flood) + " events after the flood";
      }));
  const json after = api_ok(watcher, {{"request", "get_stats"}});
  const auto flood_ended = Clock::now();
  stop.store(true);
  reader.join();

  EXPECT_LT(replies, 1000) << "a flood of " << sent << " requests was answered";
  EXPECT_NE(read_text(dir() / "daemon.err").find("cut off: more than the allowed requests"),
            std::string::npos)
      << read_text(dir() / "daemon.err");
  // The subscriber's meters went on at their interval through the flood.
  double longest_gap_ms = 0;
  int during = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i] < flood_started || events[i] > flood_ended) continue;
    ++during;
    if (i > 0) {
      longest_gap_ms =
          std::max(longest_gap_ms,
                   std::chrono::duration<double, std::milli>(events[i] - events[i - 1]).count());
    }
  }
  const double window_ms =
      std::chrono::duration<double, std::milli>(flood_ended - flood_started).count();
  std::printf("flood: %d sent, %d answered; meters: %d events in %.0f ms, longest gap %.0f ms\n",
              sent, replies, during, window_ms, longest_gap_ms);
  EXPECT_GE(during, static_cast<int>(window_ms / 50 / 2)) << "at least half the meter events";
  EXPECT_LT(longest_gap_ms, 500.0);
  // The audio went on undisturbed.
  std::printf("blocks %llu -> %llu; underruns %llu, overruns %llu, late periods %llu\n",
              before["blocks"].get<unsigned long long>(), after["blocks"].get<unsigned long long>(),
              after["underruns"].get<unsigned long long>(),
              after["overruns"].get<unsigned long long>(),
              after["late_periods"].get<unsigned long long>());
  EXPECT_GT(after["blocks"].get<std::uint64_t>(), before["blocks"].get<std::uint64_t>());
  for (const char* counter : {"underruns", "overruns", "late_periods", "engine_errors"}) {
    EXPECT_EQ(after[counter], before[counter]) << counter;
  }
}

TEST_F(JackWebApi, AFaderMoveReachesTheRecordedOutputWithinOnePeriodPlusTheRamp) {
  ASSERT_NO_FATAL_FAILURE(start());
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());
  const double ramp_ms = api_ok(client, {{"request", "get_info"}})["ramp_ms"].get<double>();
  const auto ramp_frames = static_cast<std::int64_t>(std::lround(ramp_ms * rate / 1000));

  graph_.armed.store(true, std::memory_order_release);
  const auto recorded_text = [&] {
    return std::to_string(graph_.recorded.load()) + " of " + std::to_string(record_frames) +
           " frames recorded";
  };
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] { return graph_.recorded.load(std::memory_order_acquire) >= record_frames / 3; },
      recorded_text));
  // Counted on the output's own clock, the recorded frames (JACK's frame
  // time estimate runs ahead of the cycles of a server that a loaded machine
  // delays): every cycle recorded before the request preceded it; the cycle
  // after the one being recorded at the answer comes after it.
  const auto asked = static_cast<std::int64_t>(graph_.recorded.load(std::memory_order_acquire));
  api_ok(client, {{"request", "set_volume"}, {"channel", "master"}, {"db", -20}});
  const auto answered =
      static_cast<std::int64_t>(graph_.recorded.load(std::memory_order_acquire)) - asked;
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] { return graph_.recorded.load(std::memory_order_acquire) >= record_frames; },
      recorded_text))
      << "the recording did not finish";

  const std::vector<float>& r = graph_.recording;
  const float target = level * 0.1f;  // -20 dB
  const auto first_change =
      std::find_if(r.begin(), r.end(), [](float x) { return std::abs(x - level) > 1e-4f; });
  const auto at_target =
      std::find_if(r.begin(), r.end(), [&](float x) { return std::abs(x - target) < 1e-4f; });
  ASSERT_NE(first_change, r.end()) << "the level never changed";
  ASSERT_NE(at_target, r.end()) << "the level never reached -20 dB";
  const auto start = (first_change - r.begin()) - asked;
  const auto end = (at_target - r.begin()) - asked;
  std::printf(
      "fader: asked at output frame 0, answered at %lld; ramp from %lld to %lld (%lld "
      "frames)\n",
      static_cast<long long>(answered), static_cast<long long>(start), static_cast<long long>(end),
      static_cast<long long>(end - start));
  // Not before it was asked, done within one period plus the ramp of the
  // answer, linear over the ramp, and steady after it.
  EXPECT_GE(start, 0);
  EXPECT_LE(end, answered + static_cast<std::int64_t>(period) + ramp_frames);
  EXPECT_NEAR(static_cast<double>(end - start), static_cast<double>(ramp_frames), 2.0);
  const auto halfway = first_change + (at_target - first_change) / 2;
  EXPECT_NEAR(*halfway, (level + target) / 2, 0.01);
  EXPECT_TRUE(std::all_of(at_target, r.end(), [&](float x) {
    return std::abs(x - target) < 1e-4f;
  })) << "the level stays at -20 dB";
}

}  // namespace
}  // namespace tapstream

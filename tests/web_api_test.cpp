// The websocket API against a running `tapstream run`: every request type,
// bad requests with their typed errors, the same model on the Unix socket,
// a token, a flooding and an oversized client, meter pushes, and volume and
// mute surviving a restart through the state file. The daemon streams a
// sine from a file paced at the sample rate, as a device would, so the
// audio path runs in real time while the clients work.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "daemon/control/control_socket.hpp"
#include "daemon/control/ctl_request.hpp"
#include "daemon/control/websocket_server.hpp"
#include "tests/process_support.hpp"
#include "tests/wait_for.hpp"
#include "tests/web_api_support.hpp"
#include "tests/websocket_client.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::api_ok;
using testing::Child;
using testing::expect_bad_requests_get_typed_errors;
using testing::expect_every_request_type_answers_as_documented;
using testing::free_port;
using testing::read_text;
using testing::TempDir;
using testing::WebsocketClient;

constexpr int rate = 48000;
constexpr double amplitude = 0.5;

class WebApi : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_stereo_wav(dir_ / "in.wav", rate, 120, [](std::uint32_t i) {
      return amplitude * std::sin(2 * M_PI * 440.0 * i / rate);
    });
    std::ofstream(dir_ / "unit.txt") << "1.0\n";
    port_ = free_port();
  }

  // Starts the daemon; `extra` is appended to the configuration.
  void start(const std::string& extra = "") {
    std::ofstream(dir_ / "live.toml")
        << "sample_rate = 48000\nblock_frames = 256\nchannels = 2\n"
        << "[input]\nfile = \"in.wav\"\nrealtime = true\n"
        << "[output]\nfile = \"out.wav\"\n"
        << "[filter]\nfile = \"unit.txt\"\nmax_taps = 1024\nwatch = false\n"
        << "[control]\nsocket = \"sock/control.sock\"\n"
        << "[state]\nfile = \"state.json\"\n"
        << "[web]\nport = " << port_ << "\n"
        << extra;
    daemon_ = std::make_unique<Child>(std::vector<std::string>{TAPSTREAM_BINARY, "run", "--config",
                                                               (dir_ / "live.toml").string()},
                                      dir_ / "daemon.out", dir_ / "daemon.err");
    ASSERT_TRUE(testing::wait_for_daemon(
        *daemon_,
        [&] { return read_text(dir_ / "daemon.out").find("web: http") != std::string::npos; },
        dir_ / "daemon.err"));
  }

  void stop() {
    daemon_->signal(SIGTERM);
    // A clean stop on a signal exits 128 + n (README, exit codes).
    EXPECT_EQ(daemon_->wait_for(std::chrono::seconds(10)), 128 + SIGTERM)
        << read_text(dir_ / "daemon.err");
    daemon_.reset();
  }

  json ok(WebsocketClient& client, const json& request) { return api_ok(client, request); }

  TempDir dir_{"tapstream-web"};
  int port_ = 0;
  std::unique_ptr<Child> daemon_;
};

TEST_F(WebApi, EveryRequestTypeAnswersAsDocumented) {
  ASSERT_NO_FATAL_FAILURE(start());
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());

  expect_every_request_type_answers_as_documented(client, rate, amplitude,
                                                  amplitude / std::sqrt(2.0));
}

TEST_F(WebApi, BadRequestsGetTypedErrorsAndEveryConfigProblemAtOnce) {
  ASSERT_NO_FATAL_FAILURE(start());
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());
  expect_bad_requests_get_typed_errors(client);

  const json check = ok(client, {{"request", "validate_config"},
                                 {"text",
                                  "sample_rate = 5\nblock_frames = 0\nbogus = 1\n"
                                  "[filter]\nfile = \"unit.txt\"\ngain_db = 99\n"}});
  EXPECT_FALSE(check["valid"].get<bool>());
  const std::string all = check["errors"].dump();
  for (const char* culprit : {"sample_rate = 5", "block_frames = 0", "'bogus'", "filter.gain_db"}) {
    EXPECT_NE(all.find(culprit), std::string::npos) << culprit << " not in " << all;
  }
  // The running configuration is untouched.
  EXPECT_EQ(ok(client, {{"request", "get_info"}})["block_frames"], 256);

  // The same request model on the Unix control socket, one JSON line.
  const json over_socket = json::parse(
      control_request(dir_ / "sock/control.sock", R"({"id":5,"request":"get_volume"})"));
  EXPECT_EQ(over_socket["id"], 5);
  EXPECT_TRUE(over_socket["ok"].get<bool>());
  const json no_subscription = json::parse(control_request(
      dir_ / "sock/control.sock", R"({"request":"subscribe_meters","interval_ms":50})"));
  EXPECT_EQ(no_subscription["error"]["type"], "not_allowed");
}

TEST_F(WebApi, TheSocketsStatusIsTheWebsocketsGetStatusAndItsViews) {
  ASSERT_NO_FATAL_FAILURE(start());
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());
  const fs::path socket = dir_ / "sock/control.sock";
  const json over_websocket = ok(client, {{"request", "get_status"}});
  json printed = json::parse(ctl_exchange(socket, "status"));  // what `ctl status` prints
  EXPECT_EQ(printed["ok"], true);
  printed.erase("ok");
  const json over_socket =
      json::parse(control_request(socket, R"({"request":"get_status"})"))["result"];
  const auto keys = [](const json& document) {
    std::vector<std::string> names;
    for (const auto& [key, value] : document.items()) names.push_back(key);
    return names;
  };
  EXPECT_EQ(keys(printed), keys(over_websocket));
  EXPECT_EQ(keys(over_socket), keys(over_websocket));
  // The keys `ctl status` always printed, the web API's too.
  for (const char* key : {"backend", "processing_us", "filters", "matrix", "inputs", "outputs",
                          "uptime_s", "late_unstarted", "block_us", "load", "state", "max_taps"}) {
    EXPECT_TRUE(over_websocket.contains(key)) << key;
  }
  // What does not move while audio runs is equal; the counters move on.
  for (const char* key :
       {"backend", "engine", "input", "output", "sample_rate", "block_frames", "channels",
        "latency_frames", "latency_ms", "latency_mode", "inputs", "outputs", "matrix", "filters",
        "max_taps", "max_gain_db", "realtime", "ramp_ms", "state"}) {
    EXPECT_EQ(printed[key], over_websocket[key]) << key;
    EXPECT_EQ(over_socket[key], over_websocket[key]) << key;
  }
  // get_state, get_info and get_stats are views of the same document.
  const json info = ok(client, {{"request", "get_info"}});
  for (const auto& [key, value] : info.items()) EXPECT_EQ(value, over_websocket[key]) << key;
  for (const char* request : {"get_state", "get_stats"}) {
    const json view = ok(client, {{"request", request}});
    for (const auto& [key, value] : view.items()) {
      EXPECT_TRUE(over_websocket.contains(key)) << request << ": " << key;
    }
  }
}

TEST_F(WebApi, MetersArePushedAtTheRequestedInterval) {
  ASSERT_NO_FATAL_FAILURE(start());
  WebsocketClient client(port_, "/ws");
  ok(client, {{"request", "subscribe_meters"}, {"interval_ms", 50}});
  const auto started = std::chrono::steady_clock::now();
  int events = 0;
  while (events < 10) {
    const auto message = client.receive();
    ASSERT_TRUE(message.has_value());
    const json event = json::parse(*message);
    ASSERT_EQ(event["event"], "meters");
    EXPECT_EQ(event["levels"].size(), 2u);
    ++events;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_GT(seconds, 0.4);  // not faster than asked
  EXPECT_LT(seconds, 2.0);  // nor much slower, even on a loaded machine
}

TEST_F(WebApi, AListenerThatAnswersPingsStaysAndOneThatHangsIsClosed) {
  // A page that only watches the meters sends nothing for as long as it is
  // open; the server's pings must keep it, and close a client that is gone.
  ASSERT_NO_FATAL_FAILURE(start("idle_timeout_s = 2\n"));
  WebsocketClient listener(port_, "/ws");
  WebsocketClient hung(port_, "/ws");
  hung.answer_pings(false);
  ok(listener, {{"request", "subscribe_meters"}, {"interval_ms", 100}});
  ok(hung, {{"request", "subscribe_meters"}, {"interval_ms", 100}});
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_TRUE(listener.receive(std::chrono::seconds(2)).has_value())
        << "closed by the server: " << listener.closed_by_server();
  }
  while (hung.receive(std::chrono::seconds(3)).has_value()) {
  }
  EXPECT_TRUE(hung.closed_by_server());
  EXPECT_EQ(ok(listener, {{"request", "get_state"}})["state"], "running");
  stop();
}

TEST_F(WebApi, ATokenIsComparedAndACrossSiteOriginRefused) {
  const std::string token = "correct-horse-battery-staple";
  ASSERT_NO_FATAL_FAILURE(start("token = \"" + token + "\"\n"));
  int status = 0;
  WebsocketClient none(port_, "/ws", &status);
  EXPECT_EQ(status, 401);
  EXPECT_FALSE(none.open());
  WebsocketClient wrong(port_, "/ws?token=correct-horse-battery-stapl", &status);
  EXPECT_EQ(status, 401);
  WebsocketClient right(port_, "/ws?token=" + token, &status);
  EXPECT_EQ(status, 101);
  EXPECT_TRUE(right.open());
  ok(right, {{"request", "get_state"}});
  WebsocketClient bearer(port_, "/ws", &status, "Authorization: Bearer " + token + "\r\n");
  EXPECT_EQ(status, 101);
  WebsocketClient cross_site(port_, "/ws?token=" + token, &status,
                             "Origin: http://evil.example\r\n");
  EXPECT_EQ(status, 403);
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
}

// A comparison that stopped at the first difference would take ~4096 times
// longer for a token wrong in its last character than in its first; the
// shortest of many timed runs of each, interleaved, sheds the machine's noise.
TEST(TokenComparison, TakesAsLongWhereverTheFirstDifferenceIs) {
  const std::string token(4096, 'k');
  std::string wrong_first = token, wrong_last = token;
  wrong_first.front() = 'x';
  wrong_last.back() = 'x';
  const auto shortest_run = [&](const std::string& given) {
    const auto started = std::chrono::steady_clock::now();
    int equal = 0;
    for (int i = 0; i < 200; ++i) equal += constant_time_equal(given, token) ? 1 : 0;
    EXPECT_EQ(equal, 0);
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started)
        .count();
  };
  double first = 1e18, last = 1e18;
  for (int run = 0; run < 30; ++run) {
    first = std::min(first, shortest_run(wrong_first));
    last = std::min(last, shortest_run(wrong_last));
  }
  std::printf("200 comparisons of 4096 characters: %.1f us (first differs), %.1f us (last)\n",
              first, last);
  EXPECT_LT(last / first, 2.0);
  EXPECT_LT(first / last, 2.0);
}

TEST_F(WebApi, FloodingAndOversizedClientsAreCutOffWhileOthersAndTheAudioGoOn) {
  // The bucket refills as the server reads, so a server slower than the rate
  // (AddressSanitizer on a loaded 2-core machine: one CI run answered all
  // 5000) never runs it dry: the rate is set well below what such a server
  // answers.
  const int rate = 20;
  ASSERT_NO_FATAL_FAILURE(start("requests_per_second = " + std::to_string(rate) + "\n"));
  WebsocketClient watcher(port_, "/ws");
  const json before = ok(watcher, {{"request", "get_stats"}});

  // From before the connection: the server's bucket fills from its opening.
  const auto flood_started = std::chrono::steady_clock::now();
  WebsocketClient flood(port_, "/ws");
  ASSERT_TRUE(flood.open());
  int sent = 0;
  while (sent < 5000 && flood.send(R"({"request":"get_stats"})")) ++sent;
  // The server stops answering and closes: reading reaches the end.
  int replies = 0;
  while (flood.receive(std::chrono::seconds(2))) ++replies;
  const double flood_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - flood_started).count();
  EXPECT_LT(replies, sent) << "a flood of " << sent << " requests was answered";
  // The token bucket's bound: its burst and its rate over the flood's time
  // (a slow server on a loaded machine answers longer before it runs out,
  // never more than this).
  EXPECT_LE(replies, 2 * rate + rate * flood_seconds + 1)
      << sent << " requests over " << flood_seconds << " s";

  WebsocketClient big(port_, "/ws");
  ASSERT_TRUE(big.open());
  big.send(std::string(13 << 20, ' '));
  EXPECT_FALSE(big.receive(std::chrono::seconds(5)).has_value());

  // The audio goes on: the block count moves on past the one before the flood.
  json after;
  EXPECT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] {
        after = ok(watcher, {{"request", "get_stats"}});
        return after["blocks"].get<std::uint64_t>() > before["blocks"].get<std::uint64_t>();
      },
      [&] { return after.dump(); }, std::chrono::milliseconds(100)));  // within the rate
  EXPECT_EQ(ok(watcher, {{"request", "get_state"}})["state"], "running");
  // Logged once the server has closed the connection: poll the log.
  EXPECT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] { return read_text(dir_ / "daemon.err").find("cut off") != std::string::npos; },
      [&] { return read_text(dir_ / "daemon.err"); }));
}

TEST_F(WebApi, VolumeMuteAndAnUploadedFilterSurviveARestart) {
  ASSERT_NO_FATAL_FAILURE(start());
  {
    WebsocketClient client(port_, "/ws");
    ok(client, {{"request", "set_volume"}, {"channel", 0}, {"db", -12.5}});
    ok(client, {{"request", "set_mute"}, {"channel", "master"}, {"muted", true}});
    ok(client, {{"request", "upload_filter"},
                {"channel", "all"},
                {"name", "two.txt"},
                {"data", "0.5\n0.5\n"}});
  }
  stop();
  const json state = json::parse(read_text(dir_ / "state.json"));
  EXPECT_EQ(state["channels"][0]["db"], -12.5);
  EXPECT_TRUE(state["master"]["muted"].get<bool>());

  ASSERT_NO_FATAL_FAILURE(start());
  WebsocketClient client(port_, "/ws");
  const json volume = ok(client, {{"request", "get_volume"}});
  EXPECT_EQ(volume["channels"][0]["db"], -12.5);
  EXPECT_TRUE(volume["master"]["muted"].get<bool>());
  EXPECT_EQ(ok(client, {{"request", "get_state"}})["state"], "paused");
  const json filters = ok(client, {{"request", "list_filters"}})["filters"];
  EXPECT_EQ(filters[0]["taps"], 2);
  EXPECT_NE(filters[1]["source"].get<std::string>().find("two.txt"), std::string::npos);
}

TEST_F(WebApi, ThePageIsServedAndPathsOutsideItAreNot) {
  ASSERT_NO_FATAL_FAILURE(start("root = \"" + std::string(TAPSTREAM_SOURCE_DIR) + "/web\"\n"));
  const auto get = [&](const std::string& path) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port_));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    const std::string request = "GET " + path +
                                " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port_) +
                                "\r\nConnection: close\r\n\r\n";
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string response;
    char buffer[4096];
    ssize_t n;
    while ((n = ::recv(fd, buffer, sizeof buffer, 0)) > 0) response.append(buffer, n);
    ::close(fd);
    return response;
  };
  EXPECT_NE(get("/").find("<title>tapstream</title>"), std::string::npos);
  EXPECT_NE(get("/app.js").find("text/javascript"), std::string::npos);
  EXPECT_EQ(get("/../CMakeLists.txt").find("200 OK"), std::string::npos);
  EXPECT_NE(get("/nothing.js").find("404"), std::string::npos);
}

}  // namespace
}  // namespace tapstream

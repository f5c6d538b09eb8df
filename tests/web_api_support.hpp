#pragma once
// Test support for the suites that drive the control API over the websocket
// (web_api_test against a file paced at the sample rate, jack_web_api_test
// against a JACK device): a free loopback port, requests with their replies
// as JSON, and the checks both suites make of every request type and of bad
// requests, whatever steers the audio.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/process_support.hpp"
#include "tests/wait_for.hpp"
#include "tests/websocket_client.hpp"

namespace tapstream::testing {

// A TCP port on 127.0.0.1 that was free a moment ago.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

// A 16-bit PCM stereo WAV of `seconds` at `rate`, both channels carrying
// `sample(frame)` (in -1..1; nothing: silence): the input a paced file
// endpoint plays to a daemon under test.
inline void write_stereo_wav(const std::filesystem::path& file, int rate, double seconds,
                             const std::function<double(std::uint32_t frame)>& sample = {}) {
  const auto frames = static_cast<std::uint32_t>(seconds * rate);
  const std::uint32_t bytes = frames * 2 * 2;
  std::ofstream out(file, std::ios::binary);
  const auto u32 = [&](std::uint32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  const auto u16 = [&](std::uint16_t v) { out.write(reinterpret_cast<const char*>(&v), 2); };
  out.write("RIFF", 4);
  u32(36 + bytes);
  out.write("WAVEfmt ", 8);
  u32(16);
  u16(1);  // PCM
  u16(2);  // channels
  u32(static_cast<std::uint32_t>(rate));
  u32(static_cast<std::uint32_t>(rate) * 4);
  u16(4);
  u16(16);
  out.write("data", 4);
  u32(bytes);
  std::vector<std::int16_t> samples(std::size_t(frames) * 2, 0);
  if (sample) {
    for (std::uint32_t i = 0; i < frames; ++i) {
      const auto s = static_cast<std::int16_t>(std::lround(32767 * sample(i)));
      samples[2 * i] = samples[2 * i + 1] = s;
    }
  }
  out.write(reinterpret_cast<const char*>(samples.data()), static_cast<std::streamsize>(bytes));
}

// The reply to `request`, parsed (an empty object, and a failure, if none came).
inline nlohmann::json api_call(WebsocketClient& client, const nlohmann::json& request) {
  const auto reply = client.request(request.dump());
  if (!reply) {
    ADD_FAILURE() << "no reply to " << request.dump();
    return nlohmann::json::object();
  }
  return nlohmann::json::parse(*reply);
}

// The result of a request that must succeed.
inline nlohmann::json api_ok(WebsocketClient& client, const nlohmann::json& request) {
  nlohmann::json reply = api_call(client, request);
  EXPECT_EQ(reply.value("ok", false), true) << request.dump() << " -> " << reply.dump();
  return reply.value("result", nlohmann::json());
}

// "type: message" of the error that the request `text` must get.
inline std::string api_error(WebsocketClient& client, const std::string& text) {
  const auto reply = client.request(text);
  if (!reply) return "no reply";
  const nlohmann::json parsed = nlohmann::json::parse(*reply);
  EXPECT_FALSE(parsed.value("ok", true)) << *reply;
  return parsed["error"].value("type", "") + ": " + parsed["error"].value("message", "");
}

// Every request of docs/api.md, in order, against a daemon of 2 channels
// with a 1-tap unit filter, 256-frame blocks and meters reading `peak` and
// `rms` on both channels. Changes volume, mute, filters and configuration.
inline void expect_every_request_type_answers_as_documented(WebsocketClient& client,
                                                            int sample_rate, double peak,
                                                            double rms) {
  using json = nlohmann::json;
  const json requests = api_ok(client, {{"request", "list_requests"}});
  EXPECT_EQ(requests.size(), 25u);
  // get_trace is the socket owner's (the websocket is refused: api_hostile_client_test).
  EXPECT_NE(std::find(requests.begin(), requests.end(), "get_trace"), requests.end());
  const json reply = api_call(client, {{"id", "x-1"}, {"request", "get_state"}});
  EXPECT_EQ(reply["id"], "x-1");
  EXPECT_EQ(reply["result"]["state"], "running");
  const json info = api_ok(client, {{"request", "get_info"}});
  EXPECT_EQ(info["channels"], 2);
  EXPECT_EQ(info["sample_rate"], sample_rate);
  EXPECT_GT(info["latency_ms"].get<double>(), 0.0);
  const json stats = api_ok(client, {{"request", "get_stats"}});
  for (const char* key :
       {"blocks", "underruns", "overruns", "late_frames", "late_periods", "late_unstarted",
        "nonfinite_inputs", "clipped", "swaps", "rejected_swaps", "load", "block_us"}) {
    EXPECT_TRUE(stats.contains(key)) << key;
  }
  // The one status document, of which get_state, get_info and get_stats are views.
  const json status = api_ok(client, {{"request", "get_status"}});
  EXPECT_EQ(status["channels"], 2);
  EXPECT_EQ(status["filters"].size(), 2u);
  EXPECT_EQ(status["matrix"]["paths"].size(), 2u);
  EXPECT_EQ(status["block_us"]["period"], status["processing_us"]["block_period"]);
  EXPECT_EQ(status["sample_rate"], sample_rate);
  // The meters read the input's level once it has come through the ring
  // (tens of ms after start-up): polled every 50 ms, each read covering the
  // periods since the one before.
  json levels;
  const auto reads = [&](double want_peak, double want_rms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // pacing: a window of periods
    levels = api_ok(client, {{"request", "get_meters"}})["levels"];
    return levels.size() == 2u &&
           std::abs(levels[0]["peak_since"].get<double>() - want_peak) < 0.01 &&
           std::abs(levels[1]["rms_since"].get<double>() - want_rms) < 0.01;
  };
  EXPECT_TRUE(wait_until(
      long_wait, [&] { return reads(peak, rms); }, [&] { return levels.dump(); }))
      << "meters reading peak " << peak << " and rms " << rms;

  api_ok(client, {{"request", "set_volume"}, {"channel", "master"}, {"db", -20}});
  json volume = api_ok(client, {{"request", "set_mute"}, {"channel", 1}, {"muted", true}});
  EXPECT_EQ(volume["master"]["db"], -20.0);
  EXPECT_EQ(volume["channels"][1]["muted"], true);
  EXPECT_EQ(api_ok(client, {{"request", "get_volume"}}), volume);
  // The change reaches the audio within one period plus the 20 ms ramp;
  // the meters then read the new level (when it reaches the audio is
  // jack_web_api_test's AFaderMove..., counted in frames).
  EXPECT_TRUE(wait_until(
      long_wait,
      [&] {
        return reads(peak * 0.1, 0.0) &&
               std::abs(levels[0]["peak_since"].get<double>() - peak * 0.1) < 0.002 &&
               levels[1]["peak_since"].get<double>() == 0.0;
      },
      [&] { return levels.dump(); }))
      << "meters reading peak " << peak * 0.1 << " on channel 0, silence on channel 1";

  const json filters = api_ok(client, {{"request", "list_filters"}})["filters"];
  EXPECT_EQ(filters.size(), 2u);
  EXPECT_EQ(filters[0]["taps"], 1);
  const json uploaded = api_ok(client, {{"request", "upload_filter"},
                                        {"channel", 0},
                                        {"name", "three.txt"},
                                        {"data", "0.5\n0.25\n0.125\n"}});
  EXPECT_EQ(uploaded["filters"][0]["taps"], 3);
  EXPECT_EQ(uploaded["filters"][1]["taps"], 1);
  EXPECT_GE(uploaded["swaps"].get<int>(), 1);
  const json taps = api_ok(client, {{"request", "get_filter"}, {"channel", 0}});
  EXPECT_EQ(taps["taps"], json::array({0.5, 0.25, 0.125}));

  const json config = api_ok(client, {{"request", "get_config"}});
  EXPECT_NE(config["text"].get<std::string>().find("block_frames = 256"), std::string::npos);
  const json valid = api_ok(client, {{"request", "validate_config"}, {"text", config["text"]}});
  EXPECT_TRUE(valid["valid"].get<bool>()) << valid.dump();
  const json patched =
      api_ok(client, {{"request", "patch_config"}, {"patch", {{"filter", {{"gain_db", -6}}}}}});
  EXPECT_NE(patched["text"].get<std::string>().find("gain_db = -6"), std::string::npos);
  api_ok(client, {{"request", "apply_config"}, {"text", config["text"]}});
  api_ok(client, {{"request", "undo_config"}});
  api_ok(client, {{"request", "subscribe_meters"}, {"interval_ms", 50}});
  api_ok(client, {{"request", "unsubscribe_meters"}});
  const json log = api_ok(client, {{"request", "get_log"}, {"lines", 50}});
  EXPECT_FALSE(log["lines"].empty());
}

// Malformed requests, unknown types and wrong arguments, each with its
// typed error, against a daemon of 2 channels; the connection stays.
inline void expect_bad_requests_get_typed_errors(WebsocketClient& client) {
  EXPECT_EQ(api_error(client, "{not json").substr(0, 12), "bad_request:");
  EXPECT_EQ(api_error(client, "[1,2]"), "bad_request: a request is a JSON object");
  EXPECT_EQ(api_error(client, "{\"id\":1}"), "bad_request: missing field 'request'");
  EXPECT_EQ(api_error(client, "{\"request\":\"fly\"}"),
            "unknown_request: unknown request 'fly' (list_requests lists them)");
  EXPECT_EQ(api_error(client, R"({"request":"set_volume","channel":9,"db":0})"),
            "invalid_value: channel 9 does not exist (0..1)");
  EXPECT_EQ(api_error(client, R"({"request":"set_volume","channel":"left","db":0})"),
            "bad_request: 'channel' must be \"master\" or a channel number from 0");
  EXPECT_EQ(api_error(client, R"({"request":"set_volume","channel":0})"),
            "bad_request: missing field 'db'");
  EXPECT_EQ(api_error(client, R"({"request":"set_mute","channel":0,"muted":"yes"})"),
            "bad_request: 'muted' must be true or false");
  EXPECT_EQ(api_error(client, R"({"request":"subscribe_meters","interval_ms":1})"),
            "invalid_value: interval_ms must be between 20 and 10000");
  EXPECT_EQ(
      api_error(client,
                R"({"request":"upload_filter","channel":"all","name":"b.txt","data":"1\nx\n"})")
          .substr(0, 9),
      "rejected:");
  EXPECT_EQ(api_error(client, R"({"request":"undo_config"})"), "invalid_value: nothing to undo");
}

}  // namespace tapstream::testing

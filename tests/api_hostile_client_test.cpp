// A hostile client of the control API, through the websocket and the Unix
// socket, against a running `tapstream run`: every key that names a file, a
// device or a listener is refused by name and nothing of the request is
// applied; a filter file outside the configuration's folder (spelled or
// through a symlink) is never read; the text of a file the API did not
// upload is never echoed, in a reply or the log; gains stop at 0 dB unless
// the configuration file raises [control] max_gain_db; uploads are bounded;
// a configuration the next start would refuse is not stored; a 6 KB
// apply_config passes on the socket and an oversized request gets a clear
// error. What the owner may do on the socket (`load` of any file, `reload`,
// `stop`) still works, and the websocket cannot do it. set_paths (taps in the
// request, base64 or a binary frame) installs what it names, and refuses
// bad base64, a wrong length, NaN or infinity, an unknown path, too many
// taps and malformed frames by name, applying nothing.

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "daemon/control/control_socket.hpp"
#include "daemon/control/ctl_request.hpp"
#include "daemon/control/request_size.hpp"
#include "tests/process_support.hpp"
#include "tests/web_api_support.hpp"
#include "tests/websocket_client.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::api_call;
using testing::api_ok;
using testing::Child;
using testing::free_port;
using testing::read_text;
using testing::TempDir;
using testing::WebsocketClient;

constexpr int rate = 48000;
constexpr const char* secret = "SECRET-MARKER-7f3a";

// The error of a request that must be refused: "type: message".
std::string refusal(const json& reply) {
  EXPECT_FALSE(reply.value("ok", true)) << reply.dump();
  if (!reply.contains("error")) return "";
  return reply["error"].value("type", "") + ": " + reply["error"].value("message", "");
}

// Base64 of `floats` as little-endian float32 (set_paths' taps_base64).
std::string base64_floats(const std::vector<float>& floats) {
  static constexpr char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes;
  for (const float f : floats) {
    std::uint32_t word;
    std::memcpy(&word, &f, 4);
    for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>((word >> (8 * b)) & 0xff));
  }
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    std::uint32_t chunk = 0;
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    for (std::size_t k = 0; k < 3; ++k)
      chunk = (chunk << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k)
      out.push_back(k <= n ? alphabet[(chunk >> (18 - 6 * k)) & 63] : '=');
  }
  return out;
}

// A set_paths binary frame: the header's length (4 bytes, little-endian),
// the JSON header, then the taps as little-endian float32.
std::string binary_frame(const json& header, const std::vector<float>& taps) {
  const std::string text = header.dump();
  std::string frame;
  const auto length = static_cast<std::uint32_t>(text.size());
  for (int b = 0; b < 4; ++b) frame.push_back(static_cast<char>((length >> (8 * b)) & 0xff));
  frame += text;
  for (const float f : taps) {
    std::uint32_t word;
    std::memcpy(&word, &f, 4);
    for (int b = 0; b < 4; ++b) frame.push_back(static_cast<char>((word >> (8 * b)) & 0xff));
  }
  return frame;
}

class HostileClient : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_stereo_wav(dir_ / "in.wav", rate, 120);
    std::ofstream(dir_ / "unit.txt") << "1.0\n";
    std::ofstream(dir_ / "other.txt") << "0.5\n";
    std::ofstream(dir_ / "three.txt") << "0.5\n0.25\n0.125\n";
    // A file in the folder that is not a filter, holding something private.
    std::ofstream(dir_ / "notes.txt") << "password = " << secret << "\n";
    std::ofstream(outside_ / "secret.txt") << "root:" << secret << ":20228:0:99999:7:::\n";
    std::ofstream(outside_ / "valid.txt") << "0.25\n";
    fs::create_symlink(outside_ / "secret.txt", dir_ / "escape.txt");
    port_ = free_port();
  }

  void TearDown() override {
    if (daemon_) stop();
  }

  // The configuration: `control` is appended to its [control] table, `rest` at its end.
  void write_config(const std::string& control = "", const std::string& rest = "",
                    bool watch = false) {
    std::ofstream(dir_ / "live.toml")
        << "sample_rate = 48000\nblock_frames = 256\nchannels = 2\n"
        << "[input]\nfile = \"in.wav\"\nrealtime = true\n"
        << "[output]\nfile = \"out.wav\"\n"
        << "[filter]\nfile = \"unit.txt\"\nmax_taps = 1024\nwatch = " << (watch ? "true" : "false")
        << "\n[control]\nsocket = \"sock/control.sock\"\n"
        << control << "[state]\nfile = \"state.json\"\n"
        << "[web]\nport = " << port_ << "\n"
        << rest;
  }

  // Starts the daemon; `control` is appended to its [control] table.
  void start(const std::string& control = "", bool watch = false) {
    write_config(control, "", watch);
    daemon_ = std::make_unique<Child>(std::vector<std::string>{TAPSTREAM_BINARY, "run", "--config",
                                                               (dir_ / "live.toml").string()},
                                      dir_ / "daemon.out", dir_ / "daemon.err");
    // The web server starts first, then the control socket.
    ASSERT_TRUE(testing::wait_for_daemon(
        *daemon_,
        [&] {
          return read_text(dir_ / "daemon.out").find("web: http") != std::string::npos &&
                 fs::exists(socket());
        },
        dir_ / "daemon.err"));
  }

  void stop() {
    daemon_->signal(SIGTERM);
    EXPECT_EQ(daemon_->wait_for(std::chrono::seconds(10)), 128 + SIGTERM)
        << read_text(dir_ / "daemon.err");
    daemon_.reset();
  }

  json socket_call(const json& request) {
    return json::parse(control_request(socket(), request.dump()));
  }
  fs::path socket() const { return dir_ / "sock/control.sock"; }

  std::size_t uploads() const {
    std::size_t count = 0;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(dir_ / "tapstream-uploads", error)) {
      count += entry.is_regular_file() ? 1 : 0;
    }
    return count;
  }

  TempDir dir_{"tapstream-hostile"};
  TempDir outside_{"tapstream-outside"};
  int port_ = 0;
  std::unique_ptr<Child> daemon_;
};

TEST_F(HostileClient, KeysNamingFilesDevicesOrListenersAreRefusedByNameAndNothingApplies) {
  ASSERT_NO_FATAL_FAILURE(start());
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());
  const std::string before = api_ok(client, {{"request", "get_config"}})["text"];

  const std::vector<std::pair<json, std::string>> patches = {
      {{{"output", {{"file", (outside_ / "overwritten.wav").string()}}}}, "output.file"},
      {{{"input", {{"file", nullptr}, {"realtime", nullptr}, {"device", "hw:0"}}}}, "input.device"},
      {{{"input", {{"realtime", false}}}}, "input.realtime"},
      {{{"web", {{"root", "/"}}}}, "web.root"},
      {{{"web", {{"address", "0.0.0.0"}, {"token", "0123456789abcdef-chosen"}}}}, "web.address"},
      {{{"web", {{"port", port_ + 1}}}}, "web.port"},
      {{{"web", {{"token", "0123456789abcdef-chosen"}}}}, "web.token"},
      {{{"state", {{"file", (outside_ / "state.json").string()}}}}, "state.file"},
      {{{"log", {{"file", (outside_ / "tapstream.log").string()}}}}, "log.file"},
      {{{"control", {{"socket", (outside_ / "c.sock").string()}}}}, "control.socket"},
      {{{"control", {{"max_gain_db", 20}}}}, "control.max_gain_db"},
      {{{"control", {{"max_upload_files", 1000}}}}, "control.max_upload_files"},
      {{{"jack", {{"connect_outputs", "evil:.*"}}}}, "jack.connect_outputs"},
  };
  for (const auto& [patch, key] : patches) {
    // With a change that alone would pass: nothing of the request applies.
    json request = {{"request", "patch_config"}, {"patch", patch}};
    request["patch"]["filter"] = {{"gain_db", -6}};
    const std::string error = refusal(api_call(client, request));
    EXPECT_EQ(error.rfind("rejected: ", 0), 0u) << error;
    EXPECT_NE(error.find(key), std::string::npos) << key << " not named in: " << error;
    EXPECT_NE(error.find("configuration file on disk"), std::string::npos) << error;
    // The same on the socket: one model, one set of rules.
    const std::string over_socket = refusal(socket_call(request));
    EXPECT_NE(over_socket.find(key), std::string::npos) << over_socket;
  }
  EXPECT_EQ(api_ok(client, {{"request", "get_config"}})["text"], before);
  EXPECT_EQ(api_ok(client, {{"request", "get_info"}})["output"].get<std::string>(),
            "file " + (dir_ / "out.wav").string());
  const json filters = api_ok(client, {{"request", "list_filters"}})["filters"];
  EXPECT_EQ(filters[0]["source"], (dir_ / "unit.txt").string());
  EXPECT_FALSE(fs::exists(outside_ / "overwritten.wav"));
  EXPECT_FALSE(fs::exists(outside_ / "tapstream.log"));

  // A whole text that moves the output is refused the same way; validate says so too.
  std::string moved = before;
  moved.replace(moved.find("out.wav"), 7, "elsewhere.wav");
  EXPECT_NE(
      refusal(api_call(client, {{"request", "apply_config"}, {"text", moved}})).find("output.file"),
      std::string::npos);
  const json check = api_ok(client, {{"request", "validate_config"}, {"text", moved}});
  EXPECT_FALSE(check["valid"].get<bool>());
  EXPECT_NE(check["errors"].dump().find("output.file"), std::string::npos);
  EXPECT_EQ(refusal(api_call(client, {{"request", "undo_config"}})),
            "invalid_value: nothing to undo");
}

TEST_F(HostileClient, FilterFilesOutsideTheFolderAreRefusedUnreadAndNoFileTextIsEchoed) {
  ASSERT_NO_FATAL_FAILURE(start());
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());
  const auto patch_file = [&](const std::string& file) {
    return api_call(client,
                    {{"request", "patch_config"}, {"patch", {{"filter", {{"file", file}}}}}});
  };
  for (const std::string& file :
       {std::string("/etc/passwd"), (outside_ / "secret.txt").string(),
        std::string("../") + outside_.path().filename().string() + "/secret.txt",
        std::string("escape.txt")}) {
    const std::string error = refusal(patch_file(file));
    EXPECT_NE(error.find("filter.file"), std::string::npos) << error;
    EXPECT_NE(error.find("configuration file's folder"), std::string::npos) << error;
    EXPECT_EQ(error.find(secret), std::string::npos) << error;
    EXPECT_EQ(error.find("root:"), std::string::npos) << error;
  }
  // files = [...] and matrix are held to the same folder.
  EXPECT_NE(
      refusal(api_call(client, {{"request", "patch_config"},
                                {"patch",
                                 {{"filter",
                                   {{"file", nullptr}, {"files", {"unit.txt", "/etc/passwd"}}}}}}}))
          .find("filter.files[1]"),
      std::string::npos);

  // A file inside the folder that is no filter: named with its line, never quoted.
  const std::string notes = refusal(patch_file("notes.txt"));
  EXPECT_NE(notes.find((dir_ / "notes.txt").string() + ":1"), std::string::npos) << notes;
  EXPECT_EQ(notes.find(secret), std::string::npos) << notes;
  EXPECT_EQ(notes.find("password"), std::string::npos) << notes;
  // The owner's `ctl load` of a file that is no filter: refused, and neither
  // its reply nor the log (which get_log hands to every API client) quotes it.
  const std::string owner_load =
      ctl_exchange(socket(), "load 0 " + (outside_ / "secret.txt").string());
  EXPECT_NE(owner_load.find("secret.txt:1"), std::string::npos) << owner_load;
  EXPECT_EQ(owner_load.find(secret), std::string::npos) << owner_load;
  const json log = api_ok(client, {{"request", "get_log"}, {"lines", 1000}});
  EXPECT_NE(log.dump().find("secret.txt:1"), std::string::npos);
  EXPECT_EQ(log.dump().find(secret), std::string::npos);
  EXPECT_EQ(read_text(dir_ / "daemon.err").find(secret), std::string::npos);

  // What the owner does on the socket stays: `load` names any file.
  const json loaded =
      json::parse(ctl_exchange(socket(), "load 0 " + (outside_ / "valid.txt").string()));
  EXPECT_TRUE(loaded.value("ok", false)) << loaded.dump();
}

TEST_F(HostileClient, TheWebsocketCannotUseTheOwnersRequests) {
  ASSERT_NO_FATAL_FAILURE(start());
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());
  const std::string valid = (outside_ / "valid.txt").string();
  const std::string inside = (dir_ / "other.txt").string();
  const std::vector<json> owners = {
      {{"request", "stop"}},
      {{"request", "reload"}},
      {{"request", "load"}, {"channel", 0}, {"file", valid}},
      {{"request", "load"}, {"channel", "all"}, {"file", valid}},
      {{"request", "load"}, {"channel", 0}, {"file", inside}},  // even a file in the folder
      {{"request", "load"}, {"input", 0}, {"output", 0}, {"file", valid}},
      {{"request", "load"}, {"matrix", (dir_ / "live.toml").string()}},
      {{"request", "load"}, {"channel", 0}, {"file", "/etc/passwd"}},
      {{"request", "get_trace"}},
  };
  for (const json& request : owners) {
    const std::string error = refusal(api_call(client, request));
    EXPECT_EQ(error.rfind("not_allowed: ", 0), 0u) << request.dump() << " -> " << error;
    EXPECT_NE(error.find("control socket's owner"), std::string::npos) << error;
  }
  // Nothing happened: the daemon runs, its filters are the configuration's.
  EXPECT_TRUE(daemon_->running());
  const json filters = api_ok(client, {{"request", "list_filters"}})["filters"];
  EXPECT_EQ(filters[0]["source"], (dir_ / "unit.txt").string());
  EXPECT_EQ(filters[1]["source"], (dir_ / "unit.txt").string());
  EXPECT_TRUE(api_ok(client, {{"request", "get_status"}}).contains("swaps"));
  // The owner on the socket may.
  EXPECT_TRUE(
      socket_call({{"request", "load"}, {"channel", 0}, {"file", valid}}).value("ok", false));
  EXPECT_EQ(api_ok(client, {{"request", "list_filters"}})["filters"][0]["source"], valid);
}

TEST_F(HostileClient, AnAppliedConfigurationsFiltersRunEvenOverAnUploadAndRestartNeededIsExact) {
  ASSERT_NO_FATAL_FAILURE(start());
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());
  api_ok(client, {{"request", "upload_filter"},
                  {"channel", "all"},
                  {"name", "up.txt"},
                  {"data", "0.5\n0.5\n"}});
  // Another file in the configuration: it runs, not the upload.
  const json applied = api_ok(
      client, {{"request", "patch_config"}, {"patch", {{"filter", {{"file", "other.txt"}}}}}});
  EXPECT_EQ(applied["restart_needed"], json::array());
  for (const json& filter : applied["filters"]) {
    EXPECT_EQ(filter["source"], (dir_ / "other.txt").string()) << applied.dump();
  }
  // A restart key is said, and only it.
  const json slower =
      api_ok(client, {{"request", "patch_config"}, {"patch", {{"block_frames", 512}}}});
  EXPECT_EQ(slower["restart_needed"], json::array({"block_frames"}));
  // An upload over a configured file, then the same configuration again: the
  // reply says that the upload stays, and why.
  api_ok(
      client,
      {{"request", "upload_filter"}, {"channel", 1}, {"name", "up.txt"}, {"data", "0.5\n0.5\n"}});
  const json same =
      api_ok(client, {{"request", "patch_config"}, {"patch", {{"filter", {{"gain_db", -1}}}}}});
  EXPECT_NE(same["summary"].get<std::string>().find("channel 1 keeps"), std::string::npos)
      << same.dump();

  // A configuration the next start would refuse (filters longer than its
  // max_taps) is not stored.
  const std::string refused = refusal(
      api_call(client, {{"request", "patch_config"},
                        {"patch", {{"filter", {{"file", "three.txt"}, {"max_taps", 2}}}}}}));
  EXPECT_NE(refused.find("max_taps"), std::string::npos) << refused;
}

TEST_F(HostileClient, GainsStopAtZeroDecibelsUnlessTheFileRaisesTheLimit) {
  ASSERT_NO_FATAL_FAILURE(start());
  {
    WebsocketClient client(port_, "/ws");
    ASSERT_TRUE(client.open());
    api_ok(client, {{"request", "set_volume"}, {"channel", "master"}, {"db", 0}});
    for (const json& channel : {json("master"), json(0)}) {
      const std::string error =
          refusal(api_call(client, {{"request", "set_volume"}, {"channel", channel}, {"db", 20}}));
      EXPECT_NE(error.find("max_gain_db"), std::string::npos) << error;
    }
    EXPECT_EQ(api_ok(client, {{"request", "get_volume"}})["master"]["db"], 0.0);
    const std::string gain = refusal(
        api_call(client, {{"request", "patch_config"}, {"patch", {{"filter", {{"gain_db", 6}}}}}}));
    EXPECT_NE(gain.find("filter.gain_db"), std::string::npos) << gain;
  }
  stop();
  ASSERT_NO_FATAL_FAILURE(start("max_gain_db = 6\n"));
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());
  api_ok(client, {{"request", "set_volume"}, {"channel", 0}, {"db", 6}});
  EXPECT_FALSE(
      api_call(client, {{"request", "set_volume"}, {"channel", 0}, {"db", 6.5}}).value("ok", true));
  api_ok(client, {{"request", "patch_config"}, {"patch", {{"filter", {{"gain_db", 6}}}}}});
}

TEST_F(HostileClient, UploadFloodsKeepTheNewestWithinTheBoundsAndRefuseWhenAllAreInUse) {
  ASSERT_NO_FATAL_FAILURE(start("max_upload_files = 2\nmax_upload_mib = 1\n"));
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());
  for (int i = 0; i < 6; ++i) {
    api_ok(client, {{"request", "upload_filter"},
                    {"channel", "all"},
                    {"name", "flood-" + std::to_string(i) + ".txt"},
                    {"data", "0.5\n"}});
    EXPECT_LE(uploads(), 2u);
  }
  EXPECT_TRUE(fs::exists(dir_ / "tapstream-uploads" / "flood-5.txt"));
  // Two uploads in use, one a channel (flood-5 and left.txt): a third finds no room.
  api_ok(client,
         {{"request", "upload_filter"}, {"channel", 0}, {"name", "left.txt"}, {"data", "0.5\n"}});
  const std::string full = refusal(api_call(
      client,
      {{"request", "upload_filter"}, {"channel", 0}, {"name", "third.txt"}, {"data", "0.5\n"}}));
  EXPECT_NE(full.find("no room"), std::string::npos) << full;
  EXPECT_NE(full.find("max_upload_files = 2"), std::string::npos) << full;
  // Bytes count too: 1.5 MiB does not fit in 1 MiB.
  const std::string big = refusal(api_call(client, {{"request", "upload_filter"},
                                                    {"channel", 0},
                                                    {"name", "big.txt"},
                                                    {"data", std::string(3 << 19, '\n')}}));
  EXPECT_NE(big.find("no room"), std::string::npos) << big;
  EXPECT_EQ(uploads(), 2u);
}

TEST_F(HostileClient, TheSocketTakesRequestsAsLargeAsTheWebsocketAndSaysWhenOneIsLarger) {
  ASSERT_NO_FATAL_FAILURE(start());
  std::string text = socket_call({{"request", "get_config"}})["result"]["text"];
  // As large as the shipped config/live-default.toml and more: comments.
  while (text.size() < 6000) text += "# a comment line that makes the request larger\n";
  const json applied = socket_call({{"request", "apply_config"}, {"text", text}});
  EXPECT_TRUE(applied.value("ok", false)) << applied.dump();

  // Larger than the bound: a clear error, and the server goes on.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strcpy(address.sun_path, socket().c_str());
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  const std::string chunk(1 << 16, 'x');
  std::size_t sent = 0;
  while (sent <= max_control_request_bytes) {
    const ssize_t n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n <= 0) break;  // the server closed after its reply
    sent += static_cast<std::size_t>(n);
  }
  std::string reply;
  char buffer[4096];
  ssize_t got = 0;
  while (reply.find('\n') == std::string::npos &&
         (got = ::recv(fd, buffer, sizeof buffer, 0)) > 0) {
    reply.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(fd);
  EXPECT_NE(reply.find("request longer than " + std::to_string(max_control_request_bytes)),
            std::string::npos)
      << reply.substr(0, 200);
  EXPECT_TRUE(socket_call({{"request", "get_state"}}).value("ok", false));
}

TEST_F(HostileClient, OnlyTheOwnerReachesTheSocketWhoseLoadNamesAnyFile) {
  ASSERT_NO_FATAL_FAILURE(start());
  // The line between the two entrances: the socket is the owner's (0600 in a
  // 0700 directory), so its text requests may name any file; the websocket's
  // requests may not.
  struct stat info {};
  ASSERT_EQ(::stat(socket().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(socket().parent_path().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  const json loaded =
      json::parse(ctl_exchange(socket(), "load all " + (outside_ / "valid.txt").string()));
  EXPECT_TRUE(loaded.value("ok", false)) << loaded.dump();
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());
  EXPECT_NE(
      refusal(api_call(client,
                       {{"request", "patch_config"},
                        {"patch", {{"filter", {{"file", (outside_ / "valid.txt").string()}}}}}}))
          .find("filter.file"),
      std::string::npos);
}

TEST_F(HostileClient, AStoredConfigurationThatDoesNotStartGivesWayToTheFile) {
  ASSERT_NO_FATAL_FAILURE(start());
  {
    WebsocketClient client(port_, "/ws");
    ASSERT_TRUE(client.open());
    // A restart key the API may set, whose value only the start can check:
    // the CUDA engine (absent from a CPU-only build, or without a GPU).
    const json stored = api_ok(
        client, {{"request", "patch_config"}, {"patch", {{"engine", {{"backend", "cuda"}}}}}});
    EXPECT_EQ(stored["restart_needed"], json::array({"engine.backend"}));
  }
  stop();
  ASSERT_NO_FATAL_FAILURE(start());
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());
  const std::string backend = api_ok(client, {{"request", "get_info"}})["backend"];
  if (backend != "cuda") {
    EXPECT_NE(read_text(dir_ / "daemon.err").find("the state file's configuration does not start"),
              std::string::npos)
        << read_text(dir_ / "daemon.err");
    EXPECT_EQ(api_ok(client, {{"request", "get_config"}})["text"], read_text(dir_ / "live.toml"));
  }
}

TEST_F(HostileClient, FilesChangedOnDiskAndReloadedAreNamedAsWaitingForARestart) {
  ASSERT_NO_FATAL_FAILURE(start());
  write_config("", "[log]\nfile = \"tapstream.log\"\n");
  {
    // The state file moves too.
    std::string text = read_text(dir_ / "live.toml");
    text.replace(text.find("state.json"), 10, "state-2.json");
    std::ofstream(dir_ / "live.toml") << text;
  }
  const json reloaded = json::parse(ctl_exchange(socket(), "reload"));
  EXPECT_TRUE(reloaded.value("ok", false)) << reloaded.dump();
  EXPECT_NE(reloaded.value("message", "").find("state.file and log.file change only at a restart"),
            std::string::npos)
      << reloaded.dump();
}

TEST_F(HostileClient, TheWatcherDoesNotSayAFileChangedAndNothingChanged) {
  ASSERT_NO_FATAL_FAILURE(start("", /*watch=*/true));
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());
  api_ok(client, {{"request", "upload_filter"},
                  {"channel", "all"},
                  {"name", "up.txt"},
                  {"data", "0.5\n0.5\n"}});
  // The configuration's file, which no channel runs now, is rewritten.
  std::ofstream(dir_ / "unit.txt") << "0.9\n";
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] {
        return read_text(dir_ / "daemon.err").find("unit.txt written on disk") != std::string::npos;
      },
      [&] { return read_text(dir_ / "daemon.err"); }));
  const std::string log = read_text(dir_ / "daemon.err");
  EXPECT_EQ(log.find("no filter file changed"), std::string::npos) << log;
  EXPECT_NE(log.find("channel 0 keeps"), std::string::npos) << log;
}

}  // namespace
}  // namespace tapstream

namespace tapstream {
namespace {

// The taps get_filter reports for `channel` (its effective filter).
std::vector<float> running_taps(WebsocketClient& client, std::size_t channel) {
  const json filter = api_ok(client, {{"request", "get_filter"}, {"channel", channel}});
  return filter.value("taps", std::vector<float>());
}

// A websocket binary frame's reply.
json binary_call(WebsocketClient& client, const std::string& frame) {
  if (!client.send_frame(0x2, frame)) return json::object();
  const auto reply = client.receive();
  return reply ? json::parse(*reply) : json::object();
}

TEST_F(HostileClient, SetPathsInstallsTapsSentAsBase64OrInABinaryFrame) {
  ASSERT_NO_FATAL_FAILURE(start());
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());
  const std::uint64_t swaps = api_ok(client, {{"request", "get_stats"}})["swaps"];
  const json text_reply =
      api_ok(client, {{"request", "set_paths"},
                      {"paths", {{{"path", 0}, {"taps_base64", base64_floats({0.5f, 0.25f})}}}}});
  EXPECT_EQ(text_reply["paths"], 1);
  EXPECT_EQ(running_taps(client, 0), (std::vector<float>{0.5f, 0.25f}));
  EXPECT_EQ(running_taps(client, 1), (std::vector<float>{1.0f}));

  // Both paths at once: one by its pair from the frame's data, one in the text.
  const json header = {{"id", 9},
                       {"request", "set_paths"},
                       {"paths",
                        {{{"input", 1}, {"output", 1}, {"binary_taps", 3}},
                         {{"path", 0}, {"taps_base64", base64_floats({-0.125f})}}}}};
  const json frame_reply = binary_call(client, binary_frame(header, {0.75f, -0.5f, 0.0625f}));
  EXPECT_TRUE(frame_reply.value("ok", false)) << frame_reply.dump();
  EXPECT_EQ(frame_reply.value("id", 0), 9);
  EXPECT_EQ(running_taps(client, 1), (std::vector<float>{0.75f, -0.5f, 0.0625f}));
  EXPECT_EQ(running_taps(client, 0), (std::vector<float>{-0.125f}));
  const json stats = api_ok(client, {{"request", "get_stats"}});
  EXPECT_EQ(stats["swaps"].get<std::uint64_t>(), swaps + 2);
  EXPECT_EQ(stats["rejected_swaps"], 0);

  // The owner's socket takes it too (base64 only: a line of text).
  const json owner =
      socket_call({{"request", "set_paths"},
                   {"paths", {{{"path", 1}, {"taps_base64", base64_floats({0.5f})}}}}});
  EXPECT_TRUE(owner.value("ok", false)) << owner.dump();
  EXPECT_EQ(running_taps(client, 1), (std::vector<float>{0.5f}));
}

TEST_F(HostileClient, HostileSetPathsAreRefusedByNameAndNothingApplies) {
  ASSERT_NO_FATAL_FAILURE(start());
  WebsocketClient client(port_, "/ws");
  ASSERT_TRUE(client.open());
  const std::uint64_t swaps = api_ok(client, {{"request", "get_stats"}})["swaps"];
  const auto request = [](json paths) { return json{{"request", "set_paths"}, {"paths", paths}}; };
  const std::string half = base64_floats({0.5f});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    json request;
    std::string says;
  };
  const std::vector<Case> cases = {
      {request({{{"path", 0}, {"taps_base64", "@@not*base64"}}}),
       "bad_request: paths[0] (path 0 (input 0 -> output 0)): 'taps_base64' is not base64"},
      {request({{{"path", 0}, {"taps_base64", "AAAAAAA="}}}),
       "invalid_value: paths[0] (path 0 (input 0 -> output 0)): 'taps_base64' holds 5 bytes, "
       "not whole float32 taps"},
      {request({{{"path", 1}, {"taps_base64", base64_floats({0.5f, nan})}}}),
       "rejected: path 1 (input 1 -> output 1): tap 1 is not a finite number"},
      {request({{{"path", 0}, {"taps_base64", base64_floats({-inf})}}}),
       "rejected: path 0 (input 0 -> output 0): tap 0 is not a finite number"},
      {request({{{"path", 7}, {"taps_base64", half}}}),
       "invalid_value: paths[0]: 'path' = 7 is not one of 0..1"},
      {request({{{"path", 0.5}, {"taps_base64", half}}}),
       "invalid_value: paths[0]: 'path' = 0.5 is not one of 0..1"},
      {request({{{"input", 0}, {"output", 1}, {"taps_base64", half}}}),
       "invalid_value: paths[0]: input 0 -> output 1 is not a path of the running matrix"},
      {request({{{"path", 0}, {"taps_base64", base64_floats(std::vector<float>(1025, 0.1f))}}}),
       "rejected: path 0 (input 0 -> output 0): 1025 taps; the running engine holds at most 1024"},
      {request({{{"path", 0}, {"taps_base64", half}}, {{"path", 0}, {"taps_base64", half}}}),
       "rejected: path 0 (input 0 -> output 0): named twice in one update"},
      {request({{{"path", 0}}}),
       "bad_request: paths[0] (path 0 (input 0 -> output 0)): give "
       "exactly one of 'taps_base64' and 'binary_taps'"},
      {request({{{"path", 0}, {"taps_base64", half}, {"binary_taps", 1}}}), "give exactly one of"},
      {request({{{"path", 0}, {"binary_taps", 4}}}),
       "invalid_value: paths[0] (path 0 (input 0 -> output 0)): 'binary_taps' = 4, but the "
       "binary frame has 0 taps left (a request sent as text has none)"},
      {request({{{"path", 0}, {"taps_base64", ""}}}), "no taps"},
      {request(json::array()), "bad_request: 'paths' must be a non-empty array"},
      {request("all"), "bad_request: 'paths' must be a non-empty array"},
      {request({{{"path", 0}, {"taps_base64", half}},
                {{"path", 1}, {"taps_base64", half}},
                {{"path", 1}, {"taps_base64", half}}}),
       "invalid_value: 3 paths named; the running matrix has 2"},
      {request({7}), "bad_request: paths[0] must be an object"},
  };
  for (const Case& c : cases) {
    const std::string got = refusal(api_call(client, c.request));
    EXPECT_NE(got.find(c.says), std::string::npos)
        << c.request.dump().substr(0, 200) << "\n-> " << got;
  }
  // Binary frames: short, a header longer than the frame, taps left over,
  // fewer taps than asked, and data for a request that takes none.
  const json header = {{"request", "set_paths"}, {"paths", {{{"path", 0}, {"binary_taps", 2}}}}};
  const std::vector<std::pair<std::string, std::string>> frames = {
      {std::string("\x01\x00", 2), "the header's length (4 bytes)"},
      {std::string("\xff\xff\x00\x00{}", 6), "header is 65535 bytes long, but the frame holds 2"},
      {binary_frame(header, {0.5f, 0.5f, 0.5f}),
       "the binary frame holds 12 bytes of taps; the "
       "paths take 8"},
      {binary_frame(header, {0.5f}), "'binary_taps' = 2, but the binary frame has 1 taps left"},
      {binary_frame({{"request", "get_state"}}, {0.5f}), "a binary frame carries set_paths' taps"},
      {binary_frame({{"request", "set_paths"}, {"paths", {{{"path", 0}, {"binary_taps", 1}}}}},
                    {nan}),
       "path 0 (input 0 -> output 0): tap 0 is not a finite number"},
  };
  for (const auto& [frame, says] : frames) {
    const std::string got = refusal(binary_call(client, frame));
    EXPECT_NE(got.find(says), std::string::npos) << says << "\n-> " << got;
  }
  // Nothing applied: the configured filter runs on both channels.
  EXPECT_EQ(running_taps(client, 0), (std::vector<float>{1.0f}));
  EXPECT_EQ(running_taps(client, 1), (std::vector<float>{1.0f}));
  EXPECT_EQ(api_ok(client, {{"request", "get_stats"}})["swaps"].get<std::uint64_t>(), swaps);

  // A message over the bound is cut off; the daemon goes on for others.
  const std::string huge = base64_floats(std::vector<float>(max_control_request_bytes / 3, 0.1f));
  client.send(request({{{"path", 0}, {"taps_base64", huge}}}).dump());
  EXPECT_FALSE(client.receive(std::chrono::seconds(5)).has_value());
  WebsocketClient next(port_, "/ws");
  ASSERT_TRUE(next.open());
  EXPECT_EQ(running_taps(next, 0), (std::vector<float>{1.0f}));
}

}  // namespace
}  // namespace tapstream

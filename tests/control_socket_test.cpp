// Tests of the control socket: the daemon's one request model (JSON API
// requests, answered by a ControlApi over a real, idle pipeline as the
// socket's owner), `tapstream ctl`'s text commands written as those requests,
// malformed, non-JSON and oversized requests, permissions, stale sockets,
// concurrent clients, the `tapstream ctl` binary.

#include "daemon/control/control_socket.hpp"

#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/control/control_api.hpp"
#include "daemon/control/ctl_request.hpp"
#include "daemon/control/json.hpp"
#include "daemon/pipeline/live_pipeline.hpp"
#include "tests/idle_pipeline.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;

class ControlSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tapstream-ctl-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::remove_all(root_);
    fs::create_directories(root_);
    socket_ = root_ / "run" / "control.sock";
    hooks_.matrix = [this] { return matrix_; };
    hooks_.config = [] { return LiveConfig{}; };
    hooks_.status = [this] {
      DaemonStatus status;
      status.backend = "cpu";
      status.engine = "cpu: direct";
      status.input_device = "default device";
      status.output_device = "file /tmp/out.wav";
      status.sample_rate = 48000;
      status.block_frames = 256;
      status.channels = 2;
      status.latency_frames = 512;
      status.input_channels = 2;
      status.paths = {{0, 0, "/f/left.txt", 4096}, {1, 1, "/f/we\"ird\nname\xff.txt", 128}};
      status.blocks = ++status_calls_;
      status.processing.count = 10;
      status.processing.p99_us = 123.5;
      return status;
    };
    hooks_.load = [this](const LoadRequest& request) {
      std::lock_guard lock(mutex_);
      loads_.push_back(request);
      if (request.file.filename() == "bad.txt")
        return request.file.string() + ":3: cannot parse 'x'";
      return std::string();
    };
  }
  void TearDown() override { fs::remove_all(root_); }

  // The daemon's answer: its ControlApi, as the socket's owner.
  ControlAnswer answer() {
    if (!api_) {
      pipeline_ = testing::make_idle_pipeline(*matrix_);
      api_ = std::make_unique<ControlApi>(*pipeline_, hooks_, root_ / "uploads");
    }
    return [this](std::string_view line) {
      ApiSession session;
      session.can_subscribe = false;
      session.owner = true;
      return api_->handle(line, session);
    };
  }

  // What `tapstream ctl COMMAND` prints.
  std::string ctl(const std::string& command) { return ctl_exchange(socket_, command); }

  static inline int counter_ = 0;
  fs::path root_;
  fs::path socket_;
  std::shared_ptr<const RoutingMatrix> matrix_ = std::make_shared<const RoutingMatrix>(
      RoutingMatrix::diagonal(FilterBank::shared({1.0f, 0.5f}, 2)));
  ApiHooks hooks_;
  std::unique_ptr<LivePipeline> pipeline_;
  std::unique_ptr<ControlApi> api_;
  std::atomic<int> status_calls_{0};
  std::mutex mutex_;
  std::vector<LoadRequest> loads_;
};

// A raw client, to send what control_request() would refuse to.
class RawClient {
 public:
  explicit RawClient(const fs::path& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      ADD_FAILURE() << "connect: " << std::strerror(errno);
    }
    // A deadline for each reply, not a wait: generous, because a request near
    // the 12 MiB bound is a JSON document the API parses, several seconds
    // under ThreadSanitizer on a loaded machine.
    timeval timeout{60, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  }
  ~RawClient() { ::close(fd_); }
  void send(const std::string& bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  // Reads until the server closes or times out.
  std::string read_all() {
    std::string out;
    char buffer[4096];
    ssize_t n;
    while ((n = ::recv(fd_, buffer, sizeof buffer, 0)) > 0) out.append(buffer, std::size_t(n));
    return out;
  }
  std::string read_line() {
    std::string out;
    char c;
    while (::recv(fd_, &c, 1, 0) == 1 && c != '\n') out += c;
    return out;
  }

 private:
  int fd_ = -1;
};

// A line `ctl` prints.
bool is_ok(const std::string& reply) {
  return reply.rfind("{\"ok\":true", 0) == 0;
}
bool is_error(const std::string& reply) {
  return reply.rfind("{\"ok\":false,\"error\":\"", 0) == 0;
}
// A reply of the API, as the socket sends it.
bool api_ok(const std::string& reply) {
  const Json json = Json::parse(reply, nullptr, false);
  return json.is_object() && json.value("ok", false);
}
std::string api_error_type(const std::string& reply) {
  const Json json = Json::parse(reply, nullptr, false);
  if (!json.is_object() || json.value("ok", true) || !json["error"].is_object()) return "(none)";
  return json["error"].value("type", "(none)") + ": " + json["error"].value("message", "");
}

TEST(JsonLine, EscapesQuotesControlCharactersAndReplacesInvalidUtf8) {
  EXPECT_EQ(json_line(Json("a\"b\\c")), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(json_line(Json("line\nnext\ttab\x01")), "\"line\\nnext\\ttab\\u0001\"");
  EXPECT_EQ(json_line(Json("caf\xc3\xa9")), "\"caf\xc3\xa9\"");  // valid UTF-8 kept
  EXPECT_EQ(json_line(Json("bad\xff")), "\"bad\xef\xbf\xbd\"");  // replaced
  const Json json = {{"n", 3},
                     {"x", 1.5},
                     {"nan", std::nan("")},
                     {"b", false},
                     {"list", Json::array({1, "two", Json::object()})}};
  EXPECT_EQ(json_line(json), R"({"n":3,"x":1.5,"nan":null,"b":false,"list":[1,"two",{}]})");
}

TEST_F(ControlSocketTest, CtlStatusPrintsTheStatusDocumentInOneLine) {
  ControlServer server(socket_, answer());
  server.start();
  const std::string reply = ctl("status");
  std::printf("%s\n", reply.c_str());
  EXPECT_TRUE(is_ok(reply)) << reply;
  EXPECT_EQ(reply.find('\n'), std::string::npos);
  for (const char* part :
       {"\"backend\":\"cpu\"", "\"sample_rate\":48000", "\"block_frames\":256", "\"channels\":2",
        "\"latency_frames\":512", "\"inputs\":2", "\"outputs\":2",
        "\"file\":\"/f/we\\\"ird\\nname\xef\xbf\xbd.txt\"", "\"blocks\":1", "\"underruns\":0",
        "\"overruns\":0", "\"swaps\":0", "\"p99\":123.5", "\"input\":\"default device\""}) {
    EXPECT_NE(reply.find(part), std::string::npos) << part << " not in " << reply;
  }
  const Json status = Json::parse(reply);
  EXPECT_EQ(status["filters"][0], Json::parse(R"({"channel":0,"delay_frames":0,
      "file":"/f/left.txt","gain_db":0.0,"input":0,"invert":false,"output":0,"taps":4096})"));
  EXPECT_EQ(status["matrix"]["file"], "");
  EXPECT_EQ(status["matrix"]["paths"][1]["taps"], 128);
  EXPECT_NE(ctl("status"), reply) << "status was not asked again";
  // The request `ctl status` sends is the API's get_status, with the same document.
  const Json api = Json::parse(control_request(socket_, R"({"id":4,"request":"get_status"})"));
  EXPECT_EQ(api["id"], 4);
  EXPECT_EQ(api["result"]["filters"], status["filters"]);
  EXPECT_EQ(api["result"]["blocks"], 3) << "one status per request";
}

TEST_F(ControlSocketTest, CtlLoadOfAChannelOrAllReachesTheLoadHookAndRepliesOk) {
  ControlServer server(socket_, answer());
  server.start();
  EXPECT_EQ(ctl("load 1 /filters/my filter.txt"),
            R"({"ok":true,"message":"/filters/my filter.txt installed for channel 1 at block 0"})");
  EXPECT_TRUE(is_ok(ctl("  load   all   /filters/b.wav  ")));
  std::lock_guard lock(mutex_);
  ASSERT_EQ(loads_.size(), 2u);
  EXPECT_EQ(loads_[0].target, LoadRequest::Target::channel);
  EXPECT_EQ(loads_[0].input, 1u);
  EXPECT_EQ(loads_[0].file, fs::path("/filters/my filter.txt"));
  EXPECT_EQ(loads_[1].target, LoadRequest::Target::all_channels);
  EXPECT_EQ(loads_[1].file, fs::path("/filters/b.wav"));
}

TEST_F(ControlSocketTest, CtlLoadPathAndLoadMatrixReachTheOneLoadHookAsTheirRequests) {
  // Whether the daemon takes them (a matrix file needs a matrix daemon) is the
  // daemon's answer (daemon_swaps_test), not the socket's.
  ControlServer server(socket_, answer());
  server.start();
  EXPECT_TRUE(is_ok(ctl("load path 0 3 /filters/my tweeter.txt")));
  EXPECT_TRUE(is_ok(ctl("load matrix /m x.toml")));
  EXPECT_TRUE(api_ok(
      control_request(socket_, R"({"request":"load","input":1,"output":2,"file":"/f/a b.txt"})")));
  EXPECT_TRUE(api_ok(control_request(socket_, R"({"request":"load","matrix":"/m.toml"})")));
  {
    std::lock_guard lock(mutex_);
    ASSERT_EQ(loads_.size(), 4u);
    EXPECT_EQ(loads_[0].target, LoadRequest::Target::path);
    EXPECT_EQ(loads_[0].input, 0u);
    EXPECT_EQ(loads_[0].output, 3u);
    EXPECT_EQ(loads_[0].file, fs::path("/filters/my tweeter.txt"));
    EXPECT_EQ(loads_[1].target, LoadRequest::Target::matrix);
    EXPECT_EQ(loads_[1].file, fs::path("/m x.toml"));
    EXPECT_EQ(loads_[2].target, LoadRequest::Target::path);
    EXPECT_EQ(loads_[2].output, 2u);
    EXPECT_EQ(loads_[3].file, fs::path("/m.toml"));
  }
  EXPECT_NE(
      api_error_type(control_request(socket_, R"({"request":"load","input":1,"file":"/f.txt"})"))
          .find("bad_request: missing field 'output'"),
      std::string::npos);
  EXPECT_NE(ctl("load path 0 /x.txt").find("usage: load path INPUT OUTPUT FILE"),
            std::string::npos);
  EXPECT_NE(ctl("load path a 1 /x.txt").find("'a 1' is not an input and an output number"),
            std::string::npos);
  EXPECT_NE(ctl("load path 0 1 x.txt").find("is not an absolute path"), std::string::npos);
  EXPECT_NE(
      api_error_type(
          control_request(socket_, R"({"request":"load","input":0,"output":1,"file":"x.txt"})"))
          .find("invalid_value: 'file' = \"x.txt\" is not an absolute path"),
      std::string::npos);
  std::lock_guard lock(mutex_);
  EXPECT_EQ(loads_.size(), 4u) << "a refused request reaches no hook";
}

TEST(CtlRequest, EachTextSpellingIsWrittenAsTheApiRequest) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"status", R"({"request":"get_status"})"},
      {"reload", R"({"request":"reload"})"},
      {"stop", R"({"request":"stop"})"},
      {"load 2 /f/a b.txt", R"({"request":"load","channel":2,"file":"/f/a b.txt"})"},
      {"load all /f/c.wav", R"({"request":"load","channel":"all","file":"/f/c.wav"})"},
      {"load path 1 0 /f/p.txt", R"({"request":"load","input":1,"output":0,"file":"/f/p.txt"})"},
      {"load matrix /m.toml", R"({"request":"load","matrix":"/m.toml"})"},
      {"trace", R"({"request":"get_trace"})"},
      {"trace 16", R"({"request":"get_trace","records":16})"},
  };
  for (const auto& [command, request] : cases) {
    EXPECT_EQ(ctl_request_json(command), request) << command;
  }
}

TEST_F(ControlSocketTest, CtlTraceDumpsThePipelinesTimestampsWithinItsBound) {
  ControlServer server(socket_, answer());
  server.start();
  // The idle pipeline takes a few unpaced calls, so that each ring holds records.
  std::vector<float> frames(2 * 64, 0.25f);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(pipeline_->offer_input(frames.data(), 64), 64u);
  }
  const std::string reply = ctl("trace 2");
  ASSERT_TRUE(is_ok(reply)) << reply;
  const Json trace = Json::parse(reply);
  EXPECT_EQ(trace["clock"], "CLOCK_MONOTONIC, nanoseconds");
  EXPECT_EQ(trace["inputs"]["fields"],
            Json::parse(R"(["start_ns","handed_ns","first_frame","frames"])"));
  EXPECT_EQ(trace["inputs"]["written"], 3);
  ASSERT_EQ(trace["inputs"]["rows"].size(), 2u) << "the newest two of three";
  EXPECT_EQ(trace["inputs"]["rows"][1][2], 128) << "the third call's first frame";
  EXPECT_LE(trace["inputs"]["rows"][1][0].get<std::int64_t>(), trace["now_ns"].get<std::int64_t>());
  for (const char* ring : {"outputs", "blocks"}) EXPECT_TRUE(trace[ring]["rows"].is_array());
  for (const char* bad :
       {R"({"request":"get_trace","records":0})", R"({"request":"get_trace","records":1e9})",
        R"({"request":"get_trace","records":"all"})"}) {
    const Json refused = Json::parse(control_request(socket_, bad));
    EXPECT_FALSE(refused["ok"].get<bool>()) << bad;
  }
  EXPECT_FALSE(is_ok(ctl("trace many")));
}

TEST_F(ControlSocketTest, ReloadAndStopReachTheirHooksAndTakeNoArguments) {
  std::atomic<int> reloads{0}, stops{0};  // counted on the server thread
  hooks_.reload = [&] {
    if (++reloads == 2) throw std::runtime_error("live.toml:3: bad");
    return std::string("reloaded channel 1");
  };
  hooks_.stop = [&] {
    ++stops;
    return std::string("stopping");
  };
  ControlServer server(socket_, answer());
  server.start();
  EXPECT_EQ(ctl("reload"), R"({"ok":true,"message":"reloaded channel 1"})");
  EXPECT_EQ(ctl("reload"), R"({"ok":false,"error":"live.toml:3: bad","type":"rejected"})");
  EXPECT_TRUE(is_error(ctl("stop now")));
  EXPECT_EQ(ctl("stop"), R"({"ok":true,"message":"stopping"})");
  EXPECT_EQ(reloads, 2);
  EXPECT_EQ(stops, 1);
}

TEST_F(ControlSocketTest, ARejectedLoadRepliesWithTheHooksReason) {
  ControlServer server(socket_, answer());
  server.start();
  EXPECT_EQ(ctl("load 0 /f/bad.txt"),
            R"({"ok":false,"error":"/f/bad.txt:3: cannot parse 'x'","type":"rejected"})");
}

TEST_F(ControlSocketTest, MalformedCommandsGetAnErrorWithoutReachingTheDaemon) {
  ControlServer server(socket_, answer());
  server.start();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bogus", "unknown command 'bogus'"},
      {"STATUS", "unknown command"},
      {"status now", "status takes no arguments"},
      {"load", "usage: load"},
      {"load 1", "usage: load"},
      {"load x /f.txt", "channel 'x' is neither"},
      {"load -1 /f.txt", "channel '-1' is neither"},
      {"load 99999999999999999999 /f.txt", "is neither"},
      {"load 0 relative.txt", "not an absolute path"},
      {std::string("\x01\x02\xff garbage", 12), "unknown command"},
      {"", "empty command"},
  };
  for (const auto& [command, expected] : cases) {
    const std::string reply = ctl(command);
    EXPECT_TRUE(is_error(reply)) << command << " -> " << reply;
    EXPECT_NE(reply.find(expected), std::string::npos) << command << " -> " << reply;
  }
  EXPECT_EQ(status_calls_, 0);
  EXPECT_TRUE(loads_.empty()) << "a malformed load reached the hook";
  EXPECT_TRUE(is_ok(ctl("status")));
}

TEST_F(ControlSocketTest, TheSocketRefusesNonJsonLinesNamingTheJsonForm) {
  ControlServer server(socket_, answer());
  server.start();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"status", "'status' is not a JSON request"},
      {"load 0 /f.txt", "'load 0 /f.txt' is not a JSON request"},
      {"reload", "is not a JSON request"},
      {"stop", "is not a JSON request"},
      {std::string("\x01\x02\xff garbage", 12), "is not a JSON request"},
      {R"({"command":"status"})", "{\"command\": ...} requests are retired"},
      {R"({"command":"load","channel":0,"file":"/f.txt"})", "retired; write {\"request\": ...}"},
      {"{\"request\":", "bad_request: not JSON"},
      {R"({"request":"load","channel":-1,"file":"/f.txt"})", "bad_request: 'channel'"},
      {R"({"request":"load","file":"/f.txt"})", "bad_request: load takes one of"},
      {R"({"channel":0})", "bad_request: missing field 'request'"},
      {R"({"request":"status"})", "unknown_request: unknown request 'status'"},
  };
  for (const auto& [request, expected] : cases) {
    RawClient client(socket_);
    client.send(request + "\n");
    const std::string reply = client.read_line();
    EXPECT_FALSE(api_ok(reply)) << request << " -> " << reply;
    EXPECT_NE((api_error_type(reply) + reply).find(expected), std::string::npos)
        << request << " -> " << reply;
    if (request.front() != '{') {
      EXPECT_NE(reply.find(R"({\"request\":\"get_status\"})"), std::string::npos) << reply;
      EXPECT_NE(reply.find("tapstream ctl"), std::string::npos) << reply;
    }
  }
  {
    RawClient client(socket_);
    client.send("\n");
    EXPECT_NE(client.read_line().find("empty request"), std::string::npos);
  }
  EXPECT_EQ(status_calls_, 0);
  EXPECT_TRUE(loads_.empty()) << "a malformed load reached the hook";
  EXPECT_TRUE(is_ok(ctl("status")));
}

TEST_F(ControlSocketTest, AnOversizedRequestGetsAnErrorAndOnlyThatConnectionIsClosed) {
  ControlServer server(socket_, answer());
  server.start();
  // The websocket's bound (12 MiB): an apply_config of any real configuration fits.
  constexpr std::size_t limit = ControlServer::max_request_bytes;
  static_assert(limit == max_control_request_bytes);
  const std::string said = "longer than " + std::to_string(limit) + " bytes";
  RawClient idle(socket_);  // another client stays connected throughout
  {
    RawClient client(socket_);
    client.send(std::string(limit + 1, 'a'));  // no newline at all
    const std::string reply = client.read_all();
    EXPECT_EQ(api_error_type(reply).rfind("bad_request: ", 0), 0u) << reply.substr(0, 200);
    EXPECT_NE(reply.find(said), std::string::npos) << reply.substr(0, 200);
  }
  {
    RawClient client(socket_);
    client.send(R"({"request":"load","channel":0,"file":"/)" + std::string(limit, 'x') +
                "\"}\n"
                R"({"request":"get_status"})"
                "\n");
    const std::string reply = client.read_all();
    EXPECT_NE(reply.find(said), std::string::npos) << reply.substr(0, 200);
    EXPECT_EQ(reply.find("\"ok\":true"), std::string::npos) << "answered after an oversized line";
  }
  {
    // Just under the limit is an ordinary request (a field the API does not read).
    RawClient client(socket_);
    client.send(R"({"request":"get_status","padding":")" + std::string(limit - 100, 'b') + "\"}\n");
    EXPECT_TRUE(api_ok(client.read_line()));
  }
  idle.send(R"({"request":"get_status"})"
            "\n");
  EXPECT_TRUE(api_ok(idle.read_line()));
  EXPECT_TRUE(loads_.empty());
}

TEST_F(ControlSocketTest, OneLargeReplyArrivesWholeAndAClientThatNeverReadsIsDropped) {
  // Replies of 2 MiB, as a trace of 8192 records is: above the 1 MiB of unread replies a
  // client may leave waiting, which must not cut one reply short.
  const std::string big(2 << 20, 'x');
  ControlServer server(socket_,
                       [&](std::string_view) { return "{\"ok\":true,\"pad\":\"" + big + "\"}"; });
  server.start();
  {
    RawClient client(socket_);
    client.send("{\"request\":\"get_trace\"}\n");
    const std::string reply = client.read_line();
    EXPECT_EQ(reply.size(), big.size() + 20) << reply.substr(0, 100);
  }
  {
    // Pipelined requests never read: the second finds a reply waiting above
    // the bound, and the connection ends (what was sent so far may arrive).
    RawClient client(socket_);
    std::string requests;
    for (int i = 0; i < 8; ++i) requests += "{\"request\":\"get_trace\"}\n";
    client.send(requests);
    const std::string received = client.read_all();
    EXPECT_LT(received.size(), 2 * (big.size() + 20)) << "more than two replies were queued";
  }
  RawClient after(socket_);
  after.send("{\"request\":\"get_status\"}\n");
  EXPECT_EQ(after.read_line().size(), big.size() + 20) << "the server stopped serving";
}

TEST_F(ControlSocketTest, PipelinedRequestsOnOneConnectionGetOneReplyEach) {
  ControlServer server(socket_, answer());
  server.start();
  RawClient client(socket_);
  // The last one ends at EOF.
  client.send(R"({"request":"get_status"})"
              "\nbogus\r\n"
              R"({"request":"load","channel":0,"file":"/a.txt"})"
              "\n"
              R"({"request":"get_status"})");
  client.shutdown_write();
  const std::string all = client.read_all();
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t end; (end = all.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(all.substr(start, end - start));
  }
  ASSERT_EQ(lines.size(), 4u) << all;
  EXPECT_TRUE(api_ok(lines[0])) << lines[0];
  EXPECT_FALSE(api_ok(lines[1])) << lines[1];
  EXPECT_EQ(ctl_reply_text(lines[2]),
            R"({"ok":true,"message":"/a.txt installed for channel 0 at block 0"})");
  EXPECT_TRUE(api_ok(lines[3])) << lines[3];
}

TEST_F(ControlSocketTest, SocketIsOwnerOnlyInAnOwnerOnlyDirectoryAndRemovedOnStop) {
  ControlServer server(socket_, answer());
  server.start();
  struct stat info {};
  ASSERT_EQ(::stat(socket_.c_str(), &info), 0);
  EXPECT_TRUE(S_ISSOCK(info.st_mode));
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(socket_.parent_path().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  server.stop();
  EXPECT_FALSE(fs::exists(fs::symlink_status(socket_)));
  server.stop();  // twice is fine
  EXPECT_THROW(ctl("status"), ControlSocketError);
}

// The socket's name appears only once the server listens, so a client that
// connects the moment it sees the name (as a script waiting for the file
// does) is never refused: the name is created by a rename of a socket that
// already listens, never by bind() (inotify tells the two apart: a bound name
// is IN_CREATE, a renamed one IN_MOVED_TO).
TEST_F(ControlSocketTest, TheNameAppearsOnlyOnceTheServerListens) {
  fs::create_directories(socket_.parent_path());
  fs::permissions(socket_.parent_path(), fs::perms::owner_all);
  const int watch = ::inotify_init1(IN_CLOEXEC);
  ASSERT_GE(watch, 0);
  ASSERT_GE(::inotify_add_watch(watch, socket_.parent_path().c_str(), IN_CREATE | IN_MOVED_TO), 0);
  for (int start = 0; start < 5; ++start) {
    SCOPED_TRACE("start " + std::to_string(start));
    std::uint32_t appeared_by = 0;
    int connected = -1;
    std::thread client([&] {
      alignas(inotify_event) char events[4096];
      while (appeared_by == 0) {
        const ssize_t n = ::read(watch, events, sizeof events);
        if (n <= 0) return;
        for (ssize_t at = 0; at < n && appeared_by == 0;) {
          const auto* event = reinterpret_cast<const inotify_event*>(events + at);
          at += ssize_t(sizeof(inotify_event) + event->len);
          if (event->len == 0 || socket_.filename() != event->name) continue;
          appeared_by = event->mask & (IN_CREATE | IN_MOVED_TO);
          const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
          sockaddr_un address{};
          address.sun_family = AF_UNIX;
          std::strncpy(address.sun_path, socket_.c_str(), sizeof address.sun_path - 1);
          connected = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
          ::close(fd);
        }
      }
    });
    ControlServer server(socket_, answer());
    server.start();
    client.join();
    EXPECT_EQ(appeared_by, std::uint32_t{IN_MOVED_TO}) << "the name was made by bind()";
    EXPECT_EQ(connected, 0) << "refused just after the name appeared";
    EXPECT_FALSE(fs::exists(fs::symlink_status(fs::path(socket_.string() + "~"))));
    server.stop();
  }
  ::close(watch);
}

TEST_F(ControlSocketTest, RefusesADirectoryThatOthersCanWrite) {
  fs::create_directories(socket_.parent_path());
  ::chmod(socket_.parent_path().c_str(), 0777);
  ControlServer server(socket_, answer());
  try {
    server.start();
    FAIL() << "started in a world-writable directory";
  } catch (const ControlSocketError& e) {
    EXPECT_NE(std::string(e.what()).find("writable by group or others"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(socket_.parent_path().string()), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(socket_));
}

TEST_F(ControlSocketTest, RefusesToReplaceAFileThatIsNotASocket) {
  fs::create_directories(socket_.parent_path());
  fs::permissions(socket_.parent_path(), fs::perms::owner_all, fs::perm_options::replace);
  std::ofstream(socket_) << "precious";
  ControlServer server(socket_, answer());
  EXPECT_THROW(server.start(), ControlSocketError);
  std::ifstream in(socket_);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");
}

TEST_F(ControlSocketTest, ReplacesAStaleSocketButNotALiveServer) {
  {
    ControlServer first(socket_, answer());
    first.start();
    ControlServer second(socket_, answer());
    EXPECT_THROW(second.start(), ControlSocketError);
    EXPECT_TRUE(is_ok(ctl("status"))) << "the live server was disturbed";
  }
  // A socket file left behind by a crashed daemon.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket_.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ::close(fd);
  ASSERT_TRUE(fs::is_socket(socket_));
  ControlServer server(socket_, answer());
  server.start();
  EXPECT_TRUE(is_ok(ctl("status")));
}

TEST_F(ControlSocketTest, TheClientNamesTheSocketWhenNoServerIsThere) {
  try {
    control_request(root_ / "nothing.sock", "status");
    FAIL() << "no error";
  } catch (const ControlSocketError& e) {
    EXPECT_NE(std::string(e.what()).find("nothing.sock"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tapstream run"), std::string::npos) << e.what();
  }
}

TEST_F(ControlSocketTest, AHandlerThatThrowsGetsAnErrorReplyAndTheServerSurvives) {
  int calls = 0;
  hooks_.status = [&calls]() -> DaemonStatus {
    if (++calls == 1) throw std::runtime_error("engine not started");
    return DaemonStatus{};
  };
  ControlServer server(socket_, answer());
  server.start();
  EXPECT_EQ(ctl("status"), R"({"ok":false,"error":"engine not started","type":"internal"})");
  EXPECT_TRUE(is_ok(ctl("status")));
}

TEST_F(ControlSocketTest, ConcurrentClientsAllGetTheirAnswers) {
  ControlServer server(socket_, answer());
  server.start();
  std::atomic<int> good{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        const std::string reply =
            (i % 2 == 0) ? ctl("status")
                         : ctl("load " + std::to_string(t) + " /f/" + std::to_string(i) + ".txt");
        if (is_ok(reply)) good.fetch_add(1);
      }
    });
  }
  for (auto& client : clients) client.join();
  EXPECT_EQ(good.load(), 8 * 40);
  EXPECT_EQ(loads_.size(), 8u * 20u);
}

TEST_F(ControlSocketTest, StopReturnsPromptlyWithClientsConnected) {
  ControlServer server(socket_, answer());
  server.start();
  RawClient idle(socket_);
  RawClient half(socket_);
  half.send("stat");
  const auto start = std::chrono::steady_clock::now();
  server.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(idle.read_all(), "");  // closed by the server
}

TEST_F(ControlSocketTest, CtlCommandPrintsTheReplyAndExitsNonZeroOnAnError) {
  ControlServer server(socket_, answer());
  server.start();
  const fs::path output = root_ / "ctl.out";
  const std::string ctl = std::string(TAPSTREAM_BINARY) + " ctl --socket " + socket_.string();
  EXPECT_EQ(std::system((ctl + " status > " + output.string()).c_str()), 0);
  std::string line;
  std::getline(std::ifstream(output), line);
  EXPECT_TRUE(is_ok(line)) << line;
  EXPECT_NE(line.find("\"backend\":\"cpu\""), std::string::npos);

  const int code = std::system(
      (ctl + " load 0 " + (root_ / "bad.txt").string() + " > " + output.string()).c_str());
  EXPECT_NE(code, 0);
  std::getline(std::ifstream(output), line);
  EXPECT_TRUE(is_error(line)) << line;
  std::lock_guard lock(mutex_);
  ASSERT_FALSE(loads_.empty());
  EXPECT_EQ(loads_.back().file, root_ / "bad.txt");

  EXPECT_NE(std::system((std::string(TAPSTREAM_BINARY) + " ctl --socket " +
                         (root_ / "none.sock").string() + " status 2>/dev/null")
                            .c_str()),
            0);
}

}  // namespace
}  // namespace tapstream

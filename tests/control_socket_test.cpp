// Tests of the control socket: requests and replies, malformed and oversized
// requests, permissions, stale sockets, concurrent clients, `tapstream ctl`.

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
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/control/json.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;

class ControlSocketTest : public testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tapstream-ctl-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::remove_all(root_);
    fs::create_directories(root_);
    socket_ = root_ / "run" / "control.sock";
    handlers_.status = [this] {
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
    handlers_.load = [this](const LoadRequest& request) {
      std::lock_guard lock(mutex_);
      loads_.push_back(request);
      if (request.file.filename() == "bad.txt")
        throw std::runtime_error(request.file.string() + ":3: cannot parse 'x'");
      return std::string("queued ") + request.file.filename().string();
    };
  }
  void TearDown() override { fs::remove_all(root_); }

  static inline int counter_ = 0;
  fs::path root_;
  fs::path socket_;
  ControlHandlers handlers_;
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
    timeval timeout{5, 0};
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

bool is_ok(const std::string& reply) {
  return reply.rfind("{\"ok\":true", 0) == 0;
}
bool is_error(const std::string& reply) {
  return reply.rfind("{\"ok\":false,\"error\":\"", 0) == 0;
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

TEST_F(ControlSocketTest, StatusRepliesWithOneLineOfJsonFromTheHandler) {
  ControlServer server(socket_, handlers_);
  server.start();
  const std::string reply = control_request(socket_, "status");
  std::printf("%s\n", reply.c_str());
  EXPECT_TRUE(is_ok(reply)) << reply;
  EXPECT_EQ(reply.find('\n'), std::string::npos);
  for (const char* part :
       {"\"backend\":\"cpu\"", "\"sample_rate\":48000", "\"block_frames\":256", "\"channels\":2",
        "\"latency_frames\":512", "\"inputs\":2", "\"outputs\":2",
        "\"channel\":0,\"input\":0,\"output\":0,\"file\":\"/f/left.txt\",\"taps\":4096",
        "\"matrix\":{\"file\":\"\",\"paths\":[{\"input\":0,\"output\":0,\"file\":\"/f/left.txt\","
        "\"taps\":4096",
        "\"file\":\"/f/we\\\"ird\\nname\xef\xbf\xbd.txt\"", "\"blocks\":1", "\"underruns\":0",
        "\"overruns\":0", "\"swaps\":0", "\"p99\":123.5", "\"input\":\"default device\""}) {
    EXPECT_NE(reply.find(part), std::string::npos) << part << " not in " << reply;
  }
  EXPECT_NE(control_request(socket_, "status"), reply) << "status was not asked again";
}

TEST_F(ControlSocketTest, LoadPassesChannelAndFileToTheHandlerAndRepliesOk) {
  ControlServer server(socket_, handlers_);
  server.start();
  EXPECT_EQ(control_request(socket_, "load 1 /filters/my filter.txt"),
            R"({"ok":true,"message":"queued my filter.txt"})");
  EXPECT_TRUE(is_ok(control_request(socket_, "  load   all   /filters/b.wav  ")));
  std::lock_guard lock(mutex_);
  ASSERT_EQ(loads_.size(), 2u);
  EXPECT_EQ(loads_[0].target, LoadRequest::Target::channel);
  EXPECT_EQ(loads_[0].input, 1u);
  EXPECT_EQ(loads_[0].file, fs::path("/filters/my filter.txt"));
  EXPECT_EQ(loads_[1].target, LoadRequest::Target::all_channels);
  EXPECT_EQ(loads_[1].file, fs::path("/filters/b.wav"));
}

TEST_F(ControlSocketTest, LoadPathAndLoadMatrixReachTheOneLoadHandlerAsTheirRequests) {
  // Whether the daemon takes them (a matrix file needs a matrix daemon) is the
  // daemon's answer (daemon_swaps_test), not the socket's.
  std::vector<std::string> calls;
  handlers_.load = [&](const LoadRequest& request) {
    if (request.target == LoadRequest::Target::path) {
      calls.push_back(std::to_string(request.input) + "->" + std::to_string(request.output) + " " +
                      request.file.string());
      return std::string("path");
    }
    EXPECT_EQ(request.target, LoadRequest::Target::matrix);
    calls.push_back("matrix " + request.file.string());
    return std::string("matrix");
  };
  const ControlServer matrix(socket_, handlers_);
  EXPECT_TRUE(is_ok(matrix.handle_request("load path 0 3 /filters/my tweeter.txt")));
  EXPECT_TRUE(is_ok(matrix.handle_request("load matrix /m x.toml")));
  EXPECT_TRUE(is_ok(
      matrix.handle_request(R"({"command":"load","input":1,"output":2,"file":"/f/a b.txt"})")));
  EXPECT_TRUE(is_ok(matrix.handle_request(R"({"command":"load","matrix":"/m.toml"})")));
  EXPECT_EQ(calls, (std::vector<std::string>{"0->3 /filters/my tweeter.txt", "matrix /m x.toml",
                                             "1->2 /f/a b.txt", "matrix /m.toml"}));
  EXPECT_NE(matrix.handle_request(R"({"command":"load","input":1,"file":"/f.txt"})")
                .find("a path's load takes"),
            std::string::npos);
  EXPECT_NE(matrix.handle_request("load path 0 /x.txt").find("usage: load path INPUT OUTPUT FILE"),
            std::string::npos);
  EXPECT_NE(matrix.handle_request("load path a 1 /x.txt")
                .find("'a 1' is not an input and an "
                      "output number"),
            std::string::npos);
  EXPECT_NE(matrix.handle_request("load path 0 1 x.txt").find("is not an absolute path"),
            std::string::npos);
  EXPECT_EQ(calls.size(), 4u) << "a refused request reaches no handler";
}

TEST_F(ControlSocketTest, AJsonObjectRequestMeansWhatTheTextLineMeans) {
  ControlServer server(socket_, handlers_);
  server.start();
  EXPECT_EQ(control_request(socket_, R"({"command":"load","channel":1,"file":"/f/a b.txt"})"),
            R"({"ok":true,"message":"queued a b.txt"})");
  EXPECT_TRUE(
      is_ok(control_request(socket_, R"({"command":"load","channel":"all","file":"/f/c.wav"})")));
  EXPECT_EQ(Json::parse(control_request(socket_, R"({"command":"status"})"))["sample_rate"], 48000);
  std::lock_guard lock(mutex_);
  ASSERT_EQ(loads_.size(), 2u);
  EXPECT_EQ(loads_[0].target, LoadRequest::Target::channel);
  EXPECT_EQ(loads_[0].input, 1u);
  EXPECT_EQ(loads_[0].file, fs::path("/f/a b.txt"));
  EXPECT_EQ(loads_[1].target, LoadRequest::Target::all_channels);
}

TEST_F(ControlSocketTest, ReloadAndStopCallTheirHandlersAndTakeNoArguments) {
  std::atomic<int> reloads{0}, stops{0};  // counted on the server thread
  handlers_.reload = [&] {
    if (++reloads == 2) throw std::runtime_error("live.toml:3: bad");
    return std::string("reloaded channel 1");
  };
  handlers_.stop = [&] {
    ++stops;
    return std::string("stopping");
  };
  ControlServer server(socket_, handlers_);
  server.start();
  EXPECT_EQ(control_request(socket_, "reload"), R"({"ok":true,"message":"reloaded channel 1"})");
  EXPECT_EQ(control_request(socket_, R"({"command":"reload"})"),
            R"({"ok":false,"error":"live.toml:3: bad"})");
  EXPECT_TRUE(is_error(control_request(socket_, "stop now")));
  EXPECT_EQ(control_request(socket_, "stop"), R"({"ok":true,"message":"stopping"})");
  EXPECT_EQ(reloads, 2);
  EXPECT_EQ(stops, 1);
}

TEST_F(ControlSocketTest, ARejectedLoadRepliesWithTheHandlersReason) {
  ControlServer server(socket_, handlers_);
  server.start();
  EXPECT_EQ(control_request(socket_, "load 0 /f/bad.txt"),
            R"({"ok":false,"error":"/f/bad.txt:3: cannot parse 'x'"})");
}

TEST_F(ControlSocketTest, MalformedRequestsGetAnErrorAndTheServerKeepsServing) {
  ControlServer server(socket_, handlers_);
  server.start();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bogus", "unknown request 'bogus'"},
      {"STATUS", "unknown request"},
      {"status now", "status takes no arguments"},
      {"load", "usage: load"},
      {"load 1", "usage: load"},
      {"load x /f.txt", "channel 'x' is neither"},
      {"load -1 /f.txt", "channel '-1' is neither"},
      {"load 99999999999999999999 /f.txt", "is neither"},
      {"load 0 relative.txt", "not an absolute path"},
      {std::string("\x01\x02\xff garbage", 12), "unknown request"},
      {"{\"command\":", "not valid JSON"},
      {"{\"command\":\"load\",\"channel\":-1,\"file\":\"/f.txt\"}", "unexpected JSON field"},
      {"{\"command\":\"load\",\"file\":\"/f.txt\"}", "usage: load"},
      {"{\"command\":\"status\",\"extra\":1}", "unexpected JSON field 'extra'"},
      {"{\"channel\":0}", "JSON request without"},
  };
  for (const auto& [request, expected] : cases) {
    RawClient client(socket_);
    client.send(request + "\n");
    const std::string reply = client.read_line();
    EXPECT_TRUE(is_error(reply)) << request << " -> " << reply;
    EXPECT_NE(reply.find(expected), std::string::npos) << request << " -> " << reply;
  }
  {
    RawClient client(socket_);
    client.send("\n");
    EXPECT_NE(client.read_line().find("empty request"), std::string::npos);
  }
  EXPECT_TRUE(loads_.empty()) << "a malformed load reached the handler";
  EXPECT_TRUE(is_ok(control_request(socket_, "status")));
}

TEST_F(ControlSocketTest, AnOversizedRequestGetsAnErrorAndOnlyThatConnectionIsClosed) {
  ControlServer server(socket_, handlers_);
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
    EXPECT_TRUE(is_error(reply)) << reply.substr(0, 200);
    EXPECT_NE(reply.find(said), std::string::npos) << reply.substr(0, 200);
  }
  {
    RawClient client(socket_);
    client.send("load 0 /" + std::string(limit, 'x') + "\nstatus\n");
    const std::string reply = client.read_all();
    EXPECT_NE(reply.find(said), std::string::npos) << reply.substr(0, 200);
    EXPECT_EQ(reply.find("\"ok\":true"), std::string::npos) << "answered after an oversized line";
  }
  {
    // Just under the limit is an ordinary (here: unknown) request.
    RawClient client(socket_);
    client.send(std::string(limit - 100, 'b') + "\n");
    EXPECT_NE(client.read_line().find("unknown request"), std::string::npos);
  }
  idle.send("status\n");
  EXPECT_TRUE(is_ok(idle.read_line()));
  EXPECT_TRUE(loads_.empty());
}

TEST_F(ControlSocketTest, PipelinedRequestsOnOneConnectionGetOneReplyEach) {
  ControlServer server(socket_, handlers_);
  server.start();
  RawClient client(socket_);
  client.send("status\nbogus\r\nload 0 /a.txt\nstatus");  // the last one ends at EOF
  client.shutdown_write();
  const std::string all = client.read_all();
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t end; (end = all.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(all.substr(start, end - start));
  }
  ASSERT_EQ(lines.size(), 4u) << all;
  EXPECT_TRUE(is_ok(lines[0]));
  EXPECT_TRUE(is_error(lines[1]));
  EXPECT_EQ(lines[2], R"({"ok":true,"message":"queued a.txt"})");
  EXPECT_TRUE(is_ok(lines[3]));
}

TEST_F(ControlSocketTest, SocketIsOwnerOnlyInAnOwnerOnlyDirectoryAndRemovedOnStop) {
  ControlServer server(socket_, handlers_);
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
  EXPECT_THROW(control_request(socket_, "status"), ControlSocketError);
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
    ControlServer server(socket_, handlers_);
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
  ControlServer server(socket_, handlers_);
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
  ControlServer server(socket_, handlers_);
  EXPECT_THROW(server.start(), ControlSocketError);
  std::ifstream in(socket_);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");
}

TEST_F(ControlSocketTest, ReplacesAStaleSocketButNotALiveServer) {
  {
    ControlServer first(socket_, handlers_);
    first.start();
    ControlServer second(socket_, handlers_);
    EXPECT_THROW(second.start(), ControlSocketError);
    EXPECT_TRUE(is_ok(control_request(socket_, "status"))) << "the live server was disturbed";
  }
  // A socket file left behind by a crashed daemon.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket_.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ::close(fd);
  ASSERT_TRUE(fs::is_socket(socket_));
  ControlServer server(socket_, handlers_);
  server.start();
  EXPECT_TRUE(is_ok(control_request(socket_, "status")));
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
  handlers_.status = [&calls]() -> DaemonStatus {
    if (++calls == 1) throw std::runtime_error("engine not started");
    return DaemonStatus{};
  };
  ControlServer server(socket_, handlers_);
  server.start();
  EXPECT_EQ(control_request(socket_, "status"), R"({"ok":false,"error":"engine not started"})");
  EXPECT_TRUE(is_ok(control_request(socket_, "status")));
}

TEST_F(ControlSocketTest, ConcurrentClientsAllGetTheirAnswers) {
  ControlServer server(socket_, handlers_);
  server.start();
  std::atomic<int> good{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        const std::string reply =
            (i % 2 == 0) ? control_request(socket_, "status")
                         : control_request(socket_, "load " + std::to_string(t) + " /f/" +
                                                        std::to_string(i) + ".txt");
        if (is_ok(reply)) good.fetch_add(1);
      }
    });
  }
  for (auto& client : clients) client.join();
  EXPECT_EQ(good.load(), 8 * 40);
  EXPECT_EQ(loads_.size(), 8u * 20u);
}

TEST_F(ControlSocketTest, StopReturnsPromptlyWithClientsConnected) {
  ControlServer server(socket_, handlers_);
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
  ControlServer server(socket_, handlers_);
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

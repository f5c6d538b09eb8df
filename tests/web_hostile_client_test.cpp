// The web server against hostile clients, over real sockets to a running
// `tapstream run`: paths spelled to leave the page (double slash, encoded
// dots and slashes, encoded NUL, backslashes, overlong targets, hidden
// files, a symlink out of the root), foreign Host and Origin headers on plain
// HTTP and on the websocket upgrade (the DNS-rebinding pair among them), a
// missing Host, a host allowed by [web] hosts, files too large to serve, and
// floods of connections. Every refusal must be logged.

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "daemon/control/control_socket.hpp"
#include "tests/process_support.hpp"
#include "tests/web_api_support.hpp"
#include "tests/websocket_client.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::api_ok;
using testing::Child;
using testing::free_port;
using testing::read_text;
using testing::TempDir;
using testing::WebsocketClient;
using Clock = std::chrono::steady_clock;

const std::string secret = "TOP-SECRET-7d41";

// A TCP connection to 127.0.0.1:port (-1 if refused).
int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` as it is and reads the response until the server closes
// or goes quiet for `quiet` (or, with `head_only`, to the end of its head).
std::string http_exchange(int port, const std::string& request,
                          std::chrono::milliseconds quiet = std::chrono::seconds(5),
                          bool head_only = false) {
  const int fd = connect_to(port);
  if (fd < 0) return "";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response;
  char buffer[65536];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(quiet.count())) <= 0) break;
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    response.append(buffer, static_cast<std::size_t>(n));
    if (head_only && response.find("\r\n\r\n") != std::string::npos) break;
  }
  ::close(fd);
  return response;
}

int status_of(const std::string& response) {
  return response.size() > 12 && response.rfind("HTTP/1.", 0) == 0 ? std::atoi(&response[9]) : 0;
}

std::string body_of(const std::string& response) {
  const auto end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

// The websocket upgrade of `target` with these header lines (each ending in
// "\r\n", the Host among them as the caller wants it): the response status.
int upgrade_status(int port, const std::string& target, const std::string& headers) {
  return status_of(http_exchange(port,
                                 "GET " + target +
                                     " HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                     "Sec-WebSocket-Version: 13\r\n" +
                                     headers + "\r\n",
                                 std::chrono::seconds(5), /*head_only=*/true));
}

// The daemon's peak resident memory, from /proc.
std::uint64_t peak_rss_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

class HostileClient : public ::testing::Test {
 protected:
  void SetUp() override {
    // Room for the floods below, here and in the daemon (which inherits it).
    rlimit files{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
    if (files.rlim_cur < 1024 && files.rlim_max >= 1024) {
      files.rlim_cur = 1024;
      ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0);
    }
    testing::write_stereo_wav(dir_ / "in.wav", 48000, 120);
    std::ofstream(dir_ / "unit.txt") << "1.0\n";
    // A page of our own, with things beside it that must never be served.
    fs::create_directories(root_ / "e2e");
    for (const char* name : {"index.html", "app.js", "style.css"}) {
      fs::copy_file(fs::path(TAPSTREAM_SOURCE_DIR) / "web" / name, root_ / name);
    }
    std::ofstream(dir_ / "secret.js") << secret << "\n";
    std::ofstream(root_ / ".hidden.js") << secret << "\n";
    std::ofstream(root_ / "e2e" / "package.json") << secret << "\n";
    fs::create_symlink(dir_ / "secret.js", root_ / "leak.js");
    fs::create_directory_symlink(dir_.path(), root_ / "outside");
    port_ = free_port();
  }

  // Starts the daemon; `web` is appended to its [web] table. `prefix` runs
  // before it (e.g. {"/bin/sh", "-c", "ulimit -n 256 && exec \"$0\" \"$@\""}).
  void start(const std::string& web = "", std::vector<std::string> prefix = {}) {
    std::ofstream(dir_ / "live.toml")
        << "sample_rate = 48000\nblock_frames = 256\nchannels = 2\n"
        << "[input]\nfile = \"in.wav\"\nrealtime = true\n"
        << "[output]\nfile = \"out.wav\"\n"
        << "[filter]\nfile = \"unit.txt\"\nmax_taps = 64\nwatch = false\n"
        << "[control]\nsocket = \"sock/control.sock\"\n"
        << "[web]\nport = " << port_ << "\nroot = \"page\"\n"
        << web;
    std::vector<std::string> argv = std::move(prefix);
    for (const std::string& arg : {std::string(TAPSTREAM_BINARY), std::string("run"),
                                   std::string("--config"), (dir_ / "live.toml").string()}) {
      argv.push_back(arg);
    }
    daemon_ = std::make_unique<Child>(argv, dir_ / "daemon.out", dir_ / "daemon.err");
    ASSERT_TRUE(testing::wait_for_daemon(
        *daemon_,
        [&] { return read_text(dir_ / "daemon.out").find("web: http") != std::string::npos; },
        dir_ / "daemon.err"));
  }

  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }

  // GET `target` with a proper Host.
  std::string get(const std::string& target, const std::string& headers = "") {
    return http_exchange(port_, "GET " + target + " HTTP/1.1\r\nHost: " + host() +
                                    "\r\nConnection: close\r\n" + headers + "\r\n");
  }

  // Waits for `text` in the daemon's log (stderr).
  ::testing::AssertionResult logged(const std::string& text) {
    return testing::wait_until(
        testing::long_wait,
        [&] { return read_text(dir_ / "daemon.err").find(text) != std::string::npos; },
        [&] { return "no \"" + text + "\" in the log:\n" + read_text(dir_ / "daemon.err"); });
  }

  TempDir dir_{"tapstream-hostile"};
  fs::path root_ = dir_ / "page";
  int port_ = 0;
  std::unique_ptr<Child> daemon_;
};

TEST_F(HostileClient, ThePageIsServedWholeAndHeadGivesItsLength) {
  ASSERT_NO_FATAL_FAILURE(start());
  const std::string index = read_text(root_ / "index.html");
  const std::string page = get("/");
  EXPECT_EQ(status_of(page), 200) << page;
  EXPECT_EQ(body_of(page), index);
  EXPECT_NE(page.find("text/html"), std::string::npos);
  const std::string script = get("/app.js");
  EXPECT_EQ(body_of(script), read_text(root_ / "app.js"));
  EXPECT_NE(script.find("text/javascript"), std::string::npos);
  EXPECT_NE(script.find("nosniff"), std::string::npos);
  // Empty segments are one separator: "//app.js" is /app.js.
  EXPECT_EQ(body_of(get("//app.js")), read_text(root_ / "app.js"));
  const std::string head = http_exchange(
      port_, "HEAD /style.css HTTP/1.1\r\nHost: " + host() + "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(head), 200);
  EXPECT_NE(head.find("Content-Length: " + std::to_string(fs::file_size(root_ / "style.css"))),
            std::string::npos)
      << head;
  EXPECT_EQ(body_of(head), "");
}

TEST_F(HostileClient, SpelledPathsOutsideThePageAreRefusedAndLogged) {
  ASSERT_NO_FATAL_FAILURE(start());
  const std::string absolute_secret = (dir_ / "secret.js").string();
  struct Case {
    std::string target;
    int status;  // 400 or 404 (414 for the overlong one)
  };
  const std::vector<Case> cases = {
      {"/" + absolute_secret, 404},  // "//tmp/...": an absolute path under the old code
      {"//etc/passwd", 404},
      {"/..%2f..%2f..%2f..%2fetc/passwd", 404},
      {"/%2e%2e/%2e%2e/etc/passwd", 404},
      {"/%2E%2E/", 404},
      {"/../secret.js", 404},
      {"/page/..%5csecret.js", 404},  // an encoded backslash
      {"/..\\..\\etc\\passwd", 404},  // backslashes as they are
      {"/index.html%00.js", 400},     // an encoded NUL
      {"/%zz", 400},                  // not a percent escape
      {"/app.js%", 400},
      {"/" + std::string(4000, 'a') + ".js", 414},
      {"/leak.js", 404},            // a symlink out of the root
      {"/outside/secret.js", 404},  // through a linked folder
      {"/.hidden.js", 404},         // hidden files
      {"/e2e/package.json", 404},   // not one of a page's types
      {"/ws", 404},                 // the API's path without an upgrade
  };
  for (const Case& c : cases) {
    const std::string response = get(c.target);
    EXPECT_EQ(status_of(response), c.status) << c.target << " ->\n" << response.substr(0, 300);
    EXPECT_EQ(response.find(secret), std::string::npos) << c.target;
    EXPECT_EQ(response.find("root:"), std::string::npos) << c.target;
  }
  EXPECT_TRUE(logged("leads out of the web root"));
  EXPECT_TRUE(logged("malformed percent escape"));
  EXPECT_TRUE(logged("encodes a control character"));
  EXPECT_TRUE(logged("hidden segment"));
  // The log shows the client's bytes escaped, never as they came.
  const std::string raw_escape = get("/%1b%5b31m.js");
  EXPECT_EQ(status_of(raw_escape), 400);
  EXPECT_TRUE(logged("refused (400)"));
  EXPECT_EQ(read_text(dir_ / "daemon.err").find('\x1b'), std::string::npos);
  // Still serving.
  EXPECT_EQ(status_of(get("/index.html")), 200);
}

TEST_F(HostileClient, FilesTooLargeOrNotRegularAreRefusedWithoutBeingRead) {
  // A sparse 4 GB file costs no disk; reading it whole would cost the
  // daemon gigabytes of memory.
  { std::ofstream big(root_ / "big.js"); }
  fs::resize_file(root_ / "big.js", std::uintmax_t{4} << 30);
  { std::ofstream over(root_ / "over.js"); }
  fs::resize_file(root_ / "over.js", (16 << 20) + 1);
  // A file a little under the bound is streamed whole.
  const std::string large(3 << 20, 'x');
  std::ofstream(root_ / "large.js") << large;
  ASSERT_EQ(::mkfifo((root_ / "pipe.js").c_str(), 0600), 0);
  ASSERT_NO_FATAL_FAILURE(start());
  const std::uint64_t peak_before = peak_rss_kib(daemon_->pid());

  const auto started = Clock::now();
  const std::string big = get("/big.js");
  EXPECT_EQ(status_of(big), 404) << big.substr(0, 300);
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(5));
  EXPECT_EQ(status_of(get("/over.js")), 404);
  EXPECT_EQ(status_of(get("/pipe.js")), 404);  // and the server did not wait for a writer
  EXPECT_TRUE(logged("more than a page file may have"));
  EXPECT_TRUE(logged("not a regular file"));

  const std::string served = get("/large.js");
  EXPECT_EQ(status_of(served), 200);
  EXPECT_EQ(body_of(served).size(), large.size());
  const std::uint64_t peak_after = peak_rss_kib(daemon_->pid());
  std::printf("daemon peak RSS: %llu KiB before, %llu KiB after\n",
              static_cast<unsigned long long>(peak_before),
              static_cast<unsigned long long>(peak_after));
  EXPECT_LT(peak_after, peak_before + 32 * 1024) << "the daemon read a file whole";
}

TEST_F(HostileClient, ForeignHostsAreRefusedOnPlainHttpAndOnTheUpgrade) {
  ASSERT_NO_FATAL_FAILURE(start());
  const std::string port = std::to_string(port_);
  const auto page_with_host = [&](const std::string& host) {
    return status_of(
        http_exchange(port_, "GET / HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n"));
  };
  for (const std::string& allowed :
       std::vector<std::string>{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port,
                                "LOCALHOST:" + port, "127.0.0.1", "localhost"}) {
    EXPECT_EQ(page_with_host(allowed), 200) << allowed;
    EXPECT_EQ(upgrade_status(port_, "/ws", "Host: " + allowed + "\r\n"), 101) << allowed;
  }
  for (const std::string& foreign : std::vector<std::string>{
           "attacker.example:" + port, "attacker.example", "127.0.0.1:" + std::to_string(port_ + 1),
           "localhost.attacker.example:" + port, "127.0.0.1.nip.io:" + port, "localhost.:" + port,
           "[::2]:" + port, "127.0.0.2:" + port}) {
    EXPECT_EQ(page_with_host(foreign), 403) << foreign;
    EXPECT_EQ(upgrade_status(port_, "/ws", "Host: " + foreign + "\r\n"), 403) << foreign;
  }
  EXPECT_TRUE(logged("Host 'attacker.example:" + port + "' is not a name of this server"));
  // Bytes a client puts in its Host reach the log escaped, never as they came.
  EXPECT_EQ(page_with_host("evil\t\xff.example"), 403);
  EXPECT_TRUE(logged("evil\\x09\\xff.example"));
  EXPECT_EQ(read_text(dir_ / "daemon.err").find('\xff'), std::string::npos);
}

TEST_F(HostileClient, ADnsRebindingPageIsRefused) {
  // A page from attacker.example whose name now resolves to 127.0.0.1:
  // its requests carry its own name in Host and Origin alike.
  ASSERT_NO_FATAL_FAILURE(start());
  const std::string site = "attacker.example:" + std::to_string(port_);
  const std::string pair = "Host: " + site + "\r\nOrigin: http://" + site + "\r\n";
  EXPECT_EQ(upgrade_status(port_, "/ws", pair), 403);
  EXPECT_EQ(status_of(http_exchange(port_, "GET /app.js HTTP/1.1\r\n" + pair + "\r\n")), 403);
  EXPECT_TRUE(logged("is not a name of this server"));
}

TEST_F(HostileClient, ForeignOriginsAreRefusedAndThePagesOwnAccepted) {
  ASSERT_NO_FATAL_FAILURE(start());
  const std::string port = std::to_string(port_);
  const std::string host = "Host: " + this->host() + "\r\n";
  for (const std::string& origin : std::vector<std::string>{
           "http://evil.example", "http://evil.example:" + port, "null", "file://",
           "http://127.0.0.1:" + std::to_string(port_ + 1), "ftp://127.0.0.1:" + port,
           "http://127.0.0.1:" + port + "/x", "http://127.0.0.1:" + port + ".evil.example"}) {
    EXPECT_EQ(upgrade_status(port_, "/ws", host + "Origin: " + origin + "\r\n"), 403) << origin;
    EXPECT_EQ(status_of(get("/", "Origin: " + origin + "\r\n")), 403) << origin;
  }
  EXPECT_TRUE(logged("Origin 'null' is not a page of this server"));
  for (const std::string& origin : std::vector<std::string>{
           "http://127.0.0.1:" + port, "https://localhost:" + port, "http://[::1]:" + port}) {
    EXPECT_EQ(upgrade_status(port_, "/ws", host + "Origin: " + origin + "\r\n"), 101) << origin;
    EXPECT_EQ(status_of(get("/", "Origin: " + origin + "\r\n")), 200) << origin;
  }
  // Two Origin headers, the second foreign.
  EXPECT_EQ(upgrade_status(
                port_, "/ws",
                host + "Origin: http://" + this->host() + "\r\nOrigin: http://evil.example\r\n"),
            403);
}

TEST_F(HostileClient, AMissingOrRepeatedHostIsRefused) {
  ASSERT_NO_FATAL_FAILURE(start());
  const std::string none = http_exchange(port_, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(none), 400) << none;
  EXPECT_EQ(upgrade_status(port_, "/ws", ""), 400);
  const std::string two = http_exchange(
      port_, "GET / HTTP/1.1\r\nHost: " + host() + "\r\nHost: attacker.example\r\n\r\n");
  EXPECT_EQ(status_of(two), 400);
  EXPECT_TRUE(logged("no Host header"));
  // HTTP/1.0 has no Host to require.
  EXPECT_EQ(status_of(http_exchange(port_, "GET / HTTP/1.0\r\n\r\n")), 200);
}

TEST_F(HostileClient, AHostListedInWebHostsIsAcceptedAndNoOther) {
  ASSERT_NO_FATAL_FAILURE(start("hosts = [\"Studio.example\", \"192.168.7.7\"]\n"));
  const std::string port = std::to_string(port_);
  for (const std::string& name : std::vector<std::string>{"studio.example", "192.168.7.7"}) {
    const std::string pair =
        "Host: " + name + ":" + port + "\r\nOrigin: http://" + name + ":" + port + "\r\n";
    EXPECT_EQ(upgrade_status(port_, "/ws", pair), 101) << name;
    EXPECT_EQ(
        status_of(http_exchange(port_, "GET / HTTP/1.1\r\nConnection: close\r\n" + pair + "\r\n")),
        200)
        << name;
  }
  EXPECT_EQ(upgrade_status(port_, "/ws", "Host: studio.example.attacker.example:" + port + "\r\n"),
            403);
  // The token is still asked for when there is one.
  daemon_.reset();
  ASSERT_NO_FATAL_FAILURE(
      start("hosts = [\"studio.example\"]\ntoken = \"correct-horse-battery-staple\"\n"));
  const std::string studio = "Host: studio.example:" + port + "\r\n";
  EXPECT_EQ(upgrade_status(port_, "/ws", studio), 401);
  EXPECT_EQ(upgrade_status(port_, "/ws?token=correct-horse-battery-staple", studio), 101);
}

TEST_F(HostileClient, WebsocketClientsBeyondTheLimitAreTurnedAwayAndTheOthersStay) {
  ASSERT_NO_FATAL_FAILURE(start());
  std::vector<std::unique_ptr<WebsocketClient>> clients;
  int refused = 0;
  for (int i = 0; i < 140; ++i) {
    int status = 0;
    auto client = std::make_unique<WebsocketClient>(port_, "/ws", &status);
    if (status == 503) ++refused;
    if (client->open()) clients.push_back(std::move(client));
  }
  EXPECT_EQ(clients.size(), 128u);
  EXPECT_EQ(refused, 12);
  EXPECT_EQ(api_ok(*clients.front(), {{"request", "get_state"}})["state"], "running");
  EXPECT_EQ(api_ok(*clients.back(), {{"request", "get_state"}})["state"], "running");
  clients.clear();
  // Their places free up as they close.
  std::unique_ptr<WebsocketClient> late;
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] {
        late = std::make_unique<WebsocketClient>(port_, "/ws");
        return late->open();
      },
      "a websocket connection accepted after the others closed", std::chrono::milliseconds(20)));
  EXPECT_EQ(api_ok(*late, {{"request", "get_state"}})["state"], "running");
}

TEST_F(HostileClient, AFloodOfConnectionsLeavesTheDaemonItsDescriptorsAndTheAudioRunning) {
  // The daemon gets 256 descriptors; the flood opens 400 connections that
  // never send a byte. The web server must keep to its share, so that the
  // control socket still answers and the audio goes on.
  ASSERT_NO_FATAL_FAILURE(start("", {"/bin/sh", "-c", "ulimit -n 256 && exec \"$0\" \"$@\""}));
  const fs::path socket = dir_ / "sock/control.sock";
  // The control socket opens just after the web server: wait for it.
  std::string first;
  std::string refused;
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] {
        try {
          first = control_request(socket, R"({"request":"get_stats"})");
        } catch (const ControlSocketError& e) {
          refused = e.what();
        }
        return !first.empty();
      },
      [&] { return refused; }, std::chrono::milliseconds(20)));
  const json before = json::parse(first);

  std::vector<int> flood;
  for (int i = 0; i < 400; ++i) {
    const int fd = connect_to(port_);
    if (fd >= 0) flood.push_back(fd);
  }
  EXPECT_GT(flood.size(), 300u);
  EXPECT_TRUE(logged("connections open, the most allowed"));
  // While it lasts, the control socket answers and the audio goes on.
  const std::uint64_t blocks_before = before["result"]["blocks"].get<std::uint64_t>();
  std::uint64_t blocks = blocks_before;
  EXPECT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] {
        std::string reply;
        // Every try must be answered: the flood may not starve the control socket.
        EXPECT_NO_THROW(
            reply = control_request(socket, R"({"request":"get_stats"})", std::chrono::seconds(5)));
        if (!reply.empty()) blocks = json::parse(reply)["result"]["blocks"].get<std::uint64_t>();
        return blocks > blocks_before;
      },
      [&] { return "no audio block during the flood; blocks " + std::to_string(blocks); },
      std::chrono::milliseconds(20)));
  for (const int fd : flood) ::close(fd);

  // Once the flood has gone, clients are served again.
  std::unique_ptr<WebsocketClient> client;
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] {
        client = std::make_unique<WebsocketClient>(port_, "/ws");
        return client->open();
      },
      "a websocket connection accepted after the flood", std::chrono::milliseconds(20)));
  EXPECT_EQ(api_ok(*client, {{"request", "get_state"}})["state"], "running");
  EXPECT_TRUE(daemon_->running());
}

}  // namespace
}  // namespace tapstream

#include "daemon/control/control_socket.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "daemon/control/json.hpp"
#include "daemon/control/request_text.hpp"
#include "dsp/realtime/thread_role.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr std::size_t max_pending_reply_bytes = 1 << 20;  // a client that never reads is dropped
constexpr auto idle_client_timeout = std::chrono::seconds(60);

std::string errno_text(int error) {
  return std::strerror(error);
}

// An owned file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

sockaddr_un socket_address(const fs::path& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string text = path.string();
  if (text.empty() || text.size() >= sizeof(address.sun_path)) {
    throw ControlSocketError("control socket path '" + text + "' is empty or longer than " +
                             std::to_string(sizeof(address.sun_path) - 1) + " bytes");
  }
  std::memcpy(address.sun_path, text.c_str(), text.size() + 1);
  return address;
}

// An error as the API writes it (daemon/control/control_api.hpp).
std::string error_reply(std::string_view message, std::string_view type = "bad_request") {
  return json_line(Json{{"ok", false}, {"error", {{"type", type}, {"message", message}}}});
}

std::string oversized_reply() {
  return error_reply("request longer than " + std::to_string(max_control_request_bytes) +
                     " bytes (the websocket's bound too); the connection is closed");
}

// Creates the socket's directory (0700) if needed and checks that only the
// user can write it.
void prepare_directory(const fs::path& directory) {
  std::error_code error;
  if (!fs::exists(directory, error)) {
    if (directory.has_parent_path()) fs::create_directories(directory.parent_path(), error);
    if (::mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) {
      throw ControlSocketError("cannot create control socket directory " + directory.string() +
                               ": " + errno_text(errno));
    }
  }
  struct stat info {};
  if (::stat(directory.c_str(), &info) != 0) {
    throw ControlSocketError("control socket directory " + directory.string() + ": " +
                             errno_text(errno));
  }
  if (!S_ISDIR(info.st_mode)) {
    throw ControlSocketError("control socket directory " + directory.string() +
                             " is not a directory");
  }
  if (info.st_uid != ::geteuid()) {
    throw ControlSocketError("control socket directory " + directory.string() +
                             " belongs to another user (uid " + std::to_string(info.st_uid) +
                             "); refusing to use it");
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(info.st_mode & 07777));
    throw ControlSocketError("control socket directory " + directory.string() + " (mode " + mode +
                             ") is writable by group or others; refusing to use it (chmod 700 " +
                             directory.string() + ")");
  }
}

// Removes a socket file that no server answers on; refuses anything else.
void remove_stale_socket(const fs::path& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) return;  // nothing there
  if (!S_ISSOCK(info.st_mode)) {
    throw ControlSocketError(path.string() + " exists and is not a socket; refusing to replace it");
  }
  Fd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const sockaddr_un address = socket_address(path);
  if (probe.get() >= 0 &&
      ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
    throw ControlSocketError("another server is listening on " + path.string() +
                             " (is tapstream already running?)");
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    throw ControlSocketError("cannot remove stale socket " + path.string() + ": " +
                             errno_text(errno));
  }
}

struct Client {
  Fd fd;
  std::string input;
  std::size_t scanned = 0;  // bytes of `input` known to hold no newline
  std::string output;
  bool closing = false;  // close once `output` is sent
  Clock::time_point last_active = Clock::now();
};

}  // namespace

ControlServer::ControlServer(fs::path socket_path, ControlAnswer answer)
    : path_(std::move(socket_path)), answer_(std::move(answer)) {}

ControlServer::~ControlServer() {
  stop();
}

void ControlServer::start() {
  if (thread_.joinable()) return;
  const sockaddr_un address = socket_address(path_);  // checks the length of the name
  prepare_directory(path_.has_parent_path() ? path_.parent_path() : fs::path("."));
  remove_stale_socket(path_);

  // Bound and listening under a name of its own first, then renamed into
  // place: a client that sees the socket's name can connect at once (between
  // bind and listen a connect is refused, and a script that waits for the
  // file would race the daemon). Where that name does not fit sun_path, the
  // socket is bound in place.
  fs::path bound_path = path_;
  bound_path += "~";
  if (bound_path.string().size() >= sizeof(address.sun_path)) bound_path = path_;
  const sockaddr_un bound_address = socket_address(bound_path);
  if (bound_path != path_ && ::unlink(bound_path.c_str()) != 0 && errno != ENOENT) {
    throw ControlSocketError("cannot remove " + bound_path.string() + ": " + errno_text(errno));
  }
  Fd listen_fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (listen_fd.get() < 0) throw ControlSocketError("socket(AF_UNIX): " + errno_text(errno));
  if (::bind(listen_fd.get(), reinterpret_cast<const sockaddr*>(&bound_address),
             sizeof bound_address) != 0) {
    throw ControlSocketError("cannot bind control socket " + bound_path.string() + ": " +
                             errno_text(errno));
  }
  // The directory is 0700, so nobody else can reach the socket between bind and chmod.
  if (::chmod(bound_path.c_str(), 0600) != 0 || ::listen(listen_fd.get(), 16) != 0 ||
      (bound_path != path_ && ::rename(bound_path.c_str(), path_.c_str()) != 0)) {
    const int error = errno;
    ::unlink(bound_path.c_str());
    throw ControlSocketError("cannot set up control socket " + path_.string() + ": " +
                             errno_text(error));
  }
  try {
    stop_pipe_.emplace();
  } catch (const std::system_error& e) {
    ::unlink(path_.c_str());
    throw ControlSocketError(e.what());
  }
  listen_fd_ = listen_fd.release();
  thread_ = std::thread([this] {
    name_this_thread("ts-control");
    make_this_thread_background();
    serve();
  });
}

void ControlServer::stop() {
  if (thread_.joinable()) {
    stop_pipe_->notify();
    thread_.join();
  }
  stop_pipe_.reset();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
    ::unlink(path_.c_str());
  }
}

namespace {

constexpr std::string_view json_form =
    "the control socket takes one JSON request per line, as {\"request\":\"get_status\"} or "
    "{\"request\":\"load\",\"channel\":0,\"file\":\"/abs/f.txt\"} (docs/api.md); "
    "`tapstream ctl status|load|reload|stop` writes them for you";

}  // namespace

std::string ControlServer::handle_request(std::string_view line) const {
  try {
    line = trim(line);
    if (line.empty()) return error_reply("empty request: " + std::string(json_form));
    if (line.front() != '{') {
      return error_reply("'" + shorten(line) +
                         "' is not a JSON request: " + std::string(json_form));
    }
    const Json json = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (json.is_object() && json.contains("command") && !json.contains("request")) {
      return error_reply("{\"command\": ...} requests are retired; write {\"request\": ...}: " +
                         std::string(json_form));
    }
    // Everything else, malformed JSON included, is the API's to answer.
    return answer_(line);
  } catch (const std::exception& e) {
    return error_reply(e.what(), "internal");
  } catch (...) {
    return error_reply("internal error", "internal");
  }
}

void ControlServer::serve() {
  std::vector<Client> clients;
  std::vector<pollfd> fds;
  std::vector<char> buffer(64 * 1024);  // an upload of megabytes comes in few reads

  const auto queue_reply = [](Client& client, const std::string& reply) {
    // A client that does not read its replies is dropped once more than the
    // bound of them wait; one reply of any size (a trace runs to megabytes) goes out.
    if (client.output.size() > max_pending_reply_bytes) {
      client.output.clear();
      client.closing = true;
      client.fd.reset();
      return;
    }
    client.output += reply;
    client.output += '\n';
  };
  // Answers every complete line in client.input; an oversized one ends the connection.
  const auto answer_lines = [&](Client& client, bool at_eof) {
    while (!client.closing) {
      const auto newline = client.input.find('\n', client.scanned);
      if (newline == std::string::npos) {
        client.scanned = client.input.size();
        if (client.input.size() > max_request_bytes) {
          queue_reply(client, oversized_reply());
          client.closing = true;
        } else if (at_eof && !trim(client.input).empty()) {
          queue_reply(client, handle_request(client.input));
          client.input.clear();
          client.scanned = 0;
        }
        return;
      }
      if (newline > max_request_bytes) {
        queue_reply(client, oversized_reply());
        client.closing = true;
        return;
      }
      const std::string line = client.input.substr(0, newline);
      client.input.erase(0, newline + 1);
      client.scanned = 0;
      queue_reply(client, handle_request(line));
    }
  };

  while (true) {
    const auto now = Clock::now();
    for (auto& client : clients) {
      if (now - client.last_active > idle_client_timeout) client.fd.reset();
    }
    std::erase_if(clients, [](const Client& c) { return c.fd.get() < 0; });
    fds.clear();
    fds.push_back({stop_pipe_->read_fd(), POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const auto& client : clients) {
      short events = 0;
      if (!client.closing) events |= POLLIN;
      if (!client.output.empty()) events |= POLLOUT;
      fds.push_back({client.fd.get(), events, 0});
    }
    const int ready = ::poll(fds.data(), fds.size(), 1000);
    if (ready < 0 && errno != EINTR) break;  // cannot happen with valid fds; do not spin
    if (ready <= 0) continue;
    if (fds[0].revents != 0) break;  // stop()

    for (std::size_t i = 0; i < clients.size(); ++i) {
      Client& client = clients[i];
      const short revents = fds[i + 2].revents;
      if (revents == 0 || client.fd.get() < 0) continue;
      client.last_active = Clock::now();
      if (revents & (POLLIN | POLLHUP | POLLERR)) {
        const ssize_t got = ::recv(client.fd.get(), buffer.data(), buffer.size(), 0);
        if (got > 0) {
          client.input.append(buffer.data(), static_cast<std::size_t>(got));
          answer_lines(client, false);
        } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
          answer_lines(client, true);
          client.closing = true;
          if (got < 0) client.output.clear();
        }
      }
      if (!client.output.empty() && client.fd.get() >= 0) {
        const ssize_t sent = ::send(client.fd.get(), client.output.data(), client.output.size(),
                                    MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent > 0) {
          client.output.erase(0, static_cast<std::size_t>(sent));
        } else if (sent < 0 && errno != EAGAIN && errno != EINTR) {
          client.fd.reset();  // the peer went away
        }
      }
      if (client.closing && client.output.empty()) client.fd.reset();
    }
    std::erase_if(clients, [](const Client& c) { return c.fd.get() < 0; });

    if (fds[1].revents & POLLIN) {
      Fd fd(::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (fd.get() >= 0) {
        ucred peer{};
        socklen_t length = sizeof peer;
        Client client;
        client.fd = std::move(fd);
        if (::getsockopt(client.fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 ||
            peer.uid != ::geteuid()) {
          queue_reply(client, error_reply("permission denied"));
          client.closing = true;
        } else if (clients.size() >= max_clients) {
          queue_reply(client, error_reply("too many control connections"));
          client.closing = true;
        }
        clients.push_back(std::move(client));
      }
    }
  }
}

std::string control_request(const fs::path& socket_path, std::string_view request,
                            std::chrono::milliseconds timeout) {
  if (request.find('\n') != std::string_view::npos) {
    throw ControlSocketError("a control request is one line");
  }
  const sockaddr_un address = socket_address(socket_path);
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) throw ControlSocketError("socket(AF_UNIX): " + errno_text(errno));
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    const int error = errno;
    std::string hint;
    if (error == ENOENT || error == ECONNREFUSED) hint = " (is `tapstream run` running?)";
    throw ControlSocketError("cannot connect to " + socket_path.string() + ": " +
                             errno_text(error) + hint);
  }
  const auto deadline = Clock::now() + timeout;
  const auto wait_for = [&](short events) {
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        throw ControlSocketError("no reply from " + socket_path.string() + " within " +
                                 std::to_string(timeout.count()) + " ms");
      }
      pollfd p{fd.get(), events, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
      if (ready > 0) return;
      if (ready < 0 && errno != EINTR) throw ControlSocketError("poll: " + errno_text(errno));
    }
  };

  const std::string line = std::string(request) + "\n";
  std::size_t sent = 0;
  while (sent < line.size()) {
    wait_for(POLLOUT);
    const ssize_t n =
        ::send(fd.get(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      throw ControlSocketError("sending to " + socket_path.string() + ": " + errno_text(errno));
    }
    if (n > 0) sent += static_cast<std::size_t>(n);
  }

  std::string reply;
  std::vector<char> buffer(std::size_t(1) << 16);
  std::size_t searched = 0;  // the reply before this holds no newline (replies run to megabytes)
  while (true) {
    const auto newline = reply.find('\n', searched);
    if (newline != std::string::npos) return reply.substr(0, newline);
    searched = reply.size();
    wait_for(POLLIN);
    const ssize_t n = ::recv(fd.get(), buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (n == 0) {
      if (!reply.empty()) return reply;
      throw ControlSocketError(socket_path.string() + " closed the connection without a reply");
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      throw ControlSocketError("reading from " + socket_path.string() + ": " + errno_text(errno));
    }
    if (n > 0) reply.append(buffer.data(), static_cast<std::size_t>(n));
  }
}

}  // namespace tapstream

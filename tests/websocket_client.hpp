#pragma once
// A minimal websocket client for tests (RFC 6455 over a blocking TCP socket,
// text frames, no extensions): enough to talk to tapstream's API as any
// client would, and to misbehave on purpose (floods, oversized messages).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>

namespace tapstream::testing {

class WebsocketClient {
 public:
  // Connects and upgrades; `status` receives the HTTP status line's code
  // (101 on success). `extra_headers` end with "\r\n" each.
  WebsocketClient(int port, const std::string& target, int* status = nullptr,
                  const std::string& extra_headers = "") {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      close();
      return;
    }
    const std::string request = "GET " + target +
                                " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                                "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                "Sec-WebSocket-Version: 13\r\n" +
                                extra_headers + "\r\n";
    send_all(request);
    std::string head;
    while (head.find("\r\n\r\n") == std::string::npos) {
      char c;
      if (!read_exact(&c, 1, std::chrono::seconds(5))) break;
      head.push_back(c);
    }
    const int code = head.size() > 12 ? std::atoi(head.c_str() + 9) : 0;
    if (status != nullptr) *status = code;
    if (code != 101) close();
  }
  ~WebsocketClient() { close(); }
  WebsocketClient(const WebsocketClient&) = delete;
  WebsocketClient& operator=(const WebsocketClient&) = delete;

  bool open() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // A browser answers the server's pings; a client that hangs does not.
  void answer_pings(bool answer) { answer_pings_ = answer; }
  // A close frame or the end of the stream was read (not a timeout).
  bool closed_by_server() const { return closed_by_server_; }

  // Sends one masked text frame; false once the connection is gone.
  bool send(const std::string& text) { return send_frame(0x1, text); }

  // Sends one masked frame of `opcode` (0x1 text, 0xA pong, ...).
  bool send_frame(int opcode, const std::string& text) {
    std::string frame;
    frame.push_back(static_cast<char>(0x80 | opcode));
    const std::size_t n = text.size();
    if (n < 126) {
      frame.push_back(static_cast<char>(0x80 | n));
    } else if (n < 65536) {
      frame.push_back(static_cast<char>(0x80 | 126));
      frame.push_back(static_cast<char>(n >> 8));
      frame.push_back(static_cast<char>(n & 0xff));
    } else {
      frame.push_back(static_cast<char>(0x80 | 127));
      for (int shift = 56; shift >= 0; shift -= 8) frame.push_back(static_cast<char>(n >> shift));
    }
    const char mask[4] = {0x12, 0x34, 0x56, 0x78};
    frame.append(mask, 4);
    for (std::size_t i = 0; i < n; ++i) frame.push_back(static_cast<char>(text[i] ^ mask[i % 4]));
    return send_all(frame);
  }

  // The next text message; nullopt on close, error or timeout.
  std::optional<std::string> receive(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::string message;
    while (true) {
      unsigned char head[2];
      if (!read_exact(head, 2, timeout)) return std::nullopt;
      std::uint64_t length = head[1] & 0x7f;
      if (length == 126 || length == 127) {
        unsigned char bytes[8];
        const int count = length == 126 ? 2 : 8;
        if (!read_exact(bytes, count, timeout)) return std::nullopt;
        length = 0;
        for (int i = 0; i < count; ++i) length = (length << 8) | bytes[i];
      }
      std::string payload(length, '\0');
      if (length > 0 && !read_exact(payload.data(), length, timeout)) return std::nullopt;
      const int opcode = head[0] & 0x0f;
      if (opcode == 0x8) {
        closed_by_server_ = true;
        return std::nullopt;
      }
      if (opcode == 0x9 && answer_pings_ && !send_frame(0xA, payload)) return std::nullopt;
      if (opcode == 0x9 || opcode == 0xA) continue;
      message += payload;
      if (head[0] & 0x80) return message;
    }
  }

  // Sends a request and returns the first reply that is not a pushed event.
  std::optional<std::string> request(const std::string& text) {
    if (!send(text)) return std::nullopt;
    while (true) {
      auto reply = receive();
      if (!reply || reply->find("\"event\"") == std::string::npos) return reply;
    }
  }

 private:
  bool send_all(const std::string& data) {
    std::size_t sent = 0;
    while (fd_ >= 0 && sent < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return fd_ >= 0;
  }
  bool read_exact(void* out, std::size_t n, std::chrono::milliseconds timeout) {
    auto* bytes = static_cast<char*>(out);
    std::size_t got = 0;
    while (fd_ >= 0 && got < n) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
      const ssize_t r = ::recv(fd_, bytes + got, n - got, 0);
      if (r <= 0) {
        closed_by_server_ = r == 0;
        return false;
      }
      got += static_cast<std::size_t>(r);
    }
    return got == n;
  }

  int fd_ = -1;
  bool answer_pings_ = true;
  bool closed_by_server_ = false;
};

}  // namespace tapstream::testing

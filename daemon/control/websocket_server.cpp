#include "daemon/control/websocket_server.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <deque>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "daemon/control/control_api.hpp"

namespace tapstream {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace fs = std::filesystem;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

bool constant_time_equal(const std::string& a, const std::string& b) {
  const std::size_t n = std::max(a.size(), b.size());
  unsigned char difference = a.size() != b.size() ? 1 : 0;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    difference |= static_cast<unsigned char>(x ^ y);
  }
  return difference == 0;
}

namespace {

constexpr std::size_t max_header_bytes = 16 * 1024;
constexpr std::size_t max_queued_messages = 256;
constexpr std::size_t max_queued_bytes = 16 << 20;
constexpr auto http_timeout = std::chrono::seconds(30);

std::string percent_decode(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      out.push_back(static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(text[i] == '+' ? ' ' : text[i]);
    }
  }
  return out;
}

std::optional<std::string> query_value(std::string_view target, std::string_view name) {
  const auto question = target.find('?');
  if (question == std::string_view::npos) return std::nullopt;
  std::string_view query = target.substr(question + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const auto equals = pair.find('=');
    if (pair.substr(0, equals) == name && equals != std::string_view::npos) {
      try {
        return percent_decode(pair.substr(equals + 1));
      } catch (const std::exception&) {
        return std::nullopt;
      }
    }
    if (amp == std::string_view::npos) break;
    query = query.substr(amp + 1);
  }
  return std::nullopt;
}

std::string_view path_of(std::string_view target) {
  return target.substr(0, target.find('?'));
}

const char* content_type(const fs::path& file) {
  const std::string extension = file.extension().string();
  if (extension == ".html") return "text/html; charset=utf-8";
  if (extension == ".js") return "text/javascript; charset=utf-8";
  if (extension == ".css") return "text/css; charset=utf-8";
  if (extension == ".svg") return "image/svg+xml";
  if (extension == ".png") return "image/png";
  if (extension == ".json") return "application/json";
  return "application/octet-stream";
}

}  // namespace

struct WebsocketServer::Impl {
  // Declared before `io`, so that sessions still held by its handlers when
  // it is destroyed can count themselves out.
  WebsocketServerOptions options;
  ControlApi& api;
  std::size_t clients = 0;  // websocket sessions; io thread only
  std::atomic<int> bound_port{0};
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::thread thread;

  Impl(WebsocketServerOptions o, ControlApi& a) : options(std::move(o)), api(a) {}

  void accept();
};

namespace {

class WsSession : public std::enable_shared_from_this<WsSession> {
 public:
  WsSession(tcp::socket&& socket, WebsocketServer::Impl& server)
      : ws_(std::move(socket)), server_(server), timer_(server.io) {
    ++server_.clients;
  }
  ~WsSession() { --server_.clients; }

  void run(http::request<http::string_body> request) {
    beast::get_lowest_layer(ws_).expires_never();
    // Beast's suggested server timeouts close a connection that has sent
    // nothing for 5 minutes and never ping it: a page that only watches the
    // meters was cut off then. Pinging keeps a live listener; a dead one is
    // closed within idle_timeout.
    websocket::stream_base::timeout timeouts{};
    timeouts.handshake_timeout = http_timeout;
    timeouts.idle_timeout = server_.options.idle_timeout;
    timeouts.keep_alive_pings = true;
    ws_.set_option(timeouts);
    ws_.read_message_max(server_.options.max_message_bytes);
    tokens_ = 2 * server_.options.max_messages_per_second;
    refilled_ = Clock::now();
    ws_.async_accept(request, [self = shared_from_this()](beast::error_code error) {
      if (!error) self->read();
    });
  }

 private:
  void read() {
    ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code error, std::size_t) {
      self->on_read(error);
    });
  }

  void cut_off(const char* why) {
    spdlog::warn("websocket client cut off: {}", why);
    closed_ = true;
    timer_.cancel();
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().shutdown(tcp::socket::shutdown_both, ignored);
    beast::get_lowest_layer(ws_).socket().close(ignored);
  }

  void on_read(beast::error_code error) {
    if (error) {
      if (error == websocket::error::message_too_big) cut_off("message too big");
      closed_ = true;
      timer_.cancel();
      return;
    }
    const auto now = Clock::now();
    const double rate = server_.options.max_messages_per_second;
    tokens_ =
        std::min(2 * rate, tokens_ + rate * std::chrono::duration<double>(now - refilled_).count());
    refilled_ = now;
    if (tokens_ < 1.0) return cut_off("more than the allowed requests per second");
    tokens_ -= 1.0;

    const std::string text = beast::buffers_to_string(buffer_.data());
    buffer_.consume(buffer_.size());
    const auto before = session_.meter_interval;
    send(server_.api.handle(text, session_));
    if (closed_) return;
    if (session_.meter_interval != before) {
      timer_.cancel();
      if (session_.meter_interval) tick();
    }
    read();
  }

  void tick() {
    timer_.expires_after(*session_.meter_interval);
    timer_.async_wait([self = shared_from_this()](beast::error_code error) {
      if (error || self->closed_ || !self->session_.meter_interval) return;
      // A slow reader skips frames of meters rather than piling them up.
      if (self->queue_.size() < 4) self->send(self->server_.api.meters_event(self->session_));
      if (!self->closed_) self->tick();
    });
  }

  void send(std::string message) {
    if (closed_) return;
    queued_bytes_ += message.size();
    queue_.push_back(std::move(message));
    if (queue_.size() > max_queued_messages || queued_bytes_ > max_queued_bytes) {
      return cut_off("replies not read");
    }
    if (queue_.size() == 1) write_next();
  }

  void write_next() {
    ws_.text(true);
    ws_.async_write(asio::buffer(queue_.front()),
                    [self = shared_from_this()](beast::error_code error, std::size_t) {
                      if (error) {
                        self->closed_ = true;
                        self->timer_.cancel();
                        return;
                      }
                      self->queued_bytes_ -= self->queue_.front().size();
                      self->queue_.pop_front();
                      if (!self->queue_.empty() && !self->closed_) self->write_next();
                    });
  }

  websocket::stream<beast::tcp_stream> ws_;
  WebsocketServer::Impl& server_;
  asio::steady_timer timer_;
  beast::flat_buffer buffer_;
  ApiSession session_;
  std::deque<std::string> queue_;
  std::size_t queued_bytes_ = 0;
  double tokens_ = 0;
  Clock::time_point refilled_;
  bool closed_ = false;
};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket&& socket, WebsocketServer::Impl& server)
      : stream_(std::move(socket)), server_(server) {}

  void read() {
    parser_.emplace();
    parser_->header_limit(max_header_bytes);
    parser_->body_limit(max_header_bytes);
    stream_.expires_after(http_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code error, std::size_t) {
                       if (!error) self->on_request(self->parser_->release());
                     });
  }

 private:
  using Response = http::response<http::string_body>;

  void on_request(http::request<http::string_body> request) {
    const std::string target(request.target());
    if (websocket::is_upgrade(request)) {
      if (path_of(target) != "/ws")
        return reply(request, http::status::not_found, "no websocket here; use /ws");
      if (!server_.options.token.empty()) {
        std::string given = query_value(target, "token").value_or("");
        const auto authorization = request.find(http::field::authorization);
        if (authorization != request.end()) {
          const std::string value(authorization->value());
          if (value.rfind("Bearer ", 0) == 0) given = value.substr(7);
        }
        if (!constant_time_equal(given, server_.options.token)) {
          spdlog::warn("websocket client refused: wrong or missing token");
          return reply(request, http::status::unauthorized, "token missing or wrong");
        }
      }
      const auto origin = request.find(http::field::origin);
      if (origin != request.end()) {
        const std::string host(request[http::field::host]);
        const std::string value(origin->value());
        if (value != "http://" + host && value != "https://" + host) {
          return reply(request, http::status::forbidden, "cross-site websocket refused");
        }
      }
      if (server_.clients >= server_.options.max_clients) {
        return reply(request, http::status::service_unavailable, "too many clients");
      }
      std::make_shared<WsSession>(stream_.release_socket(), server_)->run(std::move(request));
      return;
    }
    if (request.method() != http::verb::get && request.method() != http::verb::head) {
      return reply(request, http::status::method_not_allowed, "only GET");
    }
    std::string path(path_of(target));
    if (path == "/") path = "/index.html";
    const bool safe = path.find("..") == std::string::npos &&
                      path.find_first_not_of(
                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/") ==
                          std::string::npos;
    const fs::path file = server_.options.web_root / path.substr(1);
    std::error_code error;
    if (server_.options.web_root.empty() || !safe || !fs::is_regular_file(file, error)) {
      return reply(request, http::status::not_found, "not found: " + path);
    }
    std::ifstream stream(file, std::ios::binary);
    std::ostringstream body;
    body << stream.rdbuf();
    auto response = std::make_shared<Response>(http::status::ok, request.version());
    response->set(http::field::content_type, content_type(file));
    response->set(http::field::cache_control, "no-cache");
    response->set("X-Content-Type-Options", "nosniff");
    response->keep_alive(request.keep_alive());
    if (request.method() == http::verb::get) response->body() = body.str();
    response->prepare_payload();
    write(response);
  }

  void reply(const http::request<http::string_body>& request, http::status status,
             const std::string& message) {
    auto response = std::make_shared<Response>(status, request.version());
    response->set(http::field::content_type, "text/plain; charset=utf-8");
    response->keep_alive(false);
    response->body() = message + "\n";
    response->prepare_payload();
    write(response);
  }

  void write(const std::shared_ptr<Response>& response) {
    http::async_write(stream_, *response,
                      [self = shared_from_this(), response](beast::error_code error, std::size_t) {
                        if (!error && response->keep_alive()) return self->read();
                        beast::error_code ignored;
                        self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                      });
  }

  beast::tcp_stream stream_;
  WebsocketServer::Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
};

}  // namespace

void WebsocketServer::Impl::accept() {
  acceptor.async_accept(io, [this](beast::error_code error, tcp::socket socket) {
    if (error == asio::error::operation_aborted) return;
    if (!error) std::make_shared<HttpSession>(std::move(socket), *this)->read();
    accept();
  });
}

WebsocketServer::WebsocketServer(WebsocketServerOptions options, ControlApi& api)
    : impl_(std::make_unique<Impl>(std::move(options), api)) {}

WebsocketServer::~WebsocketServer() {
  stop();
}

void WebsocketServer::start() {
  if (impl_->thread.joinable()) return;
  try {
    const tcp::endpoint endpoint(asio::ip::make_address(impl_->options.address),
                                 static_cast<unsigned short>(impl_->options.port));
    impl_->acceptor.open(endpoint.protocol());
    impl_->acceptor.set_option(asio::socket_base::reuse_address(true));
    impl_->acceptor.bind(endpoint);
    impl_->acceptor.listen();
    impl_->bound_port = impl_->acceptor.local_endpoint().port();
  } catch (const std::exception& e) {
    throw WebsocketServerError("web server on " + impl_->options.address + ":" +
                               std::to_string(impl_->options.port) + ": " + e.what());
  }
  impl_->accept();
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

void WebsocketServer::stop() {
  if (!impl_->thread.joinable()) return;
  asio::post(impl_->io, [this] {
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->io.stop();
  });
  impl_->thread.join();
}

int WebsocketServer::port() const {
  return impl_->bound_port.load();
}

}  // namespace tapstream

#include "daemon/control/websocket_server.hpp"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/range/iterator_range.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "daemon/control/control_api.hpp"
#include "daemon/control/http_request_policy.hpp"
#include "daemon/control/meter_fanout.hpp"
#include "daemon/control/page_file.hpp"
#include "dsp/realtime/thread_role.hpp"

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

// Beast's string_view (Boost's in Boost 1.74) as the standard one.
std::string_view std_view(beast::string_view text) {
  return {text.data(), text.size()};
}

// The decoded value of `name` in a query string ("token=abc&x=1").
std::optional<std::string> query_value(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const auto equals = pair.find('=');
    if (equals != std::string_view::npos && pair.substr(0, equals) == name) {
      return percent_decoded(pair.substr(equals + 1));
    }
    if (amp == std::string_view::npos) break;
    query = query.substr(amp + 1);
  }
  return std::nullopt;
}

class WsSession;

}  // namespace

struct WebsocketServer::Impl {
  // Declared before `io`, so that sessions still held by its handlers when
  // it is destroyed can count themselves out.
  WebsocketServerOptions options;
  ControlApi& api;
  std::size_t clients = 0;        // websocket sessions; io thread only
  std::size_t http_sessions = 0;  // connections not (yet) upgraded; io thread only
  // Connections held at most (websocket and HTTP): options.max_connections,
  // or half the process's file descriptors if fewer, so that a flood of
  // connections leaves the daemon its files, its log and its control socket.
  std::size_t max_connections = 0;
  bool at_connection_limit = false;  // logged once per flood
  std::atomic<int> bound_port{0};
  std::optional<HttpRequestPolicy> policy;  // set by start(), once the port is known
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_pause{io};

  // The meter subscribers, by interval: one timer, one read and one event per
  // tick for all of them (a timer per client cost a wake-up, a timer re-arm
  // and a read of the meters per event). io thread only.
  struct MeterGroup {
    MeterGroup(asio::io_context& io, const OutputStage& stage) : timer(io), fanout(stage) {}
    asio::steady_timer timer;
    Clock::time_point due;
    MeterFanout fanout;
    std::vector<std::weak_ptr<WsSession>> subscribers;
  };
  std::map<std::chrono::milliseconds, std::unique_ptr<MeterGroup>> meter_groups;
  std::thread thread;

  Impl(WebsocketServerOptions o, ControlApi& a) : options(std::move(o)), api(a) {}

  void accept();
  void on_accept(beast::error_code error, tcp::socket socket);
  // Adds `session` to the subscribers at `interval`; a session that leaves a
  // group (closed, unsubscribed, another interval) is dropped at its next tick.
  void subscribe_meters(const std::shared_ptr<WsSession>& session,
                        std::chrono::milliseconds interval);
  void wait_for_tick(std::chrono::milliseconds interval, MeterGroup& group);
  void tick(std::chrono::milliseconds interval);
};

namespace {

class WsSession : public std::enable_shared_from_this<WsSession> {
 public:
  WsSession(tcp::socket&& socket, WebsocketServer::Impl& server)
      : ws_(std::move(socket)), server_(server) {
    ++server_.clients;
  }
  ~WsSession() { --server_.clients; }

  void run(http::request<http::string_body> request) {
    beast::get_lowest_layer(ws_).expires_never();
    // Replies and events are whole messages written as they come: Nagle's
    // algorithm would hold a reply back behind an unacknowledged meter event
    // (up to the peer's delayed ACK, 40 ms) and save no write.
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().set_option(tcp::no_delay(true), ignored);
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

  bool subscribed_at(std::chrono::milliseconds interval) const {
    return !closed_ && session_.meter_interval == interval;
  }

  // A tick of the meters at this session's interval.
  void push_meters(MeterFanout& fanout) {
    // A slow reader skips events rather than piling them up; its next event
    // covers what it skipped (its cursor did not move).
    if (!closed_ && queue_.size() < 4) send(fanout.event_for(session_.meters));
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
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().shutdown(tcp::socket::shutdown_both, ignored);
    beast::get_lowest_layer(ws_).socket().close(ignored);
  }

  void on_read(beast::error_code error) {
    if (error) {
      if (error == websocket::error::message_too_big) cut_off("message too big");
      closed_ = true;
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
    // A binary frame carries set_paths' taps after a JSON header.
    send(std::make_shared<const std::string>(ws_.got_binary()
                                                 ? server_.api.handle_binary(text, session_)
                                                 : server_.api.handle(text, session_)));
    if (closed_) return;
    if (session_.meter_interval && session_.meter_interval != before) {
      server_.subscribe_meters(shared_from_this(), *session_.meter_interval);
    }
    read();
  }

  void send(std::shared_ptr<const std::string> message) {
    if (closed_) return;
    queued_bytes_ += message->size();
    queue_.push_back(std::move(message));
    if (queue_.size() > max_queued_messages || queued_bytes_ > max_queued_bytes) {
      return cut_off("replies not read");
    }
    if (queue_.size() == 1) write_next();
  }

  void write_next() {
    ws_.text(true);
    ws_.async_write(asio::buffer(*queue_.front()),
                    [self = shared_from_this()](beast::error_code error, std::size_t) {
                      if (error) {
                        self->closed_ = true;
                        return;
                      }
                      self->queued_bytes_ -= self->queue_.front()->size();
                      self->queue_.pop_front();
                      if (!self->queue_.empty() && !self->closed_) self->write_next();
                    });
  }

  websocket::stream<beast::tcp_stream> ws_;
  WebsocketServer::Impl& server_;
  beast::flat_buffer buffer_;
  ApiSession session_;
  std::deque<std::shared_ptr<const std::string>> queue_;  // shared: meter events
  std::size_t queued_bytes_ = 0;
  double tokens_ = 0;
  Clock::time_point refilled_;
  bool closed_ = false;
};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket&& socket, WebsocketServer::Impl& server)
      : stream_(std::move(socket)), server_(server) {
    ++server_.http_sessions;
  }
  ~HttpSession() { --server_.http_sessions; }

  void read() {
    parser_.emplace();
    parser_->header_limit(max_header_bytes);
    parser_->body_limit(max_header_bytes);
    stream_.expires_after(http_timeout);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code error, std::size_t) {
          if (!error) return self->on_request(self->parser_->release());
          if (error.category() == http::make_error_code(http::error::bad_target).category() &&
              error != http::error::end_of_stream && error != http::error::partial_message) {
            self->on_malformed(error);
          }
        });
  }

 private:
  using Response = http::response<http::string_body>;

  void on_request(http::request<http::string_body> request) {
    HttpRequestNames names;
    names.target = std_view(request.target());
    names.version = request.version();
    for (const auto& field : boost::make_iterator_range(request.equal_range(http::field::host))) {
      names.hosts.push_back(std_view(field.value()));
    }
    for (const auto& field : boost::make_iterator_range(request.equal_range(http::field::origin))) {
      names.origins.push_back(std_view(field.value()));
    }
    const HttpRequestVerdict verdict = server_.policy->check(names);
    if (!verdict.allowed()) {
      spdlog::warn("web: {} refused ({}): {}", printable(std_view(request.method_string()), 16),
                   verdict.status, verdict.reason);
      return reply(request, static_cast<http::status>(verdict.status), verdict.reason);
    }
    if (websocket::is_upgrade(request)) {
      if (verdict.path != "/ws")
        return reply(request, http::status::not_found, "no websocket here; use /ws");
      if (!server_.options.token.empty()) {
        std::string given = query_value(verdict.query, "token").value_or("");
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
      if (server_.clients >= server_.options.max_clients) {
        return reply(request, http::status::service_unavailable, "too many clients");
      }
      std::make_shared<WsSession>(stream_.release_socket(), server_)->run(std::move(request));
      return;
    }
    if (request.method() != http::verb::get && request.method() != http::verb::head) {
      return reply(request, http::status::method_not_allowed, "only GET");
    }
    PageRefusal refusal;
    PageFile file = open_page_file(server_.options.web_root, verdict.path, refusal);
    if (!file.is_open()) {
      const auto level = refusal.missing ? spdlog::level::info : spdlog::level::warn;
      spdlog::log(level, "web: {} not served: {}", printable(verdict.path), refusal.why);
      return reply(request, http::status::not_found, "not found: " + printable(verdict.path));
    }
    // Streamed from the descriptor that was checked, a buffer at a time.
    if (request.method() == http::verb::head) {
      auto response =
          std::make_shared<http::response<http::empty_body>>(http::status::ok, request.version());
      set_page_headers(*response, request, file);
      response->content_length(file.size());
      return write(response);
    }
    auto response =
        std::make_shared<http::response<http::file_body>>(http::status::ok, request.version());
    set_page_headers(*response, request, file);
    beast::file_posix opened;
    opened.native_handle(file.release());
    beast::error_code error;
    response->body().reset(std::move(opened), error);
    if (error) {
      spdlog::warn("web: {} not served: {}", printable(verdict.path), error.message());
      return reply(request, http::status::internal_server_error, "cannot read the file");
    }
    response->prepare_payload();
    write(response);
  }

  template <class Body>
  static void set_page_headers(http::response<Body>& response,
                               const http::request<http::string_body>& request,
                               const PageFile& file) {
    response.set(http::field::content_type, file.content_type());
    response.set(http::field::cache_control, "no-cache");
    response.set("X-Content-Type-Options", "nosniff");
    response.keep_alive(request.keep_alive());
  }

  // Not HTTP as Beast reads it (a control character in a header, a header
  // over 16 KiB, ...): said so, logged, and the connection closed.
  void on_malformed(beast::error_code error) {
    spdlog::warn("web: malformed request refused (400): {}", error.message());
    http::request<http::string_body> request;
    request.version(11);
    reply(request, http::status::bad_request, "malformed request: " + error.message());
  }

  void reply(const http::request<http::string_body>& request, http::status status,
             const std::string& message) {
    auto response = std::make_shared<Response>(status, request.version());
    response->set(http::field::content_type, "text/plain; charset=utf-8");
    response->set("X-Content-Type-Options", "nosniff");
    response->keep_alive(false);
    response->body() = message + "\n";
    response->prepare_payload();
    write(response);
  }

  template <class Body>
  void write(const std::shared_ptr<http::response<Body>>& response) {
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

void WebsocketServer::Impl::subscribe_meters(const std::shared_ptr<WsSession>& session,
                                             std::chrono::milliseconds interval) {
  auto& group = meter_groups[interval];
  if (!group) {
    group = std::make_unique<MeterGroup>(io, api.output_stage());
    group->due = Clock::now();
    wait_for_tick(interval, *group);
  }
  // Unsubscribed and subscribed again before the next tick: still a member.
  for (const auto& subscriber : group->subscribers) {
    if (subscriber.lock() == session) return;
  }
  group->subscribers.push_back(session);
}

void WebsocketServer::Impl::wait_for_tick(std::chrono::milliseconds interval, MeterGroup& group) {
  // On a fixed grid, so that the rate is the one asked for; ticks missed
  // (the thread was held up) are skipped, not made up in a burst.
  const auto now = Clock::now();
  group.due += interval;
  if (group.due <= now) group.due = now + interval;
  group.timer.expires_at(group.due);
  group.timer.async_wait([this, interval](beast::error_code error) {
    if (!error) tick(interval);
  });
}

void WebsocketServer::Impl::tick(std::chrono::milliseconds interval) {
  const auto found = meter_groups.find(interval);
  if (found == meter_groups.end()) return;
  MeterGroup& group = *found->second;
  std::erase_if(group.subscribers, [interval](const std::weak_ptr<WsSession>& subscriber) {
    const auto session = subscriber.lock();
    return !session || !session->subscribed_at(interval);
  });
  if (group.subscribers.empty()) {
    meter_groups.erase(found);  // no wait is pending: this was it
    return;
  }
  group.fanout.read();
  for (const auto& subscriber : group.subscribers) {
    if (const auto session = subscriber.lock()) session->push_meters(group.fanout);
  }
  wait_for_tick(interval, group);
}

void WebsocketServer::Impl::accept() {
  acceptor.async_accept(io, [this](beast::error_code error, tcp::socket socket) {
    on_accept(error, std::move(socket));
  });
}

void WebsocketServer::Impl::on_accept(beast::error_code error, tcp::socket socket) {
  if (error == asio::error::operation_aborted) return;
  if (error == asio::error::no_descriptors || error == asio::error::no_buffer_space ||
      error == asio::error::no_memory) {
    // Accepting again at once would spin: the waiting connection stays
    // ready until a descriptor frees up.
    spdlog::warn("web: cannot accept a connection: {}; pausing 100 ms", error.message());
    accept_pause.expires_after(std::chrono::milliseconds(100));
    accept_pause.async_wait([this](beast::error_code wait_error) {
      if (!wait_error) accept();
    });
    return;
  }
  if (!error) {
    if (clients + http_sessions >= max_connections) {
      if (!at_connection_limit) {
        spdlog::warn("web: {} connections open, the most allowed; closing new ones until fewer",
                     max_connections);
      }
      at_connection_limit = true;
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      at_connection_limit = false;
      std::make_shared<HttpSession>(std::move(socket), *this)->read();
    }
  }
  accept();
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
    // The address the server is bound to names it too (the URL the daemon
    // prints); an IP address cannot be rebound to another machine.
    std::vector<std::string> hosts = impl_->options.hosts;
    const asio::ip::address bound = endpoint.address();
    if (bound.is_unspecified()) {
      if (hosts.empty()) {
        spdlog::warn(
            "web: listening on {} but [web] hosts is empty: only requests to localhost, 127.0.0.1 "
            "and [::1] are answered; list the names clients use in [web] hosts",
            impl_->options.address);
      }
    } else if (!bound.is_loopback()) {
      hosts.push_back(bound.is_v6() ? "[" + bound.to_string() + "]" : bound.to_string());
    }
    impl_->policy.emplace(hosts, impl_->bound_port.load());
    impl_->max_connections = impl_->options.max_connections;
    rlimit files{};
    if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
      impl_->max_connections = std::min<std::size_t>(impl_->max_connections,
                                                     static_cast<std::size_t>(files.rlim_cur / 2));
    }
  } catch (const std::exception& e) {
    throw WebsocketServerError("web server on " + impl_->options.address + ":" +
                               std::to_string(impl_->options.port) + ": " + e.what());
  }
  impl_->accept();
  impl_->thread = std::thread([this] {
    name_this_thread("ts-web");
    make_this_thread_background();
    impl_->io.run();
  });
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

#pragma once
// Which HTTP requests the web server answers, decided from the request's
// names alone (no sockets, no files), so that the server and a fuzzer
// (tests/fuzz/fuzz_http_request.cpp) run the same code:
//
// - the Host: one `Host` header (none at all only on HTTP/1.0) naming
//   localhost, 127.0.0.1, [::1] or a name of [web] hosts, with or without a
//   port, and the port, when given, the server's. A page that a DNS-rebinding
//   attacker serves from attacker.example:PORT (a name that resolves to
//   127.0.0.1) carries that name, so it is refused;
// - the Origin, when there is one: http or https, an allowed name and the
//   server's port; `null` (a sandboxed or file: page) is refused;
// - the target: origin-form ("/path?query"), the path strictly
//   percent-decoded (a malformed escape or an encoded NUL is a 400) and
//   normalised (empty segments dropped); a decoded path that could leave the
//   page's folder or name a hidden file (a segment starting with '.', a
//   backslash, any byte but letters, digits and "._~-") is a 404.
//
// The path that comes out may still name a symlink that leads out of the
// web root: page_file.hpp checks where it really leads.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tapstream {

// What the policy is given of a request (views into it).
struct HttpRequestNames {
  std::string_view target;
  unsigned version = 11;                // 10: HTTP/1.0, 11: HTTP/1.1
  std::vector<std::string_view> hosts;  // every Host header's value, in order
  std::vector<std::string_view> origins;
};

struct HttpRequestVerdict {
  bool allowed() const { return status == 0; }
  // 0 when allowed, else the HTTP status to refuse with (400, 403, 404, 414).
  unsigned status = 0;
  // Why it was refused, with the client's names quoted printable (control
  // characters escaped) and shortened: fit for the log and the reply.
  std::string reason;
  // When allowed: the decoded, normalised path ("/", "/index.html", "/ws",
  // "/img/a.png"; no empty, "." or ".." segments) and the query, undecoded.
  std::string path;
  std::string query;
};

class HttpRequestPolicy {
 public:
  // `extra_hosts`: [web] hosts, as config.cpp checked them (lower case; a
  // bracketed IPv6 literal or a name or IPv4 address); `port`: the bound port.
  HttpRequestPolicy(const std::vector<std::string>& extra_hosts, int port);

  HttpRequestVerdict check(const HttpRequestNames& request) const;

  // Whether `host` (a Host header's value) names this server.
  bool host_allowed(std::string_view host) const;
  // Whether `origin` (an Origin header's value) is a page of this server.
  bool origin_allowed(std::string_view origin) const;

  const std::vector<std::string>& allowed_names() const { return names_; }
  int port() const { return port_; }

 private:
  // `name_and_port` is "name" or "name:port"; `default_port` is the port an
  // absent one stands for (none: any absent port is fine).
  bool names_this_server(std::string_view name_and_port, std::optional<int> default_port) const;

  std::vector<std::string> names_;
  int port_;
};

// Longest request target accepted; longer is refused with 414.
inline constexpr std::size_t max_target_bytes = 2048;

// The names every server allows: this machine's loopback names.
inline const char* const loopback_host_names[] = {"localhost", "127.0.0.1", "[::1]"};

// `text` with every %XX replaced by its byte ('+' stays '+'); nullopt when a
// '%' is not followed by two hex digits.
std::optional<std::string> percent_decoded(std::string_view text);

// `text` fit for a log line: at most `limit` bytes of it, every byte that is
// not printable ASCII (controls, DEL, bytes >= 0x80) written as \xNN, and
// "..." where it was cut.
std::string printable(std::string_view text, std::size_t limit = 120);

// Whether `name` may go into [web] hosts: a DNS name (letters, digits, '-'
// and '.' labels of 1 to 63 characters, at most 253 in all), an IPv4 address
// or a bracketed IPv6 address, without scheme, port or path. Lower case only
// (config.cpp lowers it first). Returns "" when it may, else why not.
std::string host_name_problem(std::string_view name);

}  // namespace tapstream

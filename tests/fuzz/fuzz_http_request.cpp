// HTTP request lines and headers, parsed by Boost.Beast as the web server
// parses them, then judged by HttpRequestPolicy as the server judges them.
// Traps when an allowed request breaks what the policy promises: a path
// that could leave the web root or name a hidden file, a Host or Origin
// that does not name this server (checked against a plain list of the
// allowed spellings), a refusal whose reason would put the client's control
// characters into the log, or a decoded path that decodes differently again.

#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/control/http_request_policy.hpp"

namespace {

using namespace tapstream;
namespace http = boost::beast::http;

constexpr int port = 8790;

std::string lowered(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  return out;
}

bool is_printable(std::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) return false;
  }
  return true;
}

// Every spelling of a Host or Origin that names the server.
struct Spellings {
  std::vector<std::string> hosts, origins;
  explicit Spellings(const HttpRequestPolicy& policy) {
    const std::string p = std::to_string(policy.port());
    for (const std::string& name : policy.allowed_names()) {
      hosts.push_back(name);
      hosts.push_back(name + ":" + p);
      origins.push_back("http://" + name + ":" + p);
      origins.push_back("https://" + name + ":" + p);
      if (policy.port() == 80) origins.push_back("http://" + name);
      if (policy.port() == 443) origins.push_back("https://" + name);
    }
  }
  static bool has(const std::vector<std::string>& list, std::string_view value) {
    const std::string text = lowered(value);
    for (const std::string& entry : list) {
      if (entry == text) return true;
    }
    return false;
  }
};

void check_path(const HttpRequestPolicy& policy, const HttpRequestVerdict& verdict) {
  const std::string& path = verdict.path;
  if (path.empty() || path.front() != '/') __builtin_trap();
  if (path != "/" && (path.back() == '/' || path.find("//") != std::string::npos)) __builtin_trap();
  for (const char c : path) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '~' || c == '-' || c == '/';
    if (!ok) __builtin_trap();
  }
  if (path.find("/.") != std::string::npos) __builtin_trap();  // ., .. or a hidden file
  const std::filesystem::path root = "/srv/page";
  const std::string joined = (root / path.substr(1)).lexically_normal().string();
  if (joined.rfind("/srv/page", 0) != 0) __builtin_trap();
  // The decoded path is its own spelling: checking it again changes nothing.
  HttpRequestNames again;
  again.target = path;
  again.hosts = {"localhost"};
  const HttpRequestVerdict second = policy.check(again);
  if (!second.allowed() || second.path != path) __builtin_trap();
}

void check(const HttpRequestPolicy& policy, const HttpRequestNames& names) {
  static const Spellings spellings(policy);
  const HttpRequestVerdict verdict = policy.check(names);
  if (verdict.allowed()) {
    if (!verdict.reason.empty()) __builtin_trap();
    if (names.hosts.size() > 1 || (names.hosts.empty() && names.version >= 11)) __builtin_trap();
    if (!names.hosts.empty() && !Spellings::has(spellings.hosts, names.hosts.front())) {
      __builtin_trap();
    }
    if (names.origins.size() > 1) __builtin_trap();
    if (!names.origins.empty() && !Spellings::has(spellings.origins, names.origins.front())) {
      __builtin_trap();
    }
    check_path(policy, verdict);
  } else {
    const unsigned status = verdict.status;
    if (status != 400 && status != 403 && status != 404 && status != 414) __builtin_trap();
    if (verdict.reason.empty() || verdict.reason.size() > 1024 || !is_printable(verdict.reason)) {
      __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const HttpRequestPolicy policy({"studio.local", "192.168.1.20", "[fe80::1]"}, port);
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  // A [web] hosts entry that config.cpp would take is then a name of the server.
  const std::string first_line(text.substr(0, text.find('\n')));
  if (host_name_problem(first_line).empty()) {
    const HttpRequestPolicy with_it({first_line}, port);
    if (!with_it.host_allowed(first_line + ":" + std::to_string(port))) __builtin_trap();
    if (!with_it.origin_allowed("http://" + first_line + ":" + std::to_string(port))) {
      __builtin_trap();
    }
  }
  const std::string shown = printable(text, 64);
  if (!is_printable(shown) || shown.size() > 64 * 4 + 3) __builtin_trap();

  http::request_parser<http::string_body> parser;
  parser.header_limit(16 * 1024);
  parser.body_limit(16 * 1024);
  parser.eager(true);
  boost::beast::error_code error;
  parser.put(boost::asio::buffer(data, size), error);
  if (!parser.is_header_done()) return 0;
  const auto& request = parser.get();
  HttpRequestNames names;
  names.target = std::string_view(request.target().data(), request.target().size());
  names.version = request.version();
  for (auto field = request.find(http::field::host);
       field != request.end() && field->name() == http::field::host; ++field) {
    names.hosts.emplace_back(field->value().data(), field->value().size());
  }
  for (auto field = request.find(http::field::origin);
       field != request.end() && field->name() == http::field::origin; ++field) {
    names.origins.emplace_back(field->value().data(), field->value().size());
  }
  check(policy, names);
  return 0;
}

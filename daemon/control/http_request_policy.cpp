#include "daemon/control/http_request_policy.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>

namespace tapstream {
namespace {

char lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string lowered(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), lower);
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool is_control(unsigned char c) {
  return c < 0x20 || c == 0x7f;
}

// A byte a page file's name may hold (RFC 3986's unreserved characters).
bool is_name_byte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '~' || c == '-';
}

HttpRequestVerdict refuse(unsigned status, std::string reason) {
  HttpRequestVerdict verdict;
  verdict.status = status;
  verdict.reason = std::move(reason);
  return verdict;
}

std::string quoted(std::string_view text) {
  // Appended, not "'" + ... + "'": GCC 12 warns falsely (-Wrestrict) about that.
  std::string out(1, '\'');
  out += printable(text);
  out += '\'';
  return out;
}

// The target's path, percent-decoded and normalised, into `verdict`; or the refusal.
HttpRequestVerdict decode_target(std::string_view target) {
  if (target.size() > max_target_bytes) {
    return refuse(414, "request target of " + std::to_string(target.size()) +
                           " bytes, longer than " + std::to_string(max_target_bytes));
  }
  if (target.empty() || target.front() != '/') {
    return refuse(400, "request target " + quoted(target) + " does not start with '/'");
  }
  for (const char c : target) {
    if (is_control(static_cast<unsigned char>(c)) || c == '#' || c == ' ') {
      return refuse(400, "request target " + quoted(target) +
                             " holds a control character, a "
                             "space or a '#'");
    }
  }
  const std::size_t question = target.find('?');
  const std::string_view raw_path = target.substr(0, question);
  const auto decoded = percent_decoded(raw_path);
  if (!decoded) {
    return refuse(400, "request target " + quoted(target) +
                           " has a malformed percent escape (not % and two hex digits)");
  }
  for (const char c : *decoded) {
    if (is_control(static_cast<unsigned char>(c))) {
      return refuse(
          400, "request target " + quoted(target) + " encodes a control character (NUL included)");
    }
  }
  HttpRequestVerdict verdict;
  std::string_view rest = *decoded;
  while (!rest.empty()) {
    const std::size_t slash = rest.find('/');
    const std::string_view segment = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (segment.empty()) continue;  // "//": one separator
    if (segment.front() == '.') {
      return refuse(404, "request target " + quoted(target) +
                             " has a '.', '..' or hidden segment: not a file of the page");
    }
    if (!std::all_of(segment.begin(), segment.end(), is_name_byte)) {
      return refuse(404, "request target " + quoted(target) +
                             " decodes to a byte that no page file name holds (a backslash, a "
                             "quote, ...); names are letters, digits and ._~-");
    }
    verdict.path += '/';
    verdict.path += segment;
  }
  if (verdict.path.empty()) verdict.path = "/";
  if (question != std::string_view::npos) verdict.query = std::string(target.substr(question + 1));
  return verdict;
}

}  // namespace

std::optional<std::string> percent_decoded(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int high = hex_value(text[i + 1]);
    const int low = hex_value(text[i + 2]);
    if (high < 0 || low < 0) return std::nullopt;
    out.push_back(static_cast<char>(high * 16 + low));
    i += 2;
  }
  return out;
}

std::string printable(std::string_view text, std::size_t limit) {
  std::string out;
  const std::string_view kept = text.substr(0, limit);
  for (const char c : kept) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f && c != '\\') {
      out.push_back(c);
    } else {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    }
  }
  if (text.size() > limit) out += "...";
  return out;
}

std::string host_name_problem(std::string_view name) {
  if (name.empty()) return "is empty";
  if (name.size() > 253) return "is longer than 253 characters";
  if (name.front() == '[') {
    if (name.back() != ']') return "opens '[' but does not end with ']'";
    const std::string inside(name.substr(1, name.size() - 2));
    in6_addr address{};
    if (::inet_pton(AF_INET6, inside.c_str(), &address) != 1) {
      return "is not an IPv6 address in brackets";
    }
    if (inside != lowered(inside)) return "must be lower case";
    return "";
  }
  if (name.find("://") != std::string_view::npos) return "is a URL: give the host name alone";
  if (name.find(':') != std::string_view::npos) {
    return "holds a ':': give the host name without a port (an IPv6 address goes in brackets)";
  }
  std::string_view rest = name;
  while (true) {
    const std::size_t dot = rest.find('.');
    const std::string_view label = rest.substr(0, dot);
    if (label.empty()) return "has an empty label (a leading, trailing or double '.')";
    if (label.size() > 63) return "has a label longer than 63 characters";
    for (const char c : label) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
      if (!ok) {
        if (c >= 'A' && c <= 'Z') return "must be lower case";
        return "holds a character that is not a letter, digit, '-', '_' or '.'";
      }
    }
    if (dot == std::string_view::npos) break;
    rest = rest.substr(dot + 1);
  }
  return "";
}

HttpRequestPolicy::HttpRequestPolicy(const std::vector<std::string>& extra_hosts, int port)
    : port_(port) {
  for (const char* name : loopback_host_names) names_.emplace_back(name);
  for (const std::string& name : extra_hosts) {
    if (std::find(names_.begin(), names_.end(), name) == names_.end()) names_.push_back(name);
  }
}

bool HttpRequestPolicy::names_this_server(std::string_view name_and_port,
                                          std::optional<int> default_port) const {
  const std::string text = lowered(name_and_port);
  // The port follows the last ':' outside an IPv6 literal's brackets.
  const std::size_t bracket = text.rfind(']');
  const std::size_t colon = text.rfind(':');
  const bool has_port =
      colon != std::string::npos && (bracket == std::string::npos || colon > bracket);
  const std::string name = has_port ? text.substr(0, colon) : text;
  if (std::find(names_.begin(), names_.end(), name) == names_.end()) return false;
  if (!has_port) return !default_port || *default_port == port_;
  return text.substr(colon + 1) == std::to_string(port_);
}

bool HttpRequestPolicy::host_allowed(std::string_view host) const {
  return names_this_server(host, std::nullopt);
}

bool HttpRequestPolicy::origin_allowed(std::string_view origin) const {
  const std::string text = lowered(origin);
  if (text.rfind("http://", 0) == 0) return names_this_server(std::string_view(text).substr(7), 80);
  if (text.rfind("https://", 0) == 0) {
    return names_this_server(std::string_view(text).substr(8), 443);
  }
  return false;  // "null", another scheme, or not an origin at all
}

HttpRequestVerdict HttpRequestPolicy::check(const HttpRequestNames& request) const {
  if (request.hosts.size() > 1) return refuse(400, "more than one Host header");
  if (request.hosts.empty()) {
    if (request.version >= 11) return refuse(400, "no Host header (HTTP/1.1 requires one)");
  } else if (!host_allowed(request.hosts.front())) {
    return refuse(403, "Host " + quoted(request.hosts.front()) +
                           " is not a name of this server (localhost, 127.0.0.1, [::1] and "
                           "[web] hosts, port " +
                           std::to_string(port_) + ")");
  }
  if (request.origins.size() > 1) return refuse(403, "more than one Origin header");
  if (!request.origins.empty() && !origin_allowed(request.origins.front())) {
    return refuse(403, "Origin " + quoted(request.origins.front()) +
                           " is not a page of this server (http or https, localhost, 127.0.0.1, "
                           "[::1] or [web] hosts, port " +
                           std::to_string(port_) + ")");
  }
  return decode_target(request.target);
}

}  // namespace tapstream

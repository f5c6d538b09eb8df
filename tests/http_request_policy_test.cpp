// HttpRequestPolicy, the web server's decision on a request's names (Host,
// Origin, target), as a pure function; and the [web] hosts key that feeds
// it. tests/web_hostile_client_test.cpp sends the same spellings to a
// running daemon; tests/fuzz/fuzz_http_request.cpp drives it with any bytes.

#include "daemon/control/http_request_policy.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "daemon/config/config.hpp"
#include "tests/process_support.hpp"

namespace tapstream {
namespace {

const HttpRequestPolicy policy({"studio.example", "[fe80::1]"}, 8790);

HttpRequestVerdict check(std::string_view target, std::string_view host = "127.0.0.1:8790",
                         std::string_view origin = "") {
  HttpRequestNames names;
  names.target = target;
  if (!host.empty()) names.hosts.push_back(host);
  if (!origin.empty()) names.origins.push_back(origin);
  return policy.check(names);
}

TEST(HttpRequestPolicy, TargetsAreDecodedAndNormalised) {
  EXPECT_EQ(check("/").path, "/");
  EXPECT_EQ(check("/index.html").path, "/index.html");
  EXPECT_EQ(check("//app.js").path, "/app.js");
  EXPECT_EQ(check("/img//a.png/").path, "/img/a.png");
  EXPECT_EQ(check("/%61pp.js").path, "/app.js");
  const HttpRequestVerdict ws = check("/ws?token=a%2Bb&x=1");
  EXPECT_EQ(ws.path, "/ws");
  EXPECT_EQ(ws.query, "token=a%2Bb&x=1");
  EXPECT_EQ(percent_decoded("a%2Bb+c"), "a+b+c");
  EXPECT_EQ(percent_decoded("%4"), std::nullopt);
  EXPECT_EQ(percent_decoded("%g0"), std::nullopt);
}

TEST(HttpRequestPolicy, SpelledWaysOutOfThePageAreRefused) {
  for (const char* target : {"/..", "/../x.js", "/a/../../x", "/%2e%2e/x", "/%2E%2e%2fetc/passwd",
                             "/..%2f..%2fetc/passwd", "/.%2e/x", "/.hidden.js", "/a/.git/config",
                             "/./index.html", "/..\\x", "/a%5c..%5cb", "/a\\b.js",
                             "/caf\xc3\xa9.js", "/%c3%a9.js", "/a%22.js", "/a%3a.js"}) {
    EXPECT_EQ(check(target).status, 404u) << target;
  }
  for (const char* target : {"/%", "/%4", "/%zz", "/a%0", "/a%00.js", "/%0a", "/%7f", "/%1b[31m",
                             "x", "", "*", "http://127.0.0.1:8790/", "/a#b", "/a b"}) {
    EXPECT_EQ(check(target).status, 400u) << target;
  }
  EXPECT_EQ(check("/" + std::string(max_target_bytes, 'a')).status, 414u);
  EXPECT_EQ(check("/" + std::string(max_target_bytes - 1, 'a')).status, 0u);
}

TEST(HttpRequestPolicy, OnlyThisMachinesNamesAndTheServersPortAreAnswered) {
  for (const char* host :
       {"127.0.0.1:8790", "127.0.0.1", "localhost:8790", "LocalHost", "[::1]:8790", "[::1]",
        "studio.example:8790", "STUDIO.EXAMPLE", "[fe80::1]:8790"}) {
    EXPECT_TRUE(check("/", host).allowed()) << host;
  }
  for (const char* host :
       {"attacker.example:8790", "127.0.0.1:8791", "127.0.0.1:08790", "127.0.0.1:", "::1",
        "::1:8790", "[::1]x", "localhost.", "localhost.:8790", "127.0.0.2", "studio.example.evil",
        "127.0.0.1:8790@evil", "127.0.0.1 ", " 127.0.0.1", "0.0.0.0:8790", "[::]:8790",
        "studio.example:8790:8790"}) {
    const HttpRequestVerdict verdict = check("/", host);
    EXPECT_EQ(verdict.status, 403u) << host;
  }
  HttpRequestNames none;
  none.target = "/";
  EXPECT_EQ(policy.check(none).status, 400u);  // HTTP/1.1 without a Host
  none.version = 10;
  EXPECT_TRUE(policy.check(none).allowed());
  HttpRequestNames two;
  two.target = "/";
  two.hosts = {"127.0.0.1:8790", "127.0.0.1:8790"};
  EXPECT_EQ(policy.check(two).status, 400u);
}

TEST(HttpRequestPolicy, AnOriginMustBeAPageOfThisServer) {
  for (const char* origin : {"http://127.0.0.1:8790", "https://localhost:8790", "HTTP://[::1]:8790",
                             "http://studio.example:8790"}) {
    EXPECT_TRUE(check("/ws", "127.0.0.1:8790", origin).allowed()) << origin;
  }
  for (const char* origin :
       {"null", "http://evil.example", "http://evil.example:8790", "http://127.0.0.1",
        "http://127.0.0.1:8791", "ws://127.0.0.1:8790", "file://", "http://127.0.0.1:8790/",
        "http://user@127.0.0.1:8790", "127.0.0.1:8790", "http://"}) {
    EXPECT_EQ(check("/ws", "127.0.0.1:8790", origin).status, 403u) << origin;
  }
  // The default ports stand for themselves.
  const HttpRequestPolicy on_80({}, 80);
  EXPECT_TRUE(on_80.origin_allowed("http://localhost"));
  EXPECT_FALSE(on_80.origin_allowed("https://localhost"));
  // The DNS-rebinding pair: both names agree, and both are foreign.
  EXPECT_EQ(check("/ws", "attacker.example:8790", "http://attacker.example:8790").status, 403u);
}

TEST(HttpRequestPolicy, RefusalsQuoteTheClientPrintableAndShort) {
  const HttpRequestVerdict verdict = check("/", "evil\x1b[2J\r\n\x7f\xff" + std::string(500, 'x'));
  EXPECT_EQ(verdict.status, 403u);
  for (const char c : verdict.reason) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << static_cast<int>(static_cast<unsigned char>(c));
  }
  EXPECT_NE(verdict.reason.find("evil\\x1b[2J\\x0d\\x0a\\x7f\\xff"), std::string::npos)
      << verdict.reason;
  EXPECT_LT(verdict.reason.size(), 400u);
  EXPECT_EQ(printable("a\\b"), "a\\x5cb");  // a backslash cannot fake an escape
}

std::string config_error(const std::string& web) {
  testing::TempDir dir;
  std::ofstream(dir / "f.txt") << "1.0\n";
  try {
    parse_live_config("[filter]\nfile = \"f.txt\"\n[web]\n" + web, dir.path(), "live.toml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(WebHostsKey, NamesAreReadInLowerCaseAndBadOnesNamedByEntry) {
  testing::TempDir dir;
  std::ofstream(dir / "f.txt") << "1.0\n";
  const LiveConfig config = parse_live_config(
      "[filter]\nfile = \"f.txt\"\n[web]\nhosts = [\"Studio.Local\", \"192.168.1.20\", "
      "\"[fe80::1]\", \"my-box\"]\n",
      dir.path(), "live.toml");
  EXPECT_EQ(config.web_hosts,
            (std::vector<std::string>{"studio.local", "192.168.1.20", "[fe80::1]", "my-box"}));
  EXPECT_TRUE(parse_live_config("[filter]\nfile = \"f.txt\"\n", dir.path()).web_hosts.empty());

  EXPECT_EQ(config_error("hosts = \"studio.local\"\n"),
            "live.toml: web.hosts = 'studio.local': expected an array of host names, got a string");
  EXPECT_EQ(config_error("hosts = [\"ok\", \"http://studio.local\"]\n"),
            "live.toml: web.hosts[1] = 'http://studio.local': is a URL: give the host name alone");
  EXPECT_NE(config_error("hosts = [\"studio.local:8790\"]\n").find("web.hosts[0]"),
            std::string::npos);
  EXPECT_NE(config_error("hosts = [\"\"]\n").find("web.hosts[0] = '': is empty"),
            std::string::npos);
  EXPECT_NE(config_error("hosts = [\"a..b\"]\n").find("empty label"), std::string::npos);
  EXPECT_NE(config_error("hosts = [\"a/b\"]\n").find("web.hosts[0]"), std::string::npos);
  EXPECT_NE(config_error("hosts = [\"[::g]\"]\n").find("not an IPv6 address"), std::string::npos);
  EXPECT_NE(config_error("hosts = [\"fe80::1\"]\n").find("in brackets"), std::string::npos);
  EXPECT_NE(config_error("hosts = [1]\n").find("web.hosts[0] = 1: expected a host name"),
            std::string::npos);
}

}  // namespace
}  // namespace tapstream

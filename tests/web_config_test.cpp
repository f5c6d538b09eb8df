// The [web] and [state] keys of the live configuration.

#include <gtest/gtest.h>

#include <string>

#include "daemon/config/config.hpp"
#include "tests/process_support.hpp"

namespace tapstream {
namespace {

const std::string base = "[filter]\nfile = \"f.txt\"\n";

LiveConfig parse(const testing::TempDir& dir, const std::string& extra) {
  std::ofstream(dir / "f.txt") << "1.0\n";
  return parse_live_config(base + extra, dir.path(), "live.toml");
}

std::string error_of(const testing::TempDir& dir, const std::string& extra) {
  try {
    parse(dir, extra);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(WebConfig, TheWebServerIsOffOnLoopbackAndWithoutStateByDefault) {
  testing::TempDir dir;
  const LiveConfig config = parse(dir, "");
  EXPECT_EQ(config.web_port, 0);
  EXPECT_EQ(config.web_address, "127.0.0.1");
  EXPECT_TRUE(config.web_token.empty());
  EXPECT_TRUE(config.state_file.empty());
}

TEST(WebConfig, KeysAreReadAndRelativePathsResolved) {
  testing::TempDir dir;
  const LiveConfig config =
      parse(dir,
            "[web]\nport = 8790\naddress = \"0.0.0.0\"\ntoken = \"0123456789abcdef\"\n"
            "root = \"page\"\n[state]\nfile = \"state.json\"\n");
  EXPECT_EQ(config.web_port, 8790);
  EXPECT_EQ(config.web_address, "0.0.0.0");
  EXPECT_EQ(config.web_token, "0123456789abcdef");
  EXPECT_EQ(config.web_root, dir.path() / "page");
  EXPECT_EQ(config.state_file, dir.path() / "state.json");
}

TEST(WebConfig, AnAddressBeyondLoopbackNeedsALongEnoughToken) {
  testing::TempDir dir;
  EXPECT_EQ(error_of(dir, "[web]\nport = 8790\naddress = \"0.0.0.0\"\n"),
            "live.toml: web.address = '0.0.0.0': is not a loopback address, so web.token must be "
            "set (16 characters or more)");
  EXPECT_NE(error_of(dir, "[web]\nport = 8790\naddress = \"0.0.0.0\"\ntoken = \"short\"\n"), "");
  EXPECT_EQ(error_of(dir, "[web]\nport = 8790\naddress = \"::1\"\n"), "");
}

TEST(WebConfig, BadValuesNameTheirKey) {
  testing::TempDir dir;
  EXPECT_EQ(error_of(dir, "[web]\nport = 70000\n"),
            "live.toml: web.port = 70000: must be between 0 and 65535");
  EXPECT_NE(error_of(dir, "[web]\nportt = 1\n").find("unknown key 'portt' in [web]"),
            std::string::npos);
  EXPECT_NE(error_of(dir, "[state]\nfile = \"no/such/dir/state.json\"\n").find("state.file"),
            std::string::npos);
}

}  // namespace
}  // namespace tapstream

// `sample_rate = "device"` against JACK dummy servers of the test's own: the
// daemon takes the server's rate and that rate's filter ("$samplerate$" in
// its name), and when the server goes away and comes back at another rate it
// runs with the new rate's filter within 5 s of the server's return, with no
// request (issue 24, item 1). Every server and daemon runs under `timeout`,
// so that a test that crashes leaves no jackd behind for long.

#include <gtest/gtest.h>
#include <jack/jack.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/control/control_socket.hpp"
#include "tests/jack_support.hpp"
#include "tests/wait_for.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::Child;
using testing::read_text;

// The longest a test of this file may leave a process behind if it crashes.
const std::vector<std::string> bounded = {"timeout", "-k", "5", "300"};

std::unique_ptr<Child> start_jackd(const std::string& server, int rate, const fs::path& dir,
                                   const std::string& tag) {
  std::vector<std::string> argv = bounded;
  const std::vector<std::string> jackd = {
      "jackd", "-n", server, "-S", "--no-realtime", "-d", "dummy", "-r", std::to_string(rate),
      "-p",    "256"};
  argv.insert(argv.end(), jackd.begin(), jackd.end());
  return std::make_unique<Child>(argv, dir / (tag + ".out"), dir / (tag + ".err"));
}

// Waits until a client of `server` can connect (the server is up).
bool server_up(const std::string& server) {
  return static_cast<bool>(testing::wait_until(
      testing::long_wait,
      [&] {
        jack_client_t* client = testing::open_client("probe", server);
        if (client == nullptr) return false;
        jack_client_close(client);
        return true;
      },
      [] { return std::string("the JACK server is not up"); }, std::chrono::milliseconds(50)));
}

// The daemon's status, or null while it does not answer (restarting).
nlohmann::json status_of(const fs::path& socket) {
  try {
    const nlohmann::json reply = nlohmann::json::parse(
        control_request(socket, R"({"request":"get_status"})", std::chrono::seconds(2)), nullptr,
        false);
    return reply.is_object() && reply.contains("result") ? reply["result"] : nullptr;
  } catch (const std::exception&) {
    return nullptr;
  }
}

// Whether the daemon runs at `rate` with `file` as its filter (every channel).
bool runs_at(const nlohmann::json& status, int rate, const fs::path& file, std::size_t taps) {
  if (!status.is_object() || status.value("sample_rate", 0) != rate) return false;
  if (status.value("sample_rate_from", "") != "device") return false;
  if (!status.contains("filters") || status["filters"].empty()) return false;
  for (const auto& filter : status["filters"]) {
    if (filter.value("file", "") != file.string() || filter.value("taps", 0u) != taps) return false;
  }
  return true;
}

TEST(JackRate, TheDaemonFollowsAServerBackAtAnotherRateWithThatRatesFilter) {
  if (!fs::exists("/usr/bin/jackd")) GTEST_SKIP() << "jackd not installed (jackd2)";
  const testing::TempDir dir("tapstream-jack-rate-follow");
  const std::string server = testing::use_jack_server("tapstream-rate-" + std::to_string(getpid()));
  // One filter per rate, told apart by their lengths.
  std::ofstream(dir.path() / "room_48000.txt") << "# sample_rate = 48000\n1\n0\n0\n";
  std::ofstream(dir.path() / "room_44100.txt") << "# sample_rate = 44100\n1\n0\n0\n0\n0\n";
  const fs::path socket = dir.path() / "control.sock";
  std::ofstream(dir.path() / "live.toml")
      << "sample_rate = \"device\"\nchannels = 2\n[input]\ndevice = \"system\"\n"
      << "[output]\ndevice = \"system\"\n[filter]\nfile = \"room_$samplerate$.txt\"\n"
      << "watch = false\n[engine]\nbackend = \"cpu\"\n[control]\nsocket = \"" << socket.string()
      << "\"\n";

  auto jackd = start_jackd(server, 48000, dir.path(), "jackd-48000");
  ASSERT_TRUE(jackd->started());
  ASSERT_TRUE(server_up(server)) << read_text(dir.path() / "jackd-48000.err");
  if (!testing::portaudio_reaches_jack()) GTEST_SKIP() << "this PortAudio has no JACK host API";

  std::vector<std::string> argv = bounded;
  for (const char* word : {TAPSTREAM_BINARY, "run", "--config"}) argv.emplace_back(word);
  argv.push_back((dir.path() / "live.toml").string());
  Child daemon(argv, dir.path() / "daemon.out", dir.path() / "daemon.err");
  const auto log = [&] { return read_text(dir.path() / "daemon.err"); };
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] {
        return !daemon.running() ||
               runs_at(status_of(socket), 48000, dir.path() / "room_48000.txt", 3);
      },
      log))
      << "the daemon at 48000 Hz with room_48000.txt";
  ASSERT_TRUE(daemon.running()) << log();

  jackd.reset();  // the server goes away (SIGTERM, waited for)
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] { return !daemon.running() || log().find("restarts itself") != std::string::npos; },
      log));
  ASSERT_TRUE(daemon.running()) << log();

  jackd = start_jackd(server, 44100, dir.path(), "jackd-44100");
  ASSERT_TRUE(server_up(server)) << read_text(dir.path() / "jackd-44100.err");
  const auto back = std::chrono::steady_clock::now();
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] {
        return !daemon.running() ||
               runs_at(status_of(socket), 44100, dir.path() / "room_44100.txt", 5);
      },
      log))
      << "the daemon at 44100 Hz with room_44100.txt";
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - back).count();
  std::printf("the 44100 Hz filter ran %.2f s after the server's return\n", seconds);
  ASSERT_TRUE(daemon.running()) << log();
  EXPECT_LE(seconds, 5.0) << "the target: within 5 s of the server's return\n" << log();
  EXPECT_NE(log().find("the device runs at 44100 Hz now, the filters were read for 48000 Hz"),
            std::string::npos)
      << log();

  daemon.signal(SIGTERM);
  EXPECT_NE(daemon.wait_for(testing::long_wait), -2) << log();
}

}  // namespace
}  // namespace tapstream

// Swaps as a user meets them through `tapstream run` and `tapstream ctl`: the
// shipped filters load with the default max_taps, every refusal explains
// itself and is counted in rejected_swaps, `ctl reload` re-reads only the
// files that changed and keeps per-channel `ctl load`s, and the daemon's exit
// status follows the documented codes (ctl stop: 0, SIGTERM: 143).

#include <gtest/gtest.h>
#include <signal.h>
#include <sndfile.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dsp/files/coefficient_file.hpp"
#include "dsp/files/sound_file.hpp"
#include "tests/process_support.hpp"
#include "tests/wait_for.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::Child;
using testing::read_text;
using testing::TempDir;

std::vector<float> taps_of_length(std::size_t n) {
  std::vector<float> taps(n, 0.0f);
  taps[0] = 0.5f;
  return taps;
}

class DaemonSwapsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Ten seconds of silence, delivered in real time: the daemon runs while we talk to it.
    SoundFileWriter writer(dir_ / "in.wav", 48000, 2, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
    const std::vector<float> silence(48000 * 2, 0.0f);
    for (int second = 0; second < 10; ++second) writer.write(silence);
    writer.commit();
  }

  // `channels`: false for a routing matrix (its inputs and outputs are the stream's).
  void write_config(const std::string& filter_lines, bool channels = true) {
    std::ofstream(dir_ / "live.toml")
        << "sample_rate = 48000\n"
        << (channels ? "channels = 2\n" : "") << "[input]\nfile = \"in.wav\"\nrealtime = true\n"
        << "[output]\nfile = \"out.wav\"\n[filter]\n"
        << filter_lines << "\n[engine]\nbackend = \"cpu\"\n[control]\nsocket = \""
        << socket().string() << "\"\n";
  }

  fs::path socket() const { return dir_ / "ctl" / "control.sock"; }

  void start() {
    daemon_ = std::make_unique<Child>(std::vector<std::string>{TAPSTREAM_BINARY, "run", "--config",
                                                               (dir_ / "live.toml").string()},
                                      dir_ / "daemon.out", dir_ / "daemon.err");
    // Up once it says so: the socket, then the file watcher, are ready by then.
    ASSERT_TRUE(testing::wait_until(
        testing::long_wait,
        [&] {
          return read_text(dir_ / "daemon.err").find("running:") != std::string::npos ||
                 !daemon_->running();
        },
        [&] { return read_text(dir_ / "daemon.err"); }));
    ASSERT_TRUE(daemon_->running()) << read_text(dir_ / "daemon.err");
  }

  nlohmann::json ctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv{TAPSTREAM_BINARY, "ctl", "--socket", socket().string()};
    argv.insert(argv.end(), args.begin(), args.end());
    {
      Child child(argv, dir_ / "ctl.out", dir_ / "ctl.err");
      child.wait_for(std::chrono::seconds(20));
    }
    const std::string reply = read_text(dir_ / "ctl.out");
    std::printf("ctl %s -> %s", args.front().c_str(), reply.c_str());
    return nlohmann::json::parse(reply, nullptr, false);
  }

  static std::string error_of(const nlohmann::json& reply) { return reply.value("error", ""); }

  TempDir dir_{"tapstream-swaps"};
  std::unique_ptr<Child> daemon_;
};

TEST_F(DaemonSwapsTest, ShippedFiltersLoadAndEveryRefusalIsExplainedAndCounted) {
  const fs::path shipped = fs::path(TAPSTREAM_SOURCE_DIR) / "config" / "filters";
  fs::copy_file(shipped / "lowpass-4k-48k.txt", dir_ / "watched.txt");
  write_config("file = \"watched.txt\"\nwatch = true");  // no max_taps: the default
  ASSERT_NO_FATAL_FAILURE(start());

  // A rewrite of the watched file that does not parse (before any `ctl load
  // all`, which would take the channels away from the configured file).
  std::ofstream(dir_ / "watched.txt.tmp") << "0.5\nnot a number\n";
  fs::rename(dir_ / "watched.txt.tmp", dir_ / "watched.txt");
  // The watcher has refused it once `ctl status` counts the refusal.
  nlohmann::json refused;
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] {
        refused = ctl({"status"});
        return refused.value("rejected_swaps", 0) >= 1;
      },
      [&] { return refused.dump() + read_text(dir_ / "daemon.err"); },
      std::chrono::milliseconds(50)));

  const auto telephone = ctl({"load", "all", (shipped / "telephone-300-3400-48k.wav").string()});
  EXPECT_TRUE(telephone.value("ok", false)) << telephone;

  save_text_taps(dir_ / "long.txt", taps_of_length(5000), "too long for the default");
  const std::string too_long = error_of(ctl({"load", "1", (dir_ / "long.txt").string()}));
  EXPECT_NE(too_long.find("[filter] max_taps"), std::string::npos) << too_long;
  EXPECT_NE(too_long.find("2048"), std::string::npos) << too_long;
  EXPECT_NE(too_long.find("restart"), std::string::npos) << too_long;

  {
    SoundFileWriter stereo(dir_ / "ir2.wav", 48000, 2, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
    const std::vector<float> frame = {1.0f, 0.5f};
    stereo.write(frame);
    stereo.commit();
  }
  const std::string two_channels = error_of(ctl({"load", "0", (dir_ / "ir2.wav").string()}));
  EXPECT_NE(two_channels.find("the stream has 2 channels"), std::string::npos) << two_channels;
  const std::string bad_channel = error_of(ctl({"load", "7", (dir_ / "long.txt").string()}));
  EXPECT_NE(bad_channel.find("the stream has 2 channels"), std::string::npos) << bad_channel;

  std::ofstream(dir_ / "live.toml", std::ios::app) << "[nonsense\n";  // nor does the configuration
  const auto reload = ctl({"reload"});
  EXPECT_FALSE(reload.value("ok", true)) << reload;

  const auto status = ctl({"status"});
  EXPECT_EQ(status.value("rejected_swaps", -1), 5) << status << read_text(dir_ / "daemon.err");
  EXPECT_EQ(status.value("swaps", -1), 1) << status;

  EXPECT_TRUE(ctl({"stop"}).value("ok", false));
  EXPECT_EQ(daemon_->wait_for(std::chrono::seconds(10)), 0) << read_text(dir_ / "daemon.err");
}

TEST_F(DaemonSwapsTest, ReloadRereadsOnlyChangedFilesAndKeepsPerChannelLoads) {
  save_text_taps(dir_ / "a.txt", taps_of_length(10), "a");
  save_text_taps(dir_ / "b.txt", taps_of_length(20), "b");
  save_text_taps(dir_ / "c.txt", taps_of_length(30), "c");
  write_config("files = [\"a.txt\", \"b.txt\"]\nwatch = false");
  ASSERT_NO_FATAL_FAILURE(start());
  ASSERT_TRUE(ctl({"load", "0", (dir_ / "c.txt").string()}).value("ok", false));

  const auto unchanged = ctl({"reload"});
  EXPECT_NE(unchanged.value("message", "").find("the filters stay"), std::string::npos)
      << unchanged;

  save_text_taps(dir_ / "b.txt", taps_of_length(40), "b, rewritten");
  const auto b_changed = ctl({"reload"});
  EXPECT_NE(b_changed.value("message", "").find("reloaded channel 1"), std::string::npos)
      << b_changed;
  auto status = ctl({"status"});
  EXPECT_EQ(status["filters"][0]["taps"], 30) << "the ctl load of channel 0 was undone: " << status;
  EXPECT_EQ(status["filters"][1]["taps"], 40) << status;

  save_text_taps(dir_ / "c.txt", taps_of_length(50), "c, rewritten");
  const auto c_changed = ctl({"reload"});
  EXPECT_NE(c_changed.value("message", "").find("reloaded channel 0"), std::string::npos)
      << c_changed;
  status = ctl({"status"});
  EXPECT_EQ(status["filters"][0]["taps"], 50) << status;
  EXPECT_EQ(status["filters"][1]["taps"], 40) << status;

  daemon_->signal(SIGTERM);
  EXPECT_EQ(daemon_->wait_for(std::chrono::seconds(10)), 128 + SIGTERM)
      << read_text(dir_ / "daemon.err");
}

TEST_F(DaemonSwapsTest, AFilterPerChannelTakesLoadPathOnItsDiagonalAndRefusesOtherPathsByName) {
  save_text_taps(dir_ / "a.txt", taps_of_length(10), "a");
  save_text_taps(dir_ / "b.txt", taps_of_length(20), "b");
  save_text_taps(dir_ / "c.txt", taps_of_length(30), "c");
  write_config("files = [\"a.txt\", \"b.txt\"]\nwatch = false");
  ASSERT_NO_FATAL_FAILURE(start());

  const auto diagonal = ctl({"load", "path", "1", "1", (dir_ / "c.txt").string()});
  EXPECT_TRUE(diagonal.value("ok", false)) << diagonal;
  EXPECT_NE(diagonal.value("message", "").find("installed for input 1 -> output 1 at block"),
            std::string::npos)
      << diagonal;
  auto status = ctl({"status"});
  EXPECT_EQ(status["matrix"]["paths"][1]["taps"], 30) << status;
  EXPECT_EQ(status["matrix"]["paths"][1]["file"], (dir_ / "c.txt").string()) << status;
  EXPECT_EQ(status["filters"][1]["taps"], 30) << "the alias lists the same paths: " << status;
  EXPECT_EQ(status["filters"][0]["taps"], 10) << status;

  const std::string crossed = error_of(ctl({"load", "path", "0", "1", (dir_ / "c.txt").string()}));
  EXPECT_NE(crossed.find("input 0 -> output 1 is not a path of the running filters (one filter "
                         "per channel: paths 0->0, 1->1)"),
            std::string::npos)
      << crossed;
  const std::string beyond = error_of(ctl({"load", "path", "2", "2", (dir_ / "c.txt").string()}));
  EXPECT_NE(beyond.find("input 2 -> output 2 is not a path"), std::string::npos) << beyond;
  const std::string matrix = error_of(ctl({"load", "matrix", (dir_ / "m.toml").string()}));
  EXPECT_NE(matrix.find("load matrix needs a routing matrix"), std::string::npos) << matrix;

  status = ctl({"status"});
  EXPECT_EQ(status.value("swaps", -1), 1) << status;
  EXPECT_EQ(status.value("rejected_swaps", -1), 2) << "the two missing paths: " << status;
  EXPECT_TRUE(ctl({"stop"}).value("ok", false));
  EXPECT_EQ(daemon_->wait_for(std::chrono::seconds(10)), 0) << read_text(dir_ / "daemon.err");
}

// The names of an object's keys, and of those of each object in its arrays,
// as "key" and "key[].inner".
std::set<std::string> key_names(const nlohmann::json& object, const std::string& prefix = "") {
  std::set<std::string> names;
  for (const auto& [key, value] : object.items()) {
    names.insert(prefix + key);
    if (value.is_object()) {
      for (const auto& inner : key_names(value, prefix + key + ".")) names.insert(inner);
    } else if (value.is_array()) {
      for (const auto& element : value) {
        if (!element.is_object()) continue;
        for (const auto& inner : key_names(element, prefix + key + "[].")) names.insert(inner);
      }
    }
  }
  return names;
}

TEST_F(DaemonSwapsTest, StatusHasTheSameKeysForAFilterPerChannelAndARoutingMatrix) {
  save_text_taps(dir_ / "a.txt", taps_of_length(10), "a");
  write_config("file = \"a.txt\"\nwatch = false");
  ASSERT_NO_FATAL_FAILURE(start());
  const auto per_channel = ctl({"status"});
  EXPECT_EQ(per_channel.value("inputs", 0), 2) << per_channel;
  EXPECT_EQ(per_channel.value("outputs", 0), 2) << per_channel;
  ASSERT_EQ(per_channel["matrix"]["paths"].size(), 2u) << per_channel;
  EXPECT_EQ(per_channel["matrix"]["paths"][1]["input"], 1) << per_channel;
  EXPECT_EQ(per_channel["matrix"]["paths"][1]["output"], 1) << per_channel;
  EXPECT_EQ(per_channel["matrix"]["file"], "") << per_channel;
  EXPECT_TRUE(ctl({"stop"}).value("ok", false));
  EXPECT_EQ(daemon_->wait_for(std::chrono::seconds(10)), 0) << read_text(dir_ / "daemon.err");

  std::ofstream(dir_ / "m.toml") << "inputs = 2\noutputs = 2\n"
                                 << "[[path]]\ninput = 0\noutput = 1\nfile = \"a.txt\"\n"
                                 << "[[path]]\ninput = 1\noutput = 0\nfile = \"a.txt\"\n"
                                 << "gain_db = -6.0\n";
  write_config("matrix = \"m.toml\"\nwatch = false", false);
  ASSERT_NO_FATAL_FAILURE(start());
  const auto matrix = ctl({"status"});
  EXPECT_EQ(matrix["matrix"]["file"], (dir_ / "m.toml").string()) << matrix;
  EXPECT_EQ(matrix["filters"][1]["output"], 0) << "the alias lists the paths: " << matrix;
  EXPECT_EQ(key_names(per_channel), key_names(matrix)) << per_channel.dump() << "\n"
                                                       << matrix.dump();
  EXPECT_TRUE(ctl({"stop"}).value("ok", false));
  EXPECT_EQ(daemon_->wait_for(std::chrono::seconds(10)), 0) << read_text(dir_ / "daemon.err");
}

}  // namespace
}  // namespace tapstream

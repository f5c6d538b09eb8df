// Tests of the one table of configuration keys (daemon/config/config_keys.hpp): every
// key the shipped configuration documents has an effect; a change of one key
// is reported under that key alone, in its class; a reload takes only the
// reload keys.

#include "daemon/config/config_keys.hpp"

#include <gtest/gtest.h>
#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dsp/model/engine_tuning.hpp"
#include "tests/process_support.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const ConfigKey* find_key(const std::string& name) {
  for (const ConfigKey& key : config_keys()) {
    if (name == key.name) return &key;
  }
  return nullptr;
}

// Every key of a table, dotted ("filter.gain_db").
void collect_keys(const toml::table& table, const std::string& prefix,
                  std::vector<std::string>& keys) {
  for (const auto& [key, value] : table) {
    const std::string name =
        prefix.empty() ? std::string(key.str()) : prefix + "." + std::string(key.str());
    if (const toml::table* inner = value.as_table()) {
      collect_keys(*inner, name, keys);
    } else {
      keys.push_back(name);
    }
  }
}

TEST(ConfigKeys, EveryKeyOfTheShippedConfigurationHasAnEffect) {
  const toml::table root =
      toml::parse_file((fs::path(TAPSTREAM_SOURCE_DIR) / "config" / "live-default.toml").string());
  std::vector<std::string> keys;
  collect_keys(root, "", keys);
  // Those the shipped file shows only in comments.
  for (const char* commented : {"input.file", "input.realtime", "output.file", "filter.matrix",
                                "control.socket", "state.file", "log.file"}) {
    keys.emplace_back(commented);
  }
  EXPECT_GT(keys.size(), 30u);
  for (const std::string& key : keys) {
    EXPECT_NE(find_key(key), nullptr) << key << " is not in config_keys()";
  }
}

TEST(ConfigKeys, FileAndDeviceKeysAreFileOnlyAndProcessingKeysAreNot) {
  for (const char* name :
       {"input.device", "input.file", "output.device", "output.file", "web.port", "web.address",
        "web.token", "web.root", "web.hosts", "state.file", "log.file", "control.socket",
        "control.max_gain_db", "control.max_upload_files", "control.max_upload_mib",
        "jack.connect_outputs"}) {
    ASSERT_NE(find_key(name), nullptr) << name;
    EXPECT_EQ(find_key(name)->effect, KeyEffect::file_only) << name;
  }
  for (const char* name : {"filter.file", "filter.gain_db", "filter.watch"}) {
    EXPECT_EQ(find_key(name)->effect, KeyEffect::reload) << name;
  }
  for (const char* name : {"sample_rate", "block_frames", "filter.max_taps", "engine.backend"}) {
    EXPECT_EQ(find_key(name)->effect, KeyEffect::restart) << name;
  }
  for (const EngineTuningKey& tuning : engine_tuning_keys()) {
    const std::string name = "engine." + std::string(tuning.name);
    ASSERT_NE(find_key(name), nullptr) << name;
    EXPECT_EQ(find_key(name)->effect, KeyEffect::restart) << name;
  }
}

class ConfigChangesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"a.txt", "b.txt", "in.wav"}) std::ofstream(dir_ / name) << "1\n";
  }
  LiveConfig parse(const std::string& extra_filter = "", const std::string& extra = "") const {
    return parse_live_config("sample_rate = 48000\n" + extra +
                                 "\n[input]\nfile = \"in.wav\"\n[output]\nfile = \"out.wav\"\n"
                                 "[filter]\nfile = \"a.txt\"\n" +
                                 extra_filter,
                             dir_.path(), "test");
  }
  TempDir dir_{"tapstream-config-keys"};
};

TEST_F(ConfigChangesTest, TheDevicesRateIsOneValueWhateverTheDeviceRunsAt) {
  const auto device_rate = [&](int rate_in_force) {
    LiveConfig config = parse_live_config(
        "sample_rate = \"device\"\n[input]\nfile = \"in.wav\"\n[output]\nfile = "
        "\"out.wav\"\n[filter]\nfile = \"a.txt\"\n",
        dir_.path(), "test");
    config.sample_rate = rate_in_force;  // what the daemon found the device at
    return config;
  };
  using Keys = std::vector<std::string>;
  EXPECT_EQ(config_changes(device_rate(44100), device_rate(48000)).restart_needed(), Keys{});
  EXPECT_EQ(config_changes(parse(), device_rate(48000)).restart, Keys{"sample_rate"});
}

TEST_F(ConfigChangesTest, OneChangedKeyIsReportedUnderItsOwnNameInItsClass) {
  const LiveConfig base = parse();
  const auto changes_of = [&](const LiveConfig& next) { return config_changes(base, next); };
  using Keys = std::vector<std::string>;

  EXPECT_EQ(changes_of(base).reload, Keys{});
  EXPECT_EQ(changes_of(base).restart_needed(), Keys{});

  // A new filter file reloads; nothing waits for a restart (filter.watch was
  // listed whenever the file changed).
  const ConfigChanges new_file = changes_of(parse_live_config(
      "sample_rate = 48000\n[input]\nfile = \"in.wav\"\n[output]\nfile = \"out.wav\"\n"
      "[filter]\nfile = \"b.txt\"\n",
      dir_.path(), "test"));
  EXPECT_EQ(new_file.reload, Keys{"filter.file"});
  EXPECT_EQ(new_file.restart_needed(), Keys{});

  EXPECT_EQ(changes_of(parse("gain_db = -3\n")).reload, Keys{"filter.gain_db"});
  EXPECT_EQ(changes_of(parse("watch = false\n")).reload, Keys{"filter.watch"});
  EXPECT_EQ(changes_of(parse("watch = false\n")).restart_needed(), Keys{});
  EXPECT_EQ(changes_of(parse("max_taps = 4096\n")).restart, Keys{"filter.max_taps"});
  EXPECT_EQ(changes_of(parse("resample = false\n")).reload, Keys{"filter.resample"});
  EXPECT_EQ(changes_of(parse("resample = false\n")).restart_needed(), Keys{});
  EXPECT_EQ(changes_of(parse("", "block_frames = 128\n")).restart, Keys{"block_frames"});

  // File-only keys, each alone.
  const std::vector<std::pair<std::string, std::string>> file_only = {
      {"[state]\nfile = \"state.json\"\n", "state.file"},
      {"[log]\nfile = \"tapstream.log\"\n", "log.file"},
      {"[web]\nport = 8790\n", "web.port"},
      {"[web]\nroot = \"/\"\n", "web.root"},
      {"[web]\naddress = \"::1\"\n", "web.address"},
      {"[web]\nrequests_per_second = 20\n", "web.requests_per_second"},
      {"[control]\nsocket = \"c.sock\"\n", "control.socket"},
      {"[control]\nmax_gain_db = 6\n", "control.max_gain_db"},
  };
  for (const auto& [table, key] : file_only) {
    const LiveConfig next = parse_live_config(
        "sample_rate = 48000\n[input]\nfile = \"in.wav\"\n[output]\nfile = \"out.wav\"\n"
        "[filter]\nfile = \"a.txt\"\n" +
            table,
        dir_.path(), "test");
    const ConfigChanges changes = changes_of(next);
    EXPECT_EQ(changes.file_only, Keys{key}) << table;
    EXPECT_EQ(changes.restart_needed(), Keys{key}) << table;
    EXPECT_EQ(changes.reload, Keys{}) << table;
  }
}

TEST_F(ConfigChangesTest, AReloadTakesTheReloadKeysAndKeepsWhatRuns) {
  const LiveConfig running = parse();
  const LiveConfig next = parse_live_config(
      "sample_rate = 44100\n[input]\nfile = \"in.wav\"\n[output]\nfile = \"other.wav\"\n"
      "[filter]\nfile = \"b.txt\"\ngain_db = -6\nwatch = false\n[log]\nfile = \"x.log\"\n",
      dir_.path(), "test");
  const LiveConfig reloaded = with_reloaded_keys(running, next);
  EXPECT_EQ(reloaded.filter_files, next.filter_files);
  EXPECT_EQ(reloaded.gain_db, -6.0);
  EXPECT_FALSE(reloaded.watch_filters);
  EXPECT_EQ(reloaded.sample_rate, 48000);
  EXPECT_EQ(reloaded.output.file, running.output.file);
  EXPECT_TRUE(reloaded.log_file.empty());
  // What still differs waits for a restart, and is said so again.
  EXPECT_EQ(config_changes(reloaded, next).restart_needed(),
            (std::vector<std::string>{"sample_rate", "output.file", "log.file"}));
  EXPECT_EQ(config_changes(reloaded, next).reload, std::vector<std::string>{});
}

TEST(ConfigKeys, JoinKeysReadsAsAList) {
  EXPECT_EQ(join_keys({}), "");
  EXPECT_EQ(join_keys({"a"}), "a");
  EXPECT_EQ(join_keys({"a", "b"}), "a and b");
  EXPECT_EQ(join_keys({"a", "b", "c"}), "a, b and c");
}

}  // namespace
}  // namespace tapstream

// Tests of the live configuration: the shipped examples load, defaults and
// path resolution, and every bad value is rejected naming key, value and reason.

#include "daemon/config/config.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tapstream {
namespace {

namespace fs = std::filesystem;

// A scratch directory with two filter files, an input file and a subdirectory.
class ConfigDir {
 public:
  ConfigDir() {
    dir_ = fs::temp_directory_path() /
           ("tapstream-config-test-" + std::to_string(::getpid()) + "-" + std::to_string(count_++));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "sub");
    for (const char* name : {"a.txt", "b.txt", "in.wav"}) std::ofstream(dir_ / name) << "1\n";
  }
  ~ConfigDir() { fs::remove_all(dir_); }
  const fs::path& path() const { return dir_; }
  fs::path write(const std::string& text, const std::string& name = "live.toml") const {
    std::ofstream(dir_ / name) << text;
    return dir_ / name;
  }

 private:
  static inline int count_ = 0;
  fs::path dir_;
};

const std::string filter_table = "\n[filter]\nfile = \"a.txt\"\n";

TEST(LiveConfig, ShippedLiveDefaultLoadsAsItIs) {
  const fs::path file = fs::path(TAPSTREAM_SOURCE_DIR) / "config" / "live-default.toml";
  const LiveConfig config = load_live_config(file);
  EXPECT_EQ(config.sample_rate, 48000);
  EXPECT_EQ(config.channels, 2u);
  EXPECT_TRUE(config.input.is_default_device());
  EXPECT_TRUE(config.output.is_default_device());
  ASSERT_EQ(config.filter_files.size(), 1u);
  EXPECT_EQ(
      config.filter_file(1),
      (fs::path(TAPSTREAM_SOURCE_DIR) / "config/filters/lowpass-4k-48k.txt").lexically_normal());
  EXPECT_TRUE(fs::is_regular_file(config.filter_file(0)));
  EXPECT_EQ(config.control_socket, default_control_socket());
}

TEST(LiveConfig, ShippedFileToFileLoadsAsItIs) {
  const fs::path file = fs::path(TAPSTREAM_SOURCE_DIR) / "config" / "file-to-file.toml";
  const LiveConfig config = load_live_config(file);
  EXPECT_TRUE(config.input.is_file());
  EXPECT_FALSE(config.input.realtime);
  EXPECT_TRUE(fs::is_regular_file(config.input.file));
  EXPECT_TRUE(config.output.is_file());
  EXPECT_TRUE(config.control_socket.empty());
  EXPECT_FALSE(config.watch_filters);
}

TEST(LiveConfig, OmittedKeysTakeTheirDefaults) {
  ConfigDir dir;
  const LiveConfig defaults;
  const LiveConfig config = load_live_config(dir.write(filter_table));
  EXPECT_EQ(config.sample_rate, defaults.sample_rate);
  EXPECT_EQ(config.block_frames, defaults.block_frames);
  EXPECT_EQ(config.channels, defaults.channels);
  EXPECT_EQ(config.ring_margin_frames, defaults.ring_margin_frames);
  EXPECT_EQ(config.backend, Backend::automatic);
  EXPECT_EQ(config.engine.algorithm, Algorithm::automatic);
  EXPECT_EQ(config.engine.max_block_frames, config.block_frames);
  EXPECT_EQ(config.gain_db, 0.0);
  EXPECT_TRUE(config.watch_filters);
  EXPECT_EQ(config.log_level, spdlog::level::info);
  EXPECT_TRUE(config.log_file.empty());
  EXPECT_EQ(config.control_socket, default_control_socket());
}

TEST(LiveConfig, EveryKeyIsReadAndRelativePathsResolveAgainstTheConfigDirectory) {
  ConfigDir dir;
  const LiveConfig config = load_live_config(dir.write(R"(
sample_rate = 44100
block_frames = 64
channels = 2
ring_margin_frames = 32
[input]
file = "in.wav"
realtime = false
[output]
device = 3
[filter]
files = ["a.txt", "sub/../b.txt"]
gain_db = -6
watch = false
max_taps = 8192
max_delay_frames = 24000
ignore_sample_rate = true
[engine]
backend = "cpu"
algorithm = "fft"
streams = 4
kernel = "tiled"
device = 1
[control]
socket = "run/ctl.sock"
[log]
level = "debug"
file = "sub/tapstream.log"
)"));
  EXPECT_EQ(config.sample_rate, 44100);
  EXPECT_EQ(config.block_frames, 64u);
  EXPECT_EQ(config.engine.max_block_frames, 64u);
  EXPECT_EQ(config.ring_margin_frames, 32u);
  EXPECT_EQ(config.input.file, dir.path() / "in.wav");
  EXPECT_FALSE(config.input.realtime);
  EXPECT_EQ(config.output.device_index, 3);
  EXPECT_EQ(config.output.describe(), "device #3");
  ASSERT_EQ(config.filter_files.size(), 2u);
  EXPECT_EQ(config.filter_file(0), dir.path() / "a.txt");
  EXPECT_EQ(config.filter_file(1), dir.path() / "b.txt");
  EXPECT_EQ(config.gain_db, -6.0);
  EXPECT_FALSE(config.watch_filters);
  EXPECT_EQ(config.engine.max_taps, 8192u);
  EXPECT_EQ(config.engine.max_delay_frames, 24000u);
  EXPECT_TRUE(config.ignore_filter_sample_rate);
  EXPECT_EQ(config.backend, Backend::cpu);
  EXPECT_EQ(config.engine.algorithm, Algorithm::fft);
  EXPECT_EQ(config.engine.streams, 4);
  EXPECT_EQ(config.engine.kernel, "tiled");
  EXPECT_EQ(config.engine.device, 1);
  EXPECT_EQ(config.control_socket, dir.path() / "run/ctl.sock");
  EXPECT_EQ(config.log_level, spdlog::level::debug);
  EXPECT_EQ(config.log_file, dir.path() / "sub/tapstream.log");
  EXPECT_EQ(config.config_file, dir.path() / "live.toml");
}

TEST(LiveConfig, EngineDevicesAreAllOrAListAndUnsetMeansEngineDeviceAlone) {
  ConfigDir dir;
  LiveConfig config = load_live_config(dir.write(filter_table + "[engine]\ndevices = \"all\"\n"));
  EXPECT_TRUE(config.devices.all);
  config = load_live_config(dir.write(filter_table + "[engine]\ndevices = [1, 0]\n"));
  EXPECT_EQ(config.devices.listed, (std::vector<int>{1, 0}));
  config = load_live_config(dir.write(filter_table + "[engine]\ndevices = \"0, 1\"\n"));
  EXPECT_EQ(config.devices.listed, (std::vector<int>{0, 1}));
  config = load_live_config(dir.write(filter_table + "[engine]\ndevice = 1\n"));
  EXPECT_TRUE(config.devices.empty());
  EXPECT_EQ(config.engine.device, 1);
}

TEST(LiveConfig, TheDevicesRateAndPerRateFileNamesAreRead) {
  ConfigDir dir;
  std::ofstream(dir.path() / "room_44100.txt") << "1\n";
  // "device": any rate's file will do until the device says its rate.
  const LiveConfig device = load_live_config(
      dir.write("sample_rate = \"device\"\n[filter]\nfile = \"room_$samplerate$.txt\"\n"));
  EXPECT_TRUE(device.sample_rate_from_device);
  EXPECT_TRUE(device.resample_filters);
  EXPECT_EQ(device.filter_files.front(), dir.path() / "room_$samplerate$.txt");
  // A fixed rate with only another rate's file: the nearest, resampled...
  EXPECT_NO_THROW(load_live_config(
      dir.write("sample_rate = 48000\n[filter]\nfile = \"room_$samplerate$.txt\"\n")));
  // ...refused with resample = false, naming the file it looked for.
  try {
    load_live_config(dir.write(
        "sample_rate = 48000\n[filter]\nfile = \"room_$samplerate$.txt\"\nresample = false\n"));
    FAIL() << "a missing rate was accepted with resample = false";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find((dir.path() / "room_48000.txt").string() + " is missing"),
              std::string::npos)
        << e.what();
  }
}

TEST(LiveConfig, JackNameAndConnectionsAreRead) {
  ConfigDir dir;
  const LiveConfig absent = load_live_config(dir.write(filter_table));
  EXPECT_EQ(absent.jack, JackConfig{}) << "no [jack]: client tapstream, the device's ports";
  EXPECT_EQ(absent.jack.client_name, "tapstream");
  const LiveConfig config = load_live_config(
      dir.write(filter_table + "[jack]\nclient_name = \"tapfilter\"\nautoconnect = false\n"
                               "connect_inputs = \"none\"\n"
                               "connect_outputs = [\"system:playback_2\", \"mixer:in_.*\"]\n"));
  EXPECT_EQ(config.jack.client_name, "tapfilter");
  EXPECT_FALSE(config.jack.autoconnect);
  EXPECT_EQ(config.jack.inputs.mode, JackPortPatterns::Mode::none);
  EXPECT_EQ(config.jack.outputs.mode, JackPortPatterns::Mode::per_channel);
  EXPECT_EQ(config.jack.outputs.patterns,
            (std::vector<std::string>{"system:playback_2", "mixer:in_.*"}));
  const LiveConfig spread = load_live_config(
      dir.write(filter_table + "[jack]\nconnect_inputs = \"system:capture_.*\"\n"));
  EXPECT_EQ(spread.jack.inputs.mode, JackPortPatterns::Mode::spread);
  EXPECT_EQ(spread.jack.outputs.mode, JackPortPatterns::Mode::device);
}

TEST(LiveConfig, DeviceNamesAndDefaultAreRecognised) {
  ConfigDir dir;
  const LiveConfig config = load_live_config(dir.write(
      "[input]\ndevice = \"USB Audio: #1\"\n[output]\ndevice = \"default\"\n" + filter_table));
  EXPECT_EQ(config.input.device_name, "USB Audio: #1");
  EXPECT_EQ(config.input.describe(), "device 'USB Audio: #1'");
  EXPECT_TRUE(config.output.is_default_device());
}

TEST(LiveConfig, AMissingConfigurationFileIsReportedByName) {
  try {
    load_live_config("/nonexistent/tapstream.toml");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tapstream.toml"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("no such file"), std::string::npos) << e.what();
  }
}

struct BadCase {
  const char* name;
  std::string text;
  std::vector<std::string> expected;  // substrings of the error message
  bool add_filter = true;             // append a valid [filter] table
};

void PrintTo(const BadCase& c, std::ostream* out) {
  *out << c.name;
}

class LiveConfigRejects : public testing::TestWithParam<BadCase> {};

TEST_P(LiveConfigRejects, WithTheKeyTheValueAndTheReason) {
  const BadCase& c = GetParam();
  ConfigDir dir;
  const fs::path file = dir.write(c.text + (c.add_filter ? filter_table : ""));
  try {
    load_live_config(file);
    FAIL() << "accepted:\n" << c.text;
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    std::printf("%s: %s\n", c.name, message.c_str());
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
    EXPECT_NE(message.find(file.string()), std::string::npos) << "file not named: " << message;
    for (const auto& part : c.expected) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    }
  }
}

const std::string long_name(120, 'x');

INSTANTIATE_TEST_SUITE_P(
    BadValues, LiveConfigRejects,
    testing::Values(
        BadCase{"SyntaxError", "sample_rate = \n", {":1:15:", "expected value"}},
        BadCase{"DuplicateKey", "channels = 2\nchannels = 3\n", {":2:"}},
        BadCase{"UnknownTopLevelKey",
                "samplerate = 48000\n",
                {"unknown key 'samplerate'", "known keys: sample_rate, block_frames"}},
        BadCase{"UnknownKeyInTable",
                "[engine]\nthreads = 2\n",
                {"unknown key 'threads' in [engine]", "backend, algorithm, streams"}},
        BadCase{"SampleRateZero", "sample_rate = 0\n", {"sample_rate = 0", "between 1000 and"}},
        BadCase{"SampleRateString",
                "sample_rate = \"48000\"\n",
                {"sample_rate = '48000'", "expected a rate in Hz", "or \"device\""}},
        BadCase{"SampleRateOtherWord", "sample_rate = \"auto\"\n", {"sample_rate = 'auto'"}},
        BadCase{"RateFileMissingEverywhere",
                "[filter]\nfile = \"room_$samplerate$.txt\"\n",
                {"filter.file", "room_$samplerate$.txt: no file for 48000 Hz"},
                false},
        BadCase{"SampleRateFloat", "sample_rate = 48000.5\n", {"sample_rate = 48000.5", "integer"}},
        BadCase{
            "BlockFramesZero", "block_frames = 0\n", {"block_frames = 0", "between 1 and 65536"}},
        BadCase{"BlockFramesHuge", "block_frames = 100000\n", {"block_frames = 100000", "65536"}},
        BadCase{"ChannelsNegative", "channels = -2\n", {"channels = -2", "between 1 and 256"}},
        BadCase{"RingMarginNegative", "ring_margin_frames = -1\n", {"ring_margin_frames = -1"}},
        BadCase{"InputNotATable", "input = 3\n", {"input = 3", "expected a table"}},
        BadCase{"InputDeviceAndFile",
                "[input]\ndevice = 1\nfile = \"in.wav\"\n",
                {"input", "either device or file"}},
        BadCase{"InputDeviceFloat",
                "[input]\ndevice = 1.5\n",
                {"input.device = 1.5", "expected a device name or index"}},
        BadCase{
            "InputDeviceNegative", "[input]\ndevice = -1\n", {"input.device = -1", "between 0"}},
        BadCase{
            "InputDeviceEmpty", "[input]\ndevice = \"\"\n", {"input.device", "must not be empty"}},
        BadCase{"InputFileMissing",
                "[input]\nfile = \"nope.wav\"\n",
                {"input.file = 'nope.wav'", "no such file"}},
        BadCase{"InputFileIsADirectory",
                "[input]\nfile = \"sub\"\n",
                {"input.file = 'sub'", "not a regular file"}},
        BadCase{"RealtimeWithoutFile",
                "[input]\nrealtime = false\n",
                {"input.realtime = false", "only applies to input.file"}},
        BadCase{"JackClientNameWithColon",
                "[jack]\nclient_name = \"tap:stream\"\n",
                {"jack.client_name = 'tap:stream'", "without ':'"}},
        BadCase{"JackConnectionsOnePatternShort",
                "[jack]\nconnect_inputs = [\"system:capture_1\"]\n",
                {"jack.connect_inputs", "has 1 entries but channels = 2"}},
        BadCase{"JackPatternInvalid",
                "[jack]\nconnect_outputs = \"system:playback_(\"\n",
                {"jack.connect_outputs = 'system:playback_('", "not a valid pattern"}},
        BadCase{"JackUnknownKey",
                "[jack]\nauto_connect = false\n",
                {"unknown key 'auto_connect' in [jack]", "autoconnect"}},
        BadCase{"WebRequestRateZero",
                "[web]\nrequests_per_second = 0\n",
                {"web.requests_per_second = 0", "between 1 and 100000"}},
        BadCase{"RealtimeNotBoolean",
                "[input]\nfile = \"in.wav\"\nrealtime = \"yes\"\n",
                {"input.realtime = 'yes'", "expected true or false"}},
        BadCase{"OutputFileInMissingDirectory",
                "[output]\nfile = \"nodir/out.wav\"\n",
                {"output.file = 'nodir/out.wav'", "does not exist"}},
        BadCase{"OutputFileIsInputFile",
                "[input]\nfile = \"in.wav\"\n[output]\nfile = \"./in.wav\"\n",
                {"output.file", "same file as input.file"}},
        BadCase{"OutputRealtime",
                "[output]\nrealtime = true\n",
                {"unknown key 'realtime' in [output]", "known keys: device, file"}},
        BadCase{"FilterMissing", "channels = 2\n", {"missing [filter]"}, false},
        BadCase{"FilterWithoutFile", "[filter]\ngain_db = 1\n", {"filter", "missing file"}, false},
        BadCase{"FilterFileAndFiles",
                "[filter]\nfile = \"a.txt\"\nfiles = [\"a.txt\", \"b.txt\"]\n",
                {"filter", "give one of file", "files (one per channel) or matrix"},
                false},
        BadCase{"FilterFileMissing",
                "[filter]\nfile = \"missing.txt\"\n",
                {"filter.file = 'missing.txt'", "no such file"},
                false},
        BadCase{"FilterFilesWrongCount",
                "channels = 2\n[filter]\nfiles = [\"a.txt\"]\n",
                {"filter.files = [ 'a.txt' ]", "has 1 entries but channels = 2"},
                false},
        BadCase{"FilterFilesNotArray",
                "[filter]\nfiles = \"a.txt\"\n",
                {"filter.files = 'a.txt'", "expected an array"},
                false},
        BadCase{"FilterFilesEntryNotString",
                "channels = 2\n[filter]\nfiles = [\"a.txt\", 7]\n",
                {"filter.files[1] = 7", "expected a non-empty file name"},
                false},
        BadCase{"FilterFilesEntryMissing",
                "channels = 2\n[filter]\nfiles = [\"a.txt\", \"c.txt\"]\n",
                {"filter.files[1] = 'c.txt'", "no such file"},
                false},
        BadCase{"GainTooHigh",
                "[filter]\nfile = \"a.txt\"\ngain_db = 100\n",
                {"filter.gain_db = 100", "between -120 and 40"},
                false},
        BadCase{"GainNan",
                "[filter]\nfile = \"a.txt\"\ngain_db = nan\n",
                {"filter.gain_db = nan", "finite"},
                false},
        BadCase{"GainString",
                "[filter]\nfile = \"a.txt\"\ngain_db = \"3\"\n",
                {"filter.gain_db = '3'", "expected a number"},
                false},
        BadCase{"WatchNotBoolean",
                "[filter]\nfile = \"a.txt\"\nwatch = 1\n",
                {"filter.watch = 1", "expected true or false"},
                false},
        BadCase{"MaxTapsNegative",
                "[filter]\nfile = \"a.txt\"\nmax_taps = -5\n",
                {"filter.max_taps = -5", "between 0"},
                false},
        BadCase{"MaxDelayOverTheMatrixBound",
                "[filter]\nfile = \"a.txt\"\nmax_delay_frames = 5000000\n",
                {"filter.max_delay_frames = 5000000", "between 0 and 4194304"},
                false},
        BadCase{"UnknownBackend",
                "[engine]\nbackend = \"gpu\"\n",
                {"engine.backend = 'gpu'", "must be one of auto, cpu, cuda"}},
        BadCase{"UnknownAlgorithm",
                "[engine]\nalgorithm = \"fir\"\n",
                {"engine.algorithm = 'fir'", "must be one of auto, direct, fft"}},
        BadCase{
            "StreamsZero", "[engine]\nstreams = 0\n", {"engine.streams = 0", "between 1 and 16"}},
        BadCase{"KernelEmpty", "[engine]\nkernel = \"\"\n", {"engine.kernel", "must not be empty"}},
        BadCase{"DevicesTwice",
                "[engine]\ndevices = [0, 0]\n",
                {"engine.devices = [ 0, 0 ]", "GPU 0 is named twice"}},
        BadCase{"DevicesJunk",
                "[engine]\ndevices = \"0,x\"\n",
                {"engine.devices = '0,x'", "'x' is not a GPU number"}},
        BadCase{"DevicesNotNumbers",
                "[engine]\ndevices = [\"0\"]\n",
                {"engine.devices", "expected GPU numbers, got a string"}},
        BadCase{"DevicesBesideDevice",
                "[engine]\ndevice = 1\ndevices = \"all\"\n",
                {"engine.devices = 'all'", "not both"}},
        BadCase{"SocketPathTooLong",
                "[control]\nsocket = \"/tmp/" + long_name + "\"\n",
                {"control.socket", "too long for a Unix socket"}},
        BadCase{"SocketNotString",
                "[control]\nsocket = 5\n",
                {"control.socket = 5", "expected a string, got an integer"}},
        BadCase{"UnknownLogLevel",
                "[log]\nlevel = \"verbose\"\n",
                {"log.level = 'verbose'", "must be one of trace, debug, info"}},
        BadCase{"LogFileInMissingDirectory",
                "[log]\nfile = \"nodir/x.log\"\n",
                {"log.file = 'nodir/x.log'", "does not exist"}}),
    [](const testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tapstream

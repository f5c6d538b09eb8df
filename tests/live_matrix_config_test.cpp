// A routing matrix in the live daemon's configuration: [filter] matrix names
// the file `process --matrix` takes, its inputs and outputs become the
// stream's channels, and every bad path is refused before anything starts,
// naming the file, the path and the reason. Fast: no audio runs.

#include <gtest/gtest.h>
#include <sndfile.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/control/swapper.hpp"
#include "daemon/engine_factory.hpp"
#include "daemon/pipeline/live_pipeline.hpp"
#include "dsp/files/coefficient_file.hpp"
#include "dsp/files/sound_file.hpp"
#include "tests/process_support.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

class LiveMatrixConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    save_text_taps(dir_ / "low.txt", {0.5f, 0.25f, 0.125f}, "low");
    save_text_taps(dir_ / "high.txt", {1.0f, -1.0f}, "high");
  }

  // A 2 -> 4 matrix file whose path 1 is `path_1` (TOML lines).
  void write_matrix(const std::string& path_1) {
    std::ofstream(dir_ / "m.toml") << "inputs = 2\noutputs = 4\n"
                                   << "[[path]]\ninput = 0\noutput = 0\nfile = \"low.txt\"\n"
                                   << "[[path]]\n"
                                   << path_1 << "\n"
                                   << "[[path]]\ninput = 1\noutput = 2\nfile = \"low.txt\"\n"
                                   << "gain_db = -2.0\ndelay_frames = 3\ninvert = true\n";
  }

  LiveConfig parse(const std::string& extra = "", const std::string& filter = "") {
    return parse_live_config(
        "sample_rate = 48000\n" + extra + "[filter]\nmatrix = \"m.toml\"\n" + filter, dir_.path(),
        "live.toml");
  }

  // The ConfigError `run` would stop with, from parsing or from reading the paths.
  // `filter`: more [filter] keys.
  std::string refusal(const std::string& path_1, const std::string& filter = "") {
    write_matrix(path_1);
    try {
      const LiveConfig config = parse("", filter);
      load_configured_matrix(config);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "(accepted)";
  }

  TempDir dir_{"live-matrix-config"};
};

TEST_F(LiveMatrixConfigTest, TheMatrixFileGivesTheStreamItsInputsAndOutputs) {
  write_matrix("input = 0\noutput = 1\nfile = \"high.txt\"");
  const LiveConfig config =
      parse("", "gain_db = -6.0\n[jack]\nconnect_outputs = [\"a\", \"b\", \"c\", \"d\"]\n");
  EXPECT_TRUE(config.has_matrix());
  EXPECT_EQ(config.matrix_file, dir_ / "m.toml");
  EXPECT_EQ(config.input_channels(), 2u);
  EXPECT_EQ(config.output_channels(), 4u);
  EXPECT_EQ(config.jack.outputs.patterns.size(), 4u);

  const RoutingMatrix matrix = load_configured_matrix(config);
  ASSERT_EQ(matrix.paths().size(), 3u);
  EXPECT_EQ(matrix.inputs(), 2u);
  EXPECT_EQ(matrix.outputs(), 4u);
  // [filter] gain_db is added to every path's own.
  EXPECT_DOUBLE_EQ(matrix.paths()[0].gain_db, -6.0);
  EXPECT_DOUBLE_EQ(matrix.paths()[2].gain_db, -8.0);
  EXPECT_EQ(matrix.paths()[2].delay_frames, 3u);
  EXPECT_TRUE(matrix.paths()[2].invert);
  EXPECT_EQ(matrix.paths()[1].file, dir_ / "high.txt");
}

TEST_F(LiveMatrixConfigTest, TheShippedLiveCrossoverLoads) {
  const LiveConfig config = load_live_config(fs::path(TAPSTREAM_SOURCE_DIR) / "config" / "matrix" /
                                             "live-crossover.toml");
  EXPECT_EQ(config.input_channels(), 2u);
  EXPECT_EQ(config.output_channels(), 4u);
  const RoutingMatrix matrix = load_configured_matrix(config);
  EXPECT_EQ(matrix.paths().size(), 4u);
  EXPECT_EQ(matrix.max_taps(), 1023u);
}

TEST_F(LiveMatrixConfigTest, TodaysOneFilterPerChannelStaysValid) {
  const LiveConfig config =
      parse_live_config("channels = 3\n[filter]\nfile = \"low.txt\"\n", dir_.path(), "live.toml");
  EXPECT_FALSE(config.has_matrix());
  EXPECT_EQ(config.input_channels(), 3u);
  EXPECT_EQ(config.output_channels(), 3u);
}

TEST_F(LiveMatrixConfigTest, KeysThatContradictTheMatrixAreRefusedByName) {
  write_matrix("input = 0\noutput = 1\nfile = \"high.txt\"");
  const auto refused = [&](const std::string& extra, const std::string& filter) {
    try {
      parse(extra, filter);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(refused("channels = 2\n", "")
                .find("live.toml: channels = 2: not with filter.matrix: the matrix file gives the "
                      "inputs and outputs"),
            std::string::npos);
  EXPECT_NE(refused("", "file = \"low.txt\"\n").find("filter: give one of file"),
            std::string::npos);
  // connect_inputs takes one pattern per input: 2 here, not the outputs' 4.
  EXPECT_NE(refused("", "[jack]\nconnect_inputs = [\"a\", \"b\", \"c\", \"d\"]\n")
                .find("has 4 entries but channels = 2"),
            std::string::npos);
  std::ofstream(dir_ / "m.toml") << "inputs = 2\n[[path]]\ninput = 0\noutput = 0\nfile = \"x\"\n";
  EXPECT_NE(refused("", "").find("m.toml: a matrix needs both inputs and outputs"),
            std::string::npos);
  fs::remove(dir_ / "m.toml");
  EXPECT_NE(refused("", "").find("filter.matrix = 'm.toml': no such file"), std::string::npos);
}

TEST_F(LiveMatrixConfigTest, EveryBadPathIsRefusedNamingTheFileThePathAndTheReason) {
  {
    SoundFileWriter other_rate(dir_ / "ir44k.wav", 44100, 1, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
    other_rate.write(std::vector<float>{1.0f, 0.5f});
    other_rate.commit();
  }
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"input = 0\noutput = 1\nfile = \"gone.txt\"", "path[1].file = 'gone.txt': no such file"},
      {"input = 2\noutput = 1\nfile = \"high.txt\"", "path[1].input = 2: must be between 0 and 1"},
      {"input = 0\noutput = 4\nfile = \"high.txt\"", "path[1].output = 4: must be between 0 and 3"},
      {"input = 0\noutput = 0\nfile = \"high.txt\"",
       "path 1 (input 0 -> output 0): input 0 -> output 0 is given twice"},
      {"input = 0\noutput = 1\nfile = \"high.txt\"\nchannel = 3",
       "path 1 (input 0 -> output 1): channel 3 is out of range"},
      {"input = 0\noutput = 1\nfile = \"high.txt\"\ngain = 3", "unknown key 'gain'"},
      {"input = 0\noutput = 1", "path 1 (input 0 -> output 1): needs a file"},
  };
  for (const auto& [lines, reason] : cases) {
    const std::string message = refusal(lines);
    std::printf("%s\n  -> %s\n", lines.c_str(), message.c_str());
    EXPECT_NE(message.find((dir_ / "m.toml").string() + ": "), std::string::npos)
        << "names the matrix file: " << message;
    EXPECT_NE(message.find(reason), std::string::npos) << "says '" << reason << "': " << message;
  }
  // An IR of another rate is resampled ([filter] resample, the default), or
  // refused with resample = false, naming its rate.
  EXPECT_EQ(refusal("input = 0\noutput = 1\nfile = \"ir44k.wav\"", ""), "(accepted)");
  EXPECT_NE(
      refusal("input = 0\noutput = 1\nfile = \"ir44k.wav\"", "resample = false\n").find("44100"),
      std::string::npos);
}

TEST_F(LiveMatrixConfigTest, APathLongerThanMaxTapsIsRefusedNamingMaxTapsAndItsDelayIsNotCounted) {
  write_matrix("input = 0\noutput = 1\nfile = \"high.txt\"\ndelay_frames = 200");
  const LiveConfig roomy = parse("", "max_taps = 100\n");
  EXPECT_EQ(engine_max_taps(roomy, load_configured_matrix(roomy).max_filter_taps()), 100u)
      << "2 taps and a delay of 200 frames fit max_taps = 100: a delay is not filter length";
  const LiveConfig config = parse("", "max_taps = 1\n");
  const RoutingMatrix matrix = load_configured_matrix(config);
  try {
    engine_max_taps(config, matrix.max_filter_taps());
    FAIL() << "a 3-tap path was taken by an engine of max_taps = 1";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "the matrix's longest path has 3 taps, more than [filter] max_taps = 1"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(LiveMatrixConfigTest, ASwapBeyondTheCpuDelayLineIsRefusedNamingMaxDelayFrames) {
  // The CPU delay line reaches the starting matrix's longest delay (3 frames
  // here) or [filter] max_delay_frames; a swap that needs more is refused,
  // naming the key to raise, as max_taps is.
  const auto refusal_of_a_longer_delay = [&](const std::string& filter) {
    write_matrix("input = 0\noutput = 1\nfile = \"high.txt\"");
    const LiveConfig config = parse("block_frames = 64\n", "max_taps = 100\n" + filter);
    RoutingMatrix matrix = load_configured_matrix(config);
    EngineOptions engine = config.engine;
    engine.max_block_frames = config.block_frames;
    LivePipelineOptions options;
    options.block_frames = config.block_frames;
    options.realtime = false;
    LivePipeline pipeline(make_engine(Backend::cpu, matrix, engine), options);
    Swapper swapper(pipeline, config, std::move(matrix));
    pipeline.start();
    // A device's stream, unpaced: the engine takes a swap between blocks.
    std::atomic<bool> streaming{true};
    std::thread device([&] {
      std::vector<float> in(2 * 64, 0.0f), out(4 * 64);
      while (streaming.load()) {
        pipeline.offer_input(in.data(), 64);
        pipeline.take_output(out.data(), 64);
        std::this_thread::sleep_for(std::chrono::microseconds(500));  // pacing, not a wait
      }
    });
    write_matrix("input = 0\noutput = 1\nfile = \"high.txt\"\ndelay_frames = 4800");
    const std::string result = swapper.load(LoadRequest::whole_matrix(dir_ / "m.toml"));
    streaming.store(false);
    device.join();
    pipeline.stop();
    return result;
  };
  const std::string refused = refusal_of_a_longer_delay("");
  EXPECT_NE(refused.find("path 1 (input 0 -> output 1): a delay of 4800 frames"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.find("raise [filter] max_delay_frames in"), std::string::npos) << refused;
  EXPECT_EQ(refusal_of_a_longer_delay("max_delay_frames = 4800\n"), "")
      << "a delay line started for 4800 frames takes it";
}

TEST_F(LiveMatrixConfigTest, TheLayoutFormsRunLiveGivingTheStreamTheirChannelsAndRates) {
  const fs::path shipped = fs::path(TAPSTREAM_SOURCE_DIR) / "config/matrix";
  struct Form {
    const char* file;
    std::size_t inputs, outputs, paths;
  };
  for (const Form& form : {Form{"true-stereo-reverb.toml", 2, 2, 4},
                           Form{"hesuvi-7.1.toml", 8, 2, 16}, Form{"sofa-5.0.toml", 5, 2, 10}}) {
    SCOPED_TRACE(form.file);
    const std::string matrix = "[filter]\nmatrix = \"" + (shipped / form.file).string() + "\"\n";
    const LiveConfig config =
        parse_live_config("sample_rate = 48000\n" + matrix, dir_.path(), "live.toml");
    EXPECT_EQ(config.input_channels(), form.inputs);
    EXPECT_EQ(config.output_channels(), form.outputs);
    EXPECT_EQ(load_configured_matrix(config).paths().size(), form.paths);
  }
  // The SOFA set is measured at 48 kHz: a daemon at 44.1 kHz refuses it, naming both rates.
  const LiveConfig at_44k = parse_live_config(
      "sample_rate = 44100\n[filter]\nmatrix = \"" + (shipped / "sofa-5.0.toml").string() + "\"\n",
      dir_.path(), "live.toml");
  try {
    load_configured_matrix(at_44k);
    FAIL() << "a 48 kHz SOFA set was taken by a 44.1 kHz daemon";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is measured at 48000 Hz and the signal is at 44100 Hz"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tapstream

// The engines' tuning keys (dsp/model/engine_tuning): one table for the
// configuration's [engine] keys and `--engine-option`, each value checked with
// its key, value and reason; the shipped configuration lists every key with
// the default the engines use.

#include "dsp/model/engine_tuning.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "daemon/config/config.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;

std::string refusal(EngineOptions& options, const std::string& assignment) {
  try {
    set_engine_tuning(options, assignment);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(EngineTuning, EveryKeySetsItsOption) {
  EngineOptions o;
  set_engine_tuning(o, "cpu_threads=3");
  set_engine_tuning(o, "cuda_small_calls=event");
  set_engine_tuning(o, "cuda_persistent_idle_ms=7");
  set_engine_tuning(o, "cuda_persistent_answer_us=12");
  set_engine_tuning(o, "cuda_persistent_trace=true");
  set_engine_tuning(o, "cuda_persistent_loads=0");
  set_engine_tuning(o, "cuda_partitioned=false");
  set_engine_tuning(o, "cuda_zero_copy_samples=0");
  set_engine_tuning(o, "cuda_stream_tiles=false");
  set_engine_tuning(o, "fft_partition=16384");
  set_engine_tuning(o, "fft_fused=false");
  set_engine_tuning(o, "matrix_kernel=cublas");
  set_engine_tuning(o, "matrix_graphs=false");
  EXPECT_EQ(o.cpu.threads, 3u);
  EXPECT_EQ(o.cuda.small_calls, CudaSmallCalls::event);
  EXPECT_EQ(o.cuda.persistent_idle, std::chrono::milliseconds(7));
  EXPECT_EQ(o.cuda.persistent_answer, std::chrono::microseconds(12));
  EXPECT_TRUE(o.cuda.persistent_trace);
  EXPECT_EQ(o.cuda.persistent_loads, 0);
  EXPECT_FALSE(o.cuda.partitioned);
  EXPECT_EQ(o.cuda.zero_copy_samples, 0u);
  EXPECT_FALSE(o.cuda.stream_tiles);
  EXPECT_EQ(o.cuda.fft_partition, 16384u);
  EXPECT_FALSE(o.cuda.fft_fused);
  EXPECT_EQ(o.cuda.matrix_kernel, CudaMatrixKernel::cublas);
  EXPECT_FALSE(o.cuda.matrix_graphs);
  // 13 keys set above: a key added to the table needs a line here too.
  EXPECT_EQ(engine_tuning_keys().size(), 13u);
}

TEST(EngineTuning, BadValuesAndUnknownKeysAreRefusedWithKeyValueAndReason) {
  EngineOptions o;
  const EngineOptions before = o;
  EXPECT_EQ(refusal(o, "matrix_kernel=gemmish"),
            "matrix_kernel = gemmish: expected auto, tiled or cublas");
  EXPECT_EQ(refusal(o, "fft_partition=1000"),
            "fft_partition = 1000: expected 0 (by the cost model) or a power of two in 64..32768");
  EXPECT_EQ(refusal(o, "fft_partition=32"),
            "fft_partition = 32: expected 0 (by the cost model) or a power of two in 64..32768");
  EXPECT_EQ(refusal(o, "cuda_persistent_idle_ms=0"),
            "cuda_persistent_idle_ms = 0: expected 1..60000");
  EXPECT_EQ(refusal(o, "cpu_threads=-1"), "cpu_threads = -1: expected 0..4096");
  EXPECT_EQ(refusal(o, "cpu_threads=4x"), "cpu_threads = 4x: expected an integer");
  EXPECT_EQ(refusal(o, "fft_fused=0"), "fft_fused = 0: expected true or false");
  EXPECT_EQ(refusal(o, "cuda_small_calls=fast"),
            "cuda_small_calls = fast: expected auto, persistent, spin or event");
  EXPECT_NE(refusal(o, "cuda_turbo=true").find("cuda_turbo = true: unknown engine option (known: "),
            std::string::npos);
  EXPECT_EQ(refusal(o, "cpu_threads"), "engine option 'cpu_threads': expected KEY=VALUE");
  // Nothing was half-set by the refusals.
  EXPECT_EQ(o.cpu.threads, before.cpu.threads);
  EXPECT_EQ(o.cuda.fft_partition, before.cuda.fft_partition);
  EXPECT_EQ(o.cuda.matrix_kernel, before.cuda.matrix_kernel);
}

TEST(EngineTuning, OptionsMadeInCodeAreCheckedWithTheSameWords) {
  CudaEngineOptions cuda;
  EXPECT_NO_THROW(check_cuda_options(cuda));
  cuda.fft_partition = 48;
  try {
    check_cuda_options(cuda);
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "fft_partition = 48: expected 0 (by the cost model) or a power of two in 64..32768");
  }
}

TEST(EngineTuning, ConfigurationKeysReachTheEngineOptionsAndBadOnesNameTheFile) {
  const fs::path dir =
      fs::temp_directory_path() / ("engine_tuning_test." + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "a.txt") << "1\n";
  const std::string head = "[filter]\nfile = \"a.txt\"\n[engine]\n";
  const LiveConfig config = parse_live_config(
      head + "cpu_threads = 2\ncuda_small_calls = \"spin\"\nfft_fused = false\n", dir, "t.toml");
  EXPECT_EQ(config.engine.cpu.threads, 2u);
  EXPECT_EQ(config.engine.cuda.small_calls, CudaSmallCalls::spin);
  EXPECT_FALSE(config.engine.cuda.fft_fused);
  try {
    parse_live_config(head + "matrix_kernel = \"gemmish\"\n", dir, "t.toml");
    ADD_FAILURE() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "t.toml: engine.matrix_kernel = gemmish: expected auto, tiled or cublas");
  }
  EXPECT_THROW(parse_live_config(head + "fft_partition = 100\n", dir, "t.toml"), ConfigError);
  fs::remove_all(dir);
}

TEST(EngineTuning, TheShippedConfigurationListsEveryKeyWithTheEnginesDefault) {
  const fs::path file = fs::path(TAPSTREAM_SOURCE_DIR) / "config" / "live-default.toml";
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  for (const auto& key : engine_tuning_keys()) {
    const std::string line = std::string(key.name) + " = " + std::string(key.default_value);
    EXPECT_NE(text.str().find("\n" + line), std::string::npos) << "missing: " << line;
  }
  // Its values are the defaults of EngineOptions.
  const LiveConfig config = load_live_config(file);
  const EngineOptions defaults;
  EXPECT_EQ(config.engine.cpu.threads, defaults.cpu.threads);
  EXPECT_EQ(config.engine.cuda.small_calls, defaults.cuda.small_calls);
  EXPECT_EQ(config.engine.cuda.persistent_idle, defaults.cuda.persistent_idle);
  EXPECT_EQ(config.engine.cuda.persistent_answer, defaults.cuda.persistent_answer);
  EXPECT_EQ(config.engine.cuda.persistent_trace, defaults.cuda.persistent_trace);
  EXPECT_EQ(config.engine.cuda.persistent_loads, defaults.cuda.persistent_loads);
  EXPECT_EQ(config.engine.cuda.partitioned, defaults.cuda.partitioned);
  EXPECT_EQ(config.engine.cuda.zero_copy_samples, defaults.cuda.zero_copy_samples);
  EXPECT_EQ(config.engine.cuda.stream_tiles, defaults.cuda.stream_tiles);
  EXPECT_EQ(config.engine.cuda.fft_partition, defaults.cuda.fft_partition);
  EXPECT_EQ(config.engine.cuda.fft_fused, defaults.cuda.fft_fused);
  EXPECT_EQ(config.engine.cuda.matrix_kernel, defaults.cuda.matrix_kernel);
  EXPECT_EQ(config.engine.cuda.matrix_graphs, defaults.cuda.matrix_graphs);
}

}  // namespace
}  // namespace tapstream

// A filter per channel as the diagonal routing matrix: DiagonalEngine runs it
// on a per-channel engine with the engine's own output, bit for bit; a
// diagonal matrix hands the engine a shared bank when every path has the same
// effective taps (engines treat it specially); the factory picks the
// per-channel engines for a diagonal matrix and the matrix engine otherwise;
// the capabilities are asked for, never probed.

#include "dsp/model/diagonal_engine.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/engine_factory.hpp"
#include "dsp/cpu/cpu_engine.hpp"
#include "dsp/model/routing_matrix.hpp"
#include "matrix_support.hpp"
#include "reference.hpp"

namespace tapstream {
namespace {

using testing::random_signal;

// Records the banks it is given; filters nothing.
class RecordingEngine final : public Engine {
 public:
  explicit RecordingEngine(std::size_t channels) : channels_(channels) {}
  void process(std::span<const float>, std::span<float> out, std::size_t frames, Layout) override {
    std::fill_n(out.begin(), frames * channels_, 0.0f);
  }
  void set_filters(const FilterBank& bank, bool) override { banks.push_back(bank); }
  void reset() override {}
  std::size_t channels() const override { return channels_; }
  std::size_t max_block_frames() const override { return 64; }
  std::size_t max_taps() const override { return 1024; }
  std::string name() const override { return "test"; }
  std::string description() const override { return "test: records banks"; }

  std::vector<FilterBank> banks;

 private:
  std::size_t channels_;
};

MatrixPath diagonal_path(std::size_t c, std::vector<float> taps, double gain_db = 0.0) {
  MatrixPath path;
  path.input = c;
  path.output = c;
  path.taps = std::move(taps);
  path.gain_db = gain_db;
  return path;
}

TEST(DiagonalEngine, OutputIsBitForBitThatOfThePerChannelEngineBeforeAndAfterASwap) {
  const std::uint64_t seed = 20261125;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  const std::size_t channels = 3, max_block = 512;
  std::vector<std::vector<float>> taps;
  for (std::size_t c = 0; c < channels; ++c) taps.push_back(random_signal(300 + 700 * c, seed + c));
  const FilterBank bank = FilterBank::per_channel(taps);
  const FilterBank next = FilterBank::shared(random_signal(2000, seed + 9), channels);
  EngineOptions options;
  options.max_block_frames = max_block;
  options.max_taps = 4096;
  const auto plain = make_cpu_engine(bank, options);
  DiagonalEngine diagonal(make_cpu_engine(bank, options));
  EXPECT_EQ(diagonal.inputs(), channels);
  EXPECT_EQ(diagonal.outputs(), channels);
  EXPECT_EQ(diagonal.description(), plain->description());

  std::uniform_int_distribution<std::size_t> size(1, max_block);
  for (int call = 0; call < 200; ++call) {
    if (call == 100) {
      plain->set_filters(next, true);
      diagonal.set_matrix(RoutingMatrix::diagonal(next), true);
    }
    const std::size_t frames = size(rng);
    const auto in = random_signal(frames * channels, seed + 100 + call);
    std::vector<float> want(in.size()), got(in.size());
    plain->process(in, want, frames, Layout::interleaved);
    diagonal.process(in, got, frames, Layout::interleaved);
    ASSERT_EQ(got, want) << "call " << call << " (" << frames << " frames)";
  }
}

TEST(DiagonalEngine, PathsWithTheSameEffectiveTapsReachTheEngineAsASharedBank) {
  const std::vector<float> h = random_signal(64, 7);
  auto recording = std::make_unique<RecordingEngine>(3);
  RecordingEngine& engine = *recording;
  DiagonalEngine diagonal(std::move(recording));

  // Read path by path (as from a matrix file), every path the same filter.
  diagonal.set_matrix(
      RoutingMatrix::make(3, 3, {diagonal_path(0, h), diagonal_path(1, h), diagonal_path(2, h)}),
      true);
  ASSERT_EQ(engine.banks.size(), 1u);
  EXPECT_TRUE(engine.banks[0].is_shared());
  EXPECT_EQ(std::vector<float>(engine.banks[0].taps(2).begin(), engine.banks[0].taps(2).end()), h);

  // The same taps with another gain on one path: no longer one filter.
  diagonal.set_matrix(
      RoutingMatrix::make(3, 3,
                          {diagonal_path(0, h), diagonal_path(1, h, -6.0), diagonal_path(2, h)}),
      true);
  ASSERT_EQ(engine.banks.size(), 2u);
  EXPECT_FALSE(engine.banks[1].is_shared());
  EXPECT_NEAR(engine.banks[1].taps(1)[5], h[5] * std::pow(10.0, -6.0 / 20.0), 1e-6);

  // A matrix made from a bank hands over that very bank, shared or not.
  diagonal.set_matrix(RoutingMatrix::diagonal(FilterBank::shared(h, 3)), true);
  ASSERT_EQ(engine.banks.size(), 3u);
  EXPECT_TRUE(engine.banks[2].is_shared());
}

TEST(DiagonalEngine, RefusesAMatrixThatIsNotTheDiagonalOfItsChannels) {
  auto recording = std::make_unique<RecordingEngine>(2);
  RecordingEngine& engine = *recording;
  DiagonalEngine diagonal(std::move(recording));
  MatrixPath crossed = diagonal_path(0, {1.0f});
  crossed.output = 1;
  try {
    diagonal.set_matrix(RoutingMatrix::make(2, 2, {diagonal_path(0, {1.0f}), crossed}), true);
    FAIL() << "a rerouted matrix was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("is not the diagonal of the running 2 channels"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(diagonal.set_matrix(RoutingMatrix::diagonal(FilterBank::shared({1.0f}, 3)), true),
               std::invalid_argument);
  EXPECT_TRUE(engine.banks.empty()) << "the engine keeps its filters";
}

TEST(EngineFactory, ADiagonalMatrixRunsOnThePerChannelEngineAnyOtherOnTheMatrixEngine) {
  EngineOptions options;
  options.max_block_frames = 64;
  options.realtime_calls = true;  // the CPU engine's non-uniform form, with a real-time face
  const FilterBank bank = FilterBank::shared(random_signal(2048, 3), 2);
  const auto diagonal = make_engine(Backend::cpu, RoutingMatrix::diagonal(bank), options);
  EXPECT_EQ(diagonal->name(), "cpu");
  EXPECT_EQ(diagonal->description().find("matrix"), std::string::npos) << diagonal->description();
  EXPECT_NE(diagonal->realtime(), nullptr);

  MatrixPath crossed = diagonal_path(0, random_signal(2048, 4));
  crossed.output = 1;
  const auto matrix = make_engine(
      Backend::cpu, RoutingMatrix::make(2, 2, {diagonal_path(0, random_signal(2048, 5)), crossed}),
      options);
  EXPECT_EQ(matrix->name(), "cpu");
  EXPECT_NE(matrix->description().find("cpu: matrix 2 -> 2"), std::string::npos)
      << matrix->description();
  // A small matrix's worst call fits the callback: the matrix engine offers its real-time face.
  EXPECT_NE(matrix->realtime(), nullptr);
  EXPECT_NE(matrix->description().find("in the audio callback"), std::string::npos)
      << matrix->description();
}

TEST(EngineFactory, TheMatrixEngineRunsInTheCallbackOnlyWhereItsCostModelSaysItsWorstCallFits) {
  // At 64-frame calls of 48 kHz: HeSuVi's shape (8 -> 2, 16 paths of 8192
  // taps) fits; 16 -> 16 with every input to every output (256 paths), whose
  // call that completes a segment does every path's tail products, does not.
  EngineOptions options;
  options.max_block_frames = 64;
  options.realtime_calls = true;
  options.sample_rate = 48000;
  std::vector<MatrixPath> dense, hesuvi;
  for (std::size_t i = 0; i < 16; ++i) {
    for (std::size_t o = 0; o < 16; ++o) {
      MatrixPath path = diagonal_path(i, random_signal(8192, 100 + 16 * i + o));
      path.output = o;
      dense.push_back(std::move(path));
    }
  }
  for (std::size_t i = 0; i < 8; ++i) {
    for (std::size_t o = 0; o < 2; ++o) {
      MatrixPath path = diagonal_path(i, random_signal(8192, 500 + 2 * i + o));
      path.output = o;
      hesuvi.push_back(std::move(path));
    }
  }
  const auto heavy = make_engine(Backend::cpu, RoutingMatrix::make(16, 16, dense), options);
  EXPECT_EQ(heavy->realtime(), nullptr) << heavy->description();
  EXPECT_NE(heavy->description().find("not in the callback"), std::string::npos)
      << heavy->description();

  const auto light = make_engine(Backend::cpu, RoutingMatrix::make(8, 2, hesuvi), options);
  EXPECT_NE(light->realtime(), nullptr) << light->description();
  EXPECT_NE(light->description().find("in the audio callback"), std::string::npos)
      << light->description();

  // Not asked for (buffered mode, offline): no face, and no word of it.
  options.realtime_calls = false;
  const auto offline = make_engine(Backend::cpu, RoutingMatrix::make(8, 2, hesuvi), options);
  EXPECT_EQ(offline->realtime(), nullptr);
  EXPECT_EQ(offline->description().find("callback"), std::string::npos) << offline->description();
}

TEST(EngineFactory, AGainOnTheCpuGetsCacheSizedOfflineBlocksAndFiltersKeepTheirs) {
  // 256 KiB of floats a block for a gain (1 tap), 1024 to 16384 frames.
  EXPECT_EQ(offline_block_frames("cpu", 32, 1), 2048u);
  EXPECT_EQ(offline_block_frames("cpu", 2, 1), 16384u);
  EXPECT_EQ(offline_block_frames("cpu", 256, 1), 1024u);
  // Real filters, unknown lengths and the CUDA engine as before.
  EXPECT_EQ(offline_block_frames("cpu", 32, 2048), 16384u);
  EXPECT_EQ(offline_block_frames("cpu", 32), 16384u);
  EXPECT_EQ(offline_block_frames("cuda", 32, 1), offline_block_frames("cuda", 32));
  // The factory's choice when the caller leaves the block to it (0).
  EngineOptions options;
  options.max_block_frames = 0;
  const auto gain =
      make_engine(Backend::cpu, RoutingMatrix::diagonal(FilterBank::shared({0.5f}, 32)), options);
  EXPECT_EQ(gain->max_block_frames(), 2048u);
  const auto filter = make_engine(
      Backend::cpu, RoutingMatrix::diagonal(FilterBank::shared(random_signal(64, 9), 32)), options);
  EXPECT_EQ(filter->max_block_frames(), 16384u);
}

TEST(EngineFactory, TheCpuMatrixEngineGetsOfflineBlocksOfSeveralSegments) {
  // Its calls read each filter spectrum once for all their whole segments,
  // so its blocks are longer than the per-channel rule gives many channels.
  EngineOptions options;
  options.max_block_frames = 0;
  const auto dense = [](std::size_t inputs, std::size_t outputs) {
    std::vector<MatrixPath> paths;
    for (std::size_t o = 0; o < outputs; ++o)
      paths.push_back(testing::make_path(o % inputs, o, random_signal(64, 20 + o)));
    paths.push_back(testing::make_path(1, 0, random_signal(64, 7)));  // not diagonal
    return RoutingMatrix::make(inputs, outputs, std::move(paths));
  };
  EXPECT_EQ(offline_block_frames("cpu", 128, 64), 8192u) << "the per-channel rule";
  EXPECT_EQ(make_engine(Backend::cpu, dense(16, 128), options)->max_block_frames(), 16384u);
  EXPECT_EQ(offline_block_frames("cpu", 512, 64), 4096u) << "the per-channel rule";
  EXPECT_EQ(make_engine(Backend::cpu, dense(2, 512), options)->max_block_frames(), 8192u)
      << "no more than 2^22 samples of a block in and out";
  options.max_block_frames = 1000;
  EXPECT_EQ(make_engine(Backend::cpu, dense(16, 128), options)->max_block_frames(), 1000u)
      << "a block the caller gives is kept";
}

TEST(EngineFactory, CpuEnginesOfferNoCudaTransport) {
  EngineOptions options;
  options.max_block_frames = 256;
  const auto engine =
      make_engine(Backend::cpu, RoutingMatrix::diagonal(FilterBank::shared({0.5f}, 2)), options);
  EXPECT_TRUE(engine->staging_input().empty());
  EXPECT_TRUE(engine->staging_output().empty());
  EXPECT_EQ(engine->pinned_memory().allocate, nullptr);
  EXPECT_TRUE(std::isnan(engine->last_call_host_us()));
  // Blocks then come from ordinary memory.
  const BlockMemory block = block_allocator(*engine)(16);
  EXPECT_EQ(block[15], 0.0f);
}

}  // namespace
}  // namespace tapstream

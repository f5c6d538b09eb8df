// A matrix sharded by output over several engines (dsp/model/sharded_engine,
// one engine per GPU in the daemon): the split covers every output once,
// balanced by paths; with CPU engines as shards the output equals the
// unsharded engine's exactly (dense and diagonal matrices, both layouts, any
// block size, swaps, reset); a swap one shard would refuse changes no shard;
// and every shard's call is started before any is waited for.

#include "dsp/model/sharded_engine.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/engine_factory.hpp"
#include "dsp/cpu/cpu_engine.hpp"
#include "dsp/model/matrix_filter.hpp"
#include "tests/matrix_support.hpp"
#include "tests/reference.hpp"

namespace tapstream {
namespace {

using testing::announce;
using testing::make_path;
using testing::random_signal;
using testing::random_signals;
using testing::run_stream;

// The whole engine and every shard with the same room (as the engine factory
// gives them: the whole matrix's), so that they choose the same partitions.
EngineOptions cpu_options() {
  EngineOptions options;
  options.max_block_frames = 512;
  options.max_taps = 4096;
  options.cpu.threads = 1;
  return options;
}

using MakeEngine = std::function<std::unique_ptr<MatrixEngine>(const RoutingMatrix&)>;

// The engine factory's CPU engine for a matrix. Its partitions follow the
// matrix's shape (the matrix engine's cost model), so a part may round
// differently from the whole.
std::unique_ptr<MatrixEngine> factory_engine(const RoutingMatrix& matrix) {
  return make_engine(Backend::cpu, matrix, cpu_options());
}

// Each path through the direct form (MatrixFilter over the CPU engine):
// every output sample the same sum in the same order, whatever else the
// engine holds, so the sharded engine must equal it bit for bit.
std::unique_ptr<MatrixEngine> exact_engine(const RoutingMatrix& matrix) {
  EngineOptions options = cpu_options();
  options.algorithm = Algorithm::direct;
  return std::make_unique<MatrixFilter>(matrix, make_cpu_engine(matrix.path_bank(), options));
}

std::unique_ptr<ShardedEngine> sharded(const RoutingMatrix& matrix, std::size_t shards,
                                       const MakeEngine& make) {
  return std::make_unique<ShardedEngine>(
      matrix, shards, [&](std::size_t, const RoutingMatrix& part) { return make(part); });
}

// 4 -> 6, every output reached by 0 to 3 paths of different lengths, gains,
// delays and polarities.
RoutingMatrix dense_matrix(std::uint64_t seed) {
  std::vector<MatrixPath> paths;
  paths.push_back(make_path(0, 0, random_signal(700, seed + 1), -3.0));
  paths.push_back(make_path(3, 0, random_signal(33, seed + 2), 0.0, 5, true));
  paths.push_back(make_path(1, 1, random_signal(2000, seed + 3), 2.0));
  paths.push_back(make_path(2, 2, random_signal(1, seed + 4)));
  paths.push_back(make_path(0, 2, random_signal(129, seed + 5), -6.0, 40));
  paths.push_back(make_path(3, 2, random_signal(900, seed + 6)));
  paths.push_back(make_path(1, 4, random_signal(64, seed + 7), 0.0, 0, true));
  paths.push_back(make_path(2, 5, random_signal(1500, seed + 8)));
  return RoutingMatrix::make(4, 6, std::move(paths));  // output 3: no path
}

RoutingMatrix diagonal_matrix(std::size_t channels, std::uint64_t seed) {
  std::vector<std::vector<float>> taps;
  for (std::size_t c = 0; c < channels; ++c) taps.push_back(random_signal(100 + 300 * c, seed + c));
  return RoutingMatrix::diagonal(FilterBank::per_channel(std::move(taps)));
}

void expect_same(const std::vector<std::vector<float>>& got,
                 const std::vector<std::vector<float>>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t c = 0; c < got.size(); ++c) {
    for (std::size_t f = 0; f < got[c].size(); ++f) {
      ASSERT_EQ(got[c][f], want[c][f]) << what << ": output " << c << ", frame " << f;
    }
  }
}

TEST(ShardedEngine, TheSplitCoversEveryOutputOnceInContiguousRangesBalancedByPaths) {
  const RoutingMatrix diagonal = diagonal_matrix(8, 1);
  EXPECT_EQ(split_outputs(diagonal, 2), (std::vector<OutputRange>{{0, 4}, {4, 4}}));
  EXPECT_EQ(split_outputs(diagonal, 3), (std::vector<OutputRange>{{0, 2}, {2, 3}, {5, 3}}));
  EXPECT_EQ(split_outputs(diagonal, 1), (std::vector<OutputRange>{{0, 8}}));
  // More shards than outputs: one output each.
  EXPECT_EQ(split_outputs(diagonal_matrix(2, 1), 4), (std::vector<OutputRange>{{0, 1}, {1, 1}}));
  // Paths per output 2, 1, 3, 1 (none: weighs 1), 1, 1: 9 in all, about 4.5 each.
  const std::vector<OutputRange> dense = split_outputs(dense_matrix(1), 2);
  EXPECT_EQ(dense, (std::vector<OutputRange>{{0, 2}, {2, 4}}));
  for (std::size_t shards = 1; shards <= 7; ++shards) {
    std::size_t next = 0;
    for (const OutputRange& range : split_outputs(dense_matrix(1), shards)) {
      EXPECT_EQ(range.first, next);
      EXPECT_GT(range.count, 0u);
      next += range.count;
    }
    EXPECT_EQ(next, 6u) << shards << " shards";
  }
}

TEST(ShardedEngine, APartReadsOnlyItsPathsInputsAndADiagonalsPartStaysDiagonal) {
  std::vector<std::size_t> inputs;
  const RoutingMatrix part = matrix_part(dense_matrix(1), {2, 2}, inputs);
  EXPECT_EQ(inputs, (std::vector<std::size_t>{0, 2, 3}));
  EXPECT_EQ(part.inputs(), 3u);
  EXPECT_EQ(part.outputs(), 2u);
  ASSERT_EQ(part.paths().size(), 3u);    // output 2's three paths, output 3 none
  EXPECT_EQ(part.paths()[0].input, 1u);  // input 2 is the part's input 1
  EXPECT_EQ(part.paths()[1].input, 0u);
  EXPECT_EQ(part.paths()[1].delay_frames, 40u);
  EXPECT_EQ(part.paths()[2].input, 2u);

  const RoutingMatrix shared = RoutingMatrix::diagonal(FilterBank::shared(random_signal(50, 3), 6));
  const RoutingMatrix shared_part = matrix_part(shared, {4, 2}, inputs);
  EXPECT_EQ(inputs, (std::vector<std::size_t>{4, 5}));
  EXPECT_TRUE(shared_part.is_diagonal());
  EXPECT_TRUE(shared_part.diagonal_bank()->is_shared());
}

TEST(ShardedEngine, OverCpuEnginesItEqualsTheUnshardedEngineExactlyAtAnyBlockSize) {
  const std::uint64_t seed = announce("ShardedEngine exactness", 26003);
  for (const bool diagonal : {false, true}) {
    const RoutingMatrix matrix = diagonal ? diagonal_matrix(5, seed) : dense_matrix(seed);
    const auto inputs = random_signals(matrix.inputs(), 6000, seed + 100);
    for (const Layout layout : {Layout::interleaved, Layout::planar}) {
      for (const std::size_t shards : {2u, 3u, 4u}) {
        const std::string what = std::string(diagonal ? "diagonal" : "dense") + ", " +
                                 (layout == Layout::planar ? "planar" : "interleaved") + ", " +
                                 std::to_string(shards) + " shards";
        {
          std::unique_ptr<MatrixEngine> whole = exact_engine(matrix);
          std::unique_ptr<ShardedEngine> parts = sharded(matrix, shards, exact_engine);
          EXPECT_EQ(parts->shards(), shards) << what;
          EXPECT_EQ(parts->inputs(), matrix.inputs());
          EXPECT_EQ(parts->outputs(), matrix.outputs());
          std::mt19937_64 rng_whole(seed + shards), rng_parts(seed + shards);
          expect_same(run_stream(*parts, inputs, rng_parts, layout),
                      run_stream(*whole, inputs, rng_whole, layout), what);
        }
        // The factory's engines: a diagonal's parts are the same per-channel
        // engine (exact); a dense matrix's parts may choose other partitions.
        std::unique_ptr<MatrixEngine> whole = factory_engine(matrix);
        std::unique_ptr<ShardedEngine> parts = sharded(matrix, shards, factory_engine);
        std::mt19937_64 rng_whole(seed + shards), rng_parts(seed + shards);
        const auto got = run_stream(*parts, inputs, rng_parts, layout);
        const auto want = run_stream(*whole, inputs, rng_whole, layout);
        if (diagonal) {
          expect_same(got, want, what + ", the factory's engines");
        } else {
          for (std::size_t o = 0; o < want.size(); ++o) {
            EXPECT_LE(testing::relative_error(got[o], want[o]), 1e-6) << what << ", output " << o;
          }
        }
      }
    }
  }
}

TEST(ShardedEngine, SwapsAndResetReachEveryShardAsTheyReachTheUnshardedEngine) {
  const std::uint64_t seed = announce("ShardedEngine swaps", 26004);
  const RoutingMatrix before = dense_matrix(seed);
  std::vector<MatrixPath> paths = before.paths();
  for (std::size_t p = 0; p < paths.size(); ++p) {
    paths[p].taps = random_signal(paths[p].taps.size() / 2 + 1, seed + 50 + p);
    paths[p].gain_db -= 1.0;
  }
  const RoutingMatrix after = RoutingMatrix::make(4, 6, paths);
  const auto inputs = random_signals(4, 3000, seed + 7);
  std::unique_ptr<MatrixEngine> whole = exact_engine(before);
  std::unique_ptr<ShardedEngine> parts = sharded(before, 3, exact_engine);
  std::mt19937_64 rng_whole(seed), rng_parts(seed);
  expect_same(run_stream(*parts, inputs, rng_parts, Layout::interleaved),
              run_stream(*whole, inputs, rng_whole, Layout::interleaved), "before the swap");
  whole->set_matrix(after, true);
  parts->set_matrix(after, true);
  expect_same(run_stream(*parts, inputs, rng_parts, Layout::interleaved),
              run_stream(*whole, inputs, rng_whole, Layout::interleaved), "crossfaded swap");

  // A swap that one shard's part cannot take (a path over max_taps, on the
  // last shard) is refused whole: every shard keeps the running matrix.
  std::vector<MatrixPath> too_long = after.paths();
  too_long.back().taps = random_signal(parts->max_taps() + 1, seed + 9);
  const RoutingMatrix refused = RoutingMatrix::make(4, 6, too_long, std::size_t(1) << 20);
  try {
    parts->set_matrix(refused, false);
    ADD_FAILURE() << "a path over max_taps was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("path 7 (input 2 -> output 5)"), std::string::npos)
        << e.what();
  }
  // A reroute is refused too, naming the path.
  std::vector<MatrixPath> rerouted = after.paths();
  rerouted[0].output = 3;
  EXPECT_THROW(parts->set_matrix(RoutingMatrix::make(4, 6, rerouted), false),
               std::invalid_argument);
  expect_same(run_stream(*parts, inputs, rng_parts, Layout::planar),
              run_stream(*whole, inputs, rng_whole, Layout::planar), "after the refused swaps");

  whole->reset();
  parts->reset();
  expect_same(run_stream(*parts, inputs, rng_parts, Layout::interleaved),
              run_stream(*whole, inputs, rng_whole, Layout::interleaved), "after reset");
}

TEST(ShardedEngine, PathUpdatesReachTheShardThatRunsEachPathAsTheyReachTheWholeEngine) {
  const std::uint64_t seed = announce("ShardedEngine set_paths", 26005);
  for (const bool diagonal : {true, false}) {
    // A diagonal with gains and delays on its paths (kept by each part).
    std::vector<MatrixPath> diagonal_paths;
    for (std::size_t c = 0; c < 5; ++c) {
      diagonal_paths.push_back(make_path(c, c, random_signal(50 + 200 * c, seed + c),
                                         -2.0 * double(c), 3 * c, c % 2 == 1));
    }
    const RoutingMatrix matrix =
        diagonal ? RoutingMatrix::make(5, 5, diagonal_paths) : dense_matrix(seed);
    const auto inputs = random_signals(matrix.inputs(), 3000, seed + 1);
    std::unique_ptr<MatrixEngine> whole = factory_engine(matrix);
    std::unique_ptr<ShardedEngine> parts = sharded(matrix, 3, factory_engine);
    std::mt19937_64 rng_whole(seed), rng_parts(seed);
    run_stream(*whole, inputs, rng_whole, Layout::interleaved);
    run_stream(*parts, inputs, rng_parts, Layout::interleaved);
    const std::vector<float> first = random_signal(300, seed + 40);
    const std::vector<float> last = random_signal(77, seed + 41);
    const std::vector<PathTaps> updates = {{0, first}, {matrix.paths().size() - 1, last}};
    whole->set_paths(updates, true);
    parts->set_paths(updates, true);
    const auto want = run_stream(*whole, inputs, rng_whole, Layout::interleaved);
    const auto got = run_stream(*parts, inputs, rng_parts, Layout::interleaved);
    for (std::size_t o = 0; o < want.size(); ++o) {
      EXPECT_LE(testing::relative_error(got[o], want[o]), 1e-6)
          << (diagonal ? "diagonal" : "dense") << ", output " << o;
    }
    // Refused whole: a path over max_taps beside a good one changes no shard.
    const std::vector<float> too_long = random_signal(parts->max_taps() + 1, seed + 42);
    const std::vector<PathTaps> refused = {{0, last}, {matrix.paths().size() - 1, too_long}};
    EXPECT_THROW(parts->set_paths(refused, false), std::invalid_argument);
    EXPECT_THROW(whole->set_paths(refused, false), std::invalid_argument);
    const auto want_after = run_stream(*whole, inputs, rng_whole, Layout::planar);
    const auto got_after = run_stream(*parts, inputs, rng_parts, Layout::planar);
    for (std::size_t o = 0; o < want.size(); ++o) {
      EXPECT_LE(testing::relative_error(got_after[o], want_after[o]), 1e-6)
          << "after the refused update, output " << o;
    }
  }
}

// A shard that records its calls in a log shared by all shards: output o =
// input (a pass-through per path), enough to see the order of the halves.
class RecordingEngine final : public MatrixEngine {
 public:
  RecordingEngine(std::size_t index, std::size_t inputs, std::size_t outputs,
                  std::vector<std::string>& log)
      : index_(index), inputs_(inputs), outputs_(outputs), log_(log) {}
  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout layout) override {
    start_process(in, out, frames, layout);
    finish_process();
  }
  void start_process(std::span<const float>, std::span<float> out, std::size_t frames,
                     Layout) override {
    log_.push_back("start " + std::to_string(index_));
    std::fill_n(out.begin(), outputs_ * frames, float(index_ + 1));
  }
  void finish_process() override { log_.push_back("finish " + std::to_string(index_)); }
  void set_matrix(const RoutingMatrix&, bool) override {}
  void reset() override {}
  std::size_t inputs() const override { return inputs_; }
  std::size_t outputs() const override { return outputs_; }
  std::size_t max_block_frames() const override { return 64; }
  std::size_t max_taps() const override { return 1000; }
  std::string name() const override { return "recording"; }
  std::string description() const override { return "recording " + std::to_string(index_); }

 private:
  std::size_t index_, inputs_, outputs_;
  std::vector<std::string>& log_;
};

TEST(ShardedEngine, EveryShardsCallIsStartedBeforeAnyIsWaitedFor) {
  std::vector<std::string> log;
  const RoutingMatrix matrix = diagonal_matrix(6, 5);
  ShardedEngine sharded(matrix, 3, [&](std::size_t s, const RoutingMatrix& part) {
    return std::make_unique<RecordingEngine>(s, part.inputs(), part.outputs(), log);
  });
  std::vector<float> in(6 * 10, 0.5f), out(6 * 10, 0.0f);
  sharded.process(in, out, 10, Layout::interleaved);
  EXPECT_EQ(log, (std::vector<std::string>{"start 0", "start 1", "start 2", "finish 0", "finish 1",
                                           "finish 2"}));
  // Each output came from its own shard, scattered into its place.
  for (std::size_t f = 0; f < 10; ++f) {
    for (std::size_t c = 0; c < 6; ++c) EXPECT_EQ(out[f * 6 + c], float(c / 2 + 1));
  }
  EXPECT_NE(sharded.description().find("outputs 2..3: recording 1"), std::string::npos)
      << sharded.description();
}

TEST(ShardedEngine, AShardThatCannotBeMadeFailsTheWholeEngineWithItsReason) {
  const RoutingMatrix matrix = diagonal_matrix(4, 5);
  EXPECT_THROW(
      {
        try {
          ShardedEngine sharded(
              matrix, 2,
              [&](std::size_t s, const RoutingMatrix& part) -> std::unique_ptr<MatrixEngine> {
                if (s == 1) throw std::runtime_error("GPU 1 is out of memory");
                return factory_engine(part);
              });
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "GPU 1 is out of memory");
          throw;
        }
      },
      std::runtime_error);
}

}  // namespace
}  // namespace tapstream

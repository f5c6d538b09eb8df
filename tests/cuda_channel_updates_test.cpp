// Per-channel updates on the CUDA engine (Engine::set_channel_filters, through
// DiagonalEngine::set_paths): the partitioned path transforms and crossfades
// the named channels only (kernels/convolvers/partitioned_convolver.hpp); the
// direct path keeps the whole-bank fallback. The checks are those of the CPU
// engines (channel_updates_support.hpp). Skipped without a GPU.

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "channel_updates_support.hpp"
#include "cuda_test_support.hpp"
#include "kernels/cuda_engine.hpp"

namespace tapstream {
namespace {

using testing::announce;

// The partitioned path, forced: its head is the call size, its tails the rest.
std::unique_ptr<Engine> make_partitioned(const FilterBank& bank, std::size_t max_block,
                                         std::size_t max_taps) {
  EngineOptions options;
  options.max_block_frames = max_block;
  options.max_taps = max_taps;
  options.kernel = "partitioned";
  return make_cuda_engine(bank, options);
}

class CudaChannelUpdates : public testing::CudaDeviceTest {};

TEST_F(CudaChannelUpdates, UpdatesAtRandomCallSplitsMatchTheFloat64Reference) {
  const std::uint64_t seed = announce("cuda channel updates", 2531);
  testing::expect_updates_match_reference(make_partitioned, 6, 3000, 256, 12000, seed);
}

TEST_F(CudaChannelUpdates, LongFiltersAcrossSeveralTailSegmentsMatchTheFloat64Reference) {
  const std::uint64_t seed = announce("cuda channel updates, long", 2532);
  // Tail segments (the plan "64x.. + 128x.. + ..."), whose steps an update recomputes.
  const auto probe =
      make_partitioned(FilterBank::shared(std::vector<float>(20000, 0.1f), 3), 64, 20000);
  std::printf("%s\n", probe->description().c_str());
  ASSERT_NE(probe->description().find(" + "), std::string::npos) << probe->description();
  testing::expect_updates_match_reference(make_partitioned, 3, 20000, 64, 30000, seed);
}

TEST_F(CudaChannelUpdates, HalfTheChannelsChangingBeforeEveryCallMatchTheFloat64Reference) {
  const std::uint64_t seed = announce("cuda many channels", 2533);
  testing::expect_many_channels_every_call(make_partitioned, 48, 1500, 128, 40, seed);
}

TEST_F(CudaChannelUpdates, UpdatesBeforeOneCallAddUpAlsoOnAWholeMatrixPendingBeforeThem) {
  const std::uint64_t seed = announce("cuda updates before one call", 2539);
  testing::expect_updates_before_a_call_add_up(make_partitioned, 2500, 128, seed);
}

TEST_F(CudaChannelUpdates, ChannelsNoUpdateNamesStayBitIdenticalToARunWithoutUpdates) {
  const std::uint64_t seed = announce("cuda untouched channels", 2534);
  testing::expect_untouched_channels_bit_identical(make_partitioned, 5, 3000, 256, 10000, seed);
}

TEST_F(CudaChannelUpdates, BadChannelsAreRefusedNamingTheChannelAndTheEngineRunsOnUnchanged) {
  const std::uint64_t seed = announce("cuda bad channels", 2535);
  testing::expect_bad_channels_refused(make_partitioned, 2000, 128, seed);
}

TEST_F(CudaChannelUpdates, AnUpdateTransformsAndCrossfadesItsChannelsOnly) {
  const std::uint64_t seed = announce("cuda update cost", 2536);
  testing::expect_cost_of_changed_channels_only(make_partitioned, 2000, 128, seed);
}

TEST_F(CudaChannelUpdates, WholeSwapsAndChannelUpdatesInterleavedMatchTheFloat64Reference) {
  const std::uint64_t seed = announce("cuda whole and channel swaps", 2537);
  const RoutingMatrix matrix = testing::channel_matrix(4, 2500, seed);
  const std::size_t block = 100, calls = 80;
  const std::vector<std::size_t> sizes(calls, block);
  const testing::Signals inputs = testing::channel_inputs(4, calls * block, seed);
  testing::Schedule schedule = testing::channel_updates(matrix, calls, 4, 2, 2500, seed + 5);
  // Every 10th call, every channel, as a whole matrix (set_matrix).
  for (std::size_t call = 5; call < calls; call += 10)
    for (std::size_t c = 0; c < 4; ++c)
      schedule[call][c] = testing::random_signal(1 + (call * 37 + c * 101) % 2400, seed + call + c);
  const auto engine = testing::diagonal_engine(make_partitioned, matrix, block, 2500);
  const auto whole = [&](MatrixEngine& e, const std::vector<PathTaps>& updates) {
    if (updates.size() < 4) return e.set_paths(updates, true);
    e.set_matrix(with_path_taps(matrix, updates, 2500), true);
  };
  const auto got = testing::run_with_updates(*engine, inputs, sizes, schedule, whole);
  const auto want = testing::piecewise_reference(matrix, inputs, sizes, schedule);
  for (std::size_t c = 0; c < 4; ++c)
    EXPECT_LE(testing::relative_error(got[c], want[c]), 1e-5) << "channel " << c;
}

TEST_F(CudaChannelUpdates, TheDirectPathKeepsTheWholeBankFallbackAndStaysExact) {
  const std::uint64_t seed = announce("cuda direct fallback", 2538);
  const auto make_direct = [](const FilterBank& bank, std::size_t max_block, std::size_t max_taps) {
    EngineOptions options;
    options.max_block_frames = max_block;
    options.max_taps = max_taps;
    options.algorithm = Algorithm::direct;
    return make_cuda_engine(bank, options);
  };
  const RoutingMatrix matrix = testing::channel_matrix(3, 200, seed);
  const auto engine = make_direct(*matrix.diagonal_bank(), 64, 200);
  const std::vector<float> taps = testing::random_signal(50, seed + 1);
  const std::vector<PathTaps> update{{1, taps}};
  EXPECT_FALSE(engine->set_channel_filters(update, true));
  testing::expect_updates_match_reference(make_direct, 3, 200, 64, 4000, seed);
}

}  // namespace
}  // namespace tapstream

// The partitioned matrix engines' delay arithmetic (dsp/model/segment_delay):
// a delay split into whole segments and a remainder, the partitions a path
// spans, the delay line's length and a dense engine's table of segments.
// The CPU engine's exactness tests (routing_matrix_test) and the CUDA
// engine's (cuda_matrix_engine_test) run on it; these pin its edges.

#include "dsp/model/segment_delay.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "matrix_support.hpp"

namespace tapstream {
namespace {

using testing::make_path;

TEST(SegmentDelay, ADelaySplitsIntoWholeSegmentsAndARemainderUnderOnePartition) {
  EXPECT_EQ(split_delay(0, 64).segments, 0u);
  EXPECT_EQ(split_delay(0, 64).remainder, 0u);
  EXPECT_EQ(split_delay(63, 64).segments, 0u);
  EXPECT_EQ(split_delay(63, 64).remainder, 63u);
  EXPECT_EQ(split_delay(64, 64).segments, 1u);
  EXPECT_EQ(split_delay(64, 64).remainder, 0u);
  EXPECT_EQ(split_delay(24000, 64).segments, 375u);
  EXPECT_EQ(split_delay(24000, 64).remainder, 0u);
  EXPECT_EQ(split_delay(48007, 8192).segments, 5u);
  EXPECT_EQ(split_delay(48007, 8192).remainder, 7047u);
}

TEST(SegmentDelay, APathSpansItsRemaindersZerosAndItsTapsNotItsWholeSegments) {
  EXPECT_EQ(partitions_reached(0, 64, 64), 1u);
  EXPECT_EQ(partitions_reached(1, 64, 64), 2u) << "one zero pushes the last tap over";
  EXPECT_EQ(partitions_reached(64, 64, 64), 1u) << "a whole segment costs nothing";
  EXPECT_EQ(partitions_reached(24000, 4096, 64), 64u);
  EXPECT_EQ(partitions_reached(24001, 4096, 64), 65u);
  EXPECT_EQ(partitions_reached(24000 + 63, 4096, 64), 65u);
  EXPECT_EQ(partitions_reached(5, 1, 64), 1u);
}

TEST(SegmentDelay, TheEnginesPartitionsFitAnyRemainderAndTheLineEveryDelay) {
  // Every remainder with every length up to max_taps fits the partitions.
  for (const std::size_t partition : {1u, 2u, 64u, 100u, 8192u}) {
    for (const std::size_t max_taps : {1u, 2u, 63u, 64u, 65u, 4096u, 5000u}) {
      const std::size_t k = partitions_for_any_delay(max_taps, partition);
      std::size_t most = 0;
      for (std::size_t r = 0; r<partition; r += partition> 64 ? 97 : 1)
        most = std::max(most, partitions_reached(r, max_taps, partition));
      most = std::max(most, partitions_reached(partition - 1, max_taps, partition));
      EXPECT_EQ(k, most) << "partition " << partition << ", max_taps " << max_taps;
    }
  }
  // The oldest segment a path reads is q + k - 1 back; the line holds it.
  const std::size_t partition = 64, max_taps = 4096, max_delay = 65536;
  const std::size_t slots = delay_line_segments(max_taps, max_delay, partition);
  const std::size_t deepest = split_delay(max_delay, partition).segments +
                              partitions_reached(max_delay, max_taps, partition) - 1;
  EXPECT_LE(deepest + 1, slots);
  EXPECT_EQ(slots, 1024u + 65u);
}

TEST(SegmentDelay, TheDenseTableHoldsEachPathsWholeSegmentsAndZeroWhereNoPathRuns) {
  const RoutingMatrix matrix = RoutingMatrix::make(
      2, 3,
      {make_path(0, 0, {1}, 0, 24000), make_path(1, 0, {1}, 0, 63), make_path(1, 2, {1}, 0, 130)});
  const std::vector<int> table = segment_delay_table(matrix, 64, 4);
  ASSERT_EQ(table.size(), 8u);
  const std::vector<int> want = {375, 0, 0, 0,   // input 0: outputs 0..2, padding
                                 0,   0, 2, 0};  // input 1
  EXPECT_EQ(table, want);
}

}  // namespace
}  // namespace tapstream

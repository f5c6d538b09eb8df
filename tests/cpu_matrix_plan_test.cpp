// The CPU matrix engine's plan (dsp/cpu/cpu_matrix_plan): the work it counts
// for a plan is the work the engine's loops do, counted from first
// principles here (a segment's inverse transforms per output, its products
// per path and partition); a partition forced through
// EngineOptions::cpu.matrix_partition is the one the engine runs, and one
// that is not a power of two in range is refused by name.

#include "dsp/cpu/cpu_matrix_plan.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "dsp/cpu/cpu_matrix_engine.hpp"
#include "tests/matrix_support.hpp"

namespace tapstream {
namespace {

using testing::make_path;
using testing::random_signal;

constexpr double kRate = 48000.0;

// 2 -> 8, every input to every output, paths of `taps` taps delayed by
// delay(input, output) frames.
template <typename Delay>
RoutingMatrix full_matrix(std::size_t taps, Delay delay) {
  std::vector<MatrixPath> paths;
  for (std::size_t o = 0; o < 8; ++o)
    for (std::size_t i = 0; i < 2; ++i)
      paths.push_back(make_path(i, o, random_signal(taps, 40 + 2 * o + i), 0.0, delay(i, o)));
  return RoutingMatrix::make(2, 8, std::move(paths));
}

TEST(CpuMatrixPlan, CountsATransformPerInputAndOutputAndAPartitionOfProductsPerPathASegment) {
  // Calls of 4 segments: each segment is one chunk (the inputs' forward and
  // the outputs' inverse transforms) and one pass of every path's partitions.
  const std::size_t p = 1024, block = 4096;
  const double segments = kRate / double(p), bins = double(p + 1);
  const RoutingMatrix plain = full_matrix(1024, [](std::size_t, std::size_t) { return 0; });
  const CpuMatrixWork w = cpu_matrix_work(CpuMatrixShape::of(plain), block, p, kRate);
  EXPECT_DOUBLE_EQ(w.forward_transforms, 2 * segments);
  EXPECT_DOUBLE_EQ(w.inverse_transforms, 8 * segments);
  EXPECT_DOUBLE_EQ(w.bin_products, 16 * bins * segments);  // one partition a path
  EXPECT_GT(w.model_seconds, 0.0);

  // Delays: a path whose remainder (delay mod P) is not 0 spans two
  // partitions of 1024 taps; one of whole segments reads further back and
  // spans one. The transforms do not change.
  const auto delay = [](std::size_t i, std::size_t o) {
    return i == 0 ? o * 2048 : 100 + o * 3000;
  };
  const RoutingMatrix delayed = full_matrix(1024, delay);
  double partitions = 0;
  for (std::size_t o = 0; o < 8; ++o)
    for (std::size_t i = 0; i < 2; ++i) partitions += delay(i, o) % p == 0 ? 1 : 2;
  const CpuMatrixWork d = cpu_matrix_work(CpuMatrixShape::of(delayed), block, p, kRate);
  EXPECT_DOUBLE_EQ(d.forward_transforms, w.forward_transforms);
  EXPECT_DOUBLE_EQ(d.inverse_transforms, w.inverse_transforms);
  EXPECT_DOUBLE_EQ(d.bin_products, partitions * bins * segments);
  EXPECT_EQ(partitions, 8 + 2 * 8);  // input 0's paths whole segments, input 1's not
}

TEST(CpuMatrixPlan, CountsAChunkOfTransformsAndHeadProductsPerCallWithinASegment) {
  // 64-frame calls in 256-frame partitions: every call transforms and takes
  // the head products of the paths with no whole segment of delay; the rest
  // once a segment.
  const std::size_t p = 256, block = 64, taps = 600;  // 3 partitions a path with no delay
  const RoutingMatrix m = full_matrix(taps, [](std::size_t i, std::size_t o) {
    return i == 0 ? 0 : 256 * (o + 1);  // input 1's paths: whole segments, no head
  });
  const double calls = kRate / double(block), segments = kRate / double(p), bins = double(p + 1);
  const CpuMatrixWork w = cpu_matrix_work(CpuMatrixShape::of(m), block, p, kRate);
  EXPECT_DOUBLE_EQ(w.forward_transforms, 2 * calls);
  EXPECT_DOUBLE_EQ(w.inverse_transforms, 8 * calls);
  // Input 0: a head product a call and 2 tail partitions a segment; input 1:
  // 3 tail partitions a segment.
  EXPECT_DOUBLE_EQ(w.bin_products, 8 * bins * (calls + 2 * segments) + 8 * bins * 3 * segments);
}

TEST(CpuMatrixPlan, AForcedPartitionIsTheOneTheEngineRuns) {
  const RoutingMatrix m = full_matrix(1000, [](std::size_t, std::size_t) { return 0; });
  EngineOptions options;
  options.max_block_frames = 4096;
  const std::size_t chosen = cpu_matrix_partition(CpuMatrixShape::of(m), 4096);
  const std::size_t forced = chosen == 256 ? 512 : 256;
  options.cpu.matrix_partition = forced;
  const auto engine = make_cpu_matrix_engine(m, options);
  EXPECT_NE(engine->description().find(std::to_string(2 * forced) + "-point"), std::string::npos)
      << engine->description();
}

TEST(CpuMatrixPlan, RefusesAForcedPartitionThatIsNotAPowerOfTwoInRange) {
  const RoutingMatrix m = full_matrix(100, [](std::size_t, std::size_t) { return 0; });
  for (const std::size_t bad : {std::size_t(1000), std::size_t(8), std::size_t(131072)}) {
    EngineOptions options;
    options.max_block_frames = 256;
    options.cpu.matrix_partition = bad;
    try {
      make_cpu_matrix_engine(m, options);
      ADD_FAILURE() << "matrix_partition " << bad << " was taken";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("matrix_partition " + std::to_string(bad)),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace tapstream

// The partition plan alone, apart from either engine: every tap covered once,
// every tail deadline met, and the planner following the costs it is given.

#include "dsp/model/partition_plan.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

namespace tapstream {
namespace {

// An FFT-based cost model: a transform pair costs N log N, a partition's
// multiply-accumulate costs its bins; `fft_weight` scales the transforms.
class ModelCosts : public PartitionCostModel {
 public:
  explicit ModelCosts(double fft_weight = 1.0) : fft_weight_(fft_weight) {}
  double head_ns(std::size_t block, std::size_t p, std::size_t count) const override {
    (void)block;
    return fft(p) + mac(p, count);
  }
  double tail_step_ns(std::size_t p, std::size_t count) const override {
    return fft(p) + mac(p, count);
  }

 private:
  double fft(std::size_t p) const {
    const double n = 2.0 * double(p);
    return fft_weight_ * 2.0 * n * std::log2(n);
  }
  static double mac(std::size_t p, std::size_t count) {
    return 4.0 * double(p + 1) * double(count);
  }
  double fft_weight_;
};

TEST(PartitionPlan, EveryPlanCoversEveryTapOnceAndMeetsEveryDeadline) {
  const ModelCosts costs;
  for (std::size_t head : {1u, 16u, 32u, 64u, 128u, 256u, 1024u}) {
    for (std::size_t taps : {1u, 2u, 63u, 64u, 65u, 1000u, 4096u, 65536u, 70001u, 262144u}) {
      SCOPED_TRACE("head " + std::to_string(head) + ", taps " + std::to_string(taps));
      const PartitionPlan plan = plan_partitions(head, taps, costs);
      EXPECT_NO_THROW(plan.validate());
      EXPECT_EQ(plan.segments.front().first_tap, 0u);
      EXPECT_GE(plan.segments.back().end_tap(), taps);
      for (std::size_t i = 1; i < plan.segments.size(); ++i) {
        EXPECT_EQ(plan.segments[i].first_tap, plan.segments[i - 1].end_tap());
        EXPECT_GE(plan.segments[i].slack_frames(), static_cast<long long>(head));
      }
    }
  }
}

TEST(PartitionPlan, LongFiltersAtSmallBlocksGetLongTailPartitions) {
  const PartitionPlan plan = plan_partitions(64, 65536, ModelCosts());
  std::cout << "64-frame calls, 65536 taps: " << plan.describe() << "\n";
  EXPECT_GT(plan.segments.size(), 2u);
  EXPECT_GE(plan.segments.back().partition_frames, 1024u);
  // Far cheaper than the uniform plan of 1024 partitions of 64.
  PartitionPlan uniform;
  uniform.head_frames = 64;
  uniform.taps = 65536;
  uniform.segments = {{64, 1024, 0}};
  uniform.validate();
  EXPECT_LT(plan.cost_ns_per_frame(ModelCosts()) * 4, uniform.cost_ns_per_frame(ModelCosts()));
}

TEST(PartitionPlan, PlannerIsUniformWhenTailsMayNotGrow) {
  const PartitionPlan plan = plan_partitions(128, 8192, ModelCosts(), 128);
  ASSERT_EQ(plan.segments.size(), 1u);
  EXPECT_EQ(plan.segments[0].count, 64u);
}

TEST(PartitionPlan, CostlierTransformsMakeFewerSegments) {
  const PartitionPlan cheap = plan_partitions(64, 65536, ModelCosts(0.1));
  const PartitionPlan dear = plan_partitions(64, 65536, ModelCosts(100.0));
  std::cout << "cheap transforms: " << cheap.describe() << "\ndear transforms: " << dear.describe()
            << "\n";
  EXPECT_LE(dear.segments.size(), cheap.segments.size());
}

// An engine whose tail steps must be spread over at least their own length.
class SpreadCosts : public ModelCosts {
 public:
  std::size_t min_slack_frames(std::size_t p, std::size_t) const override { return p; }
};

TEST(PartitionPlan, EveryTailSegmentGetsTheSlackItsEngineAsksFor) {
  const SpreadCosts costs;
  for (std::size_t head : {32u, 64u, 256u})
    for (std::size_t taps : {4096u, 65536u, 262144u}) {
      const PartitionPlan plan = plan_partitions(head, taps, costs);
      SCOPED_TRACE(plan.describe());
      EXPECT_NO_THROW(plan.validate());
      for (std::size_t i = 1; i < plan.segments.size(); ++i)
        EXPECT_GE(plan.segments[i].slack_frames(),
                  static_cast<long long>(plan.segments[i].partition_frames));
    }
}

TEST(PartitionPlan, ValidateNamesTheBrokenRule) {
  PartitionPlan plan;
  plan.head_frames = 64;
  plan.taps = 1024;
  plan.segments = {{64, 2, 0}, {128, 7, 128}};  // slack 0 < 64
  try {
    plan.validate();
    FAIL() << "a plan with a tail of no slack was accepted";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("slack"), std::string::npos) << e.what();
  }
  plan.segments = {{64, 2, 0}, {128, 7, 192}};  // a gap of 64 taps
  EXPECT_THROW(plan.validate(), std::logic_error);
  plan.segments = {{64, 3, 0}, {128, 6, 192}};  // 960 < 1024 taps
  EXPECT_THROW(plan.validate(), std::logic_error);
  plan.segments = {{64, 3, 0}, {128, 7, 192}};  // 1088 >= 1024, valid
  EXPECT_NO_THROW(plan.validate());
}

TEST(PartitionPlan, RejectsAHeadThatIsNotAPowerOfTwo) {
  EXPECT_THROW(plan_partitions(48, 1000, ModelCosts()), std::invalid_argument);
}

}  // namespace
}  // namespace tapstream

// Tests of LatencyStats: bucket resolution, percentiles against sorted
// samples, windows, and a concurrent writer and reader (run under TSan too).

#include "dsp/realtime/latency_stats.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

namespace tapstream {
namespace {

using std::chrono::nanoseconds;

TEST(LatencyStats, NothingRecordedSummarisesToZero) {
  LatencyStats stats;
  const auto summary = stats.summary();
  EXPECT_EQ(summary.count, 0u);
  EXPECT_EQ(summary.p99_us, 0.0);
  EXPECT_EQ(summary.max_us, 0.0);
}

TEST(LatencyStats, EveryValueFallsInABucketNoWiderThanASixteenthOfIt) {
  const unsigned seed = 4242;
  std::printf("seed %u\n", seed);
  std::mt19937_64 random(seed);
  std::vector<std::uint64_t> values = {0, 1, 15, 16, 17, 31, 32, 33, 1000, (1ull << 40) - 1};
  for (int i = 0; i < 100000; ++i) values.push_back(random() >> (random() % 64));
  for (std::uint64_t v : values) {
    const std::size_t index = LatencyStats::bucket_index(v);
    ASSERT_LT(index, LatencyStats::bucket_count) << v;
    if (v >= (1ull << 41)) continue;  // shares the last bucket
    const std::uint64_t upper = LatencyStats::bucket_upper_ns(index);
    ASSERT_GE(upper, v);
    ASSERT_LE(upper - v, v / 16) << "value " << v << " bucket " << index;
    if (index > 0) {
      ASSERT_LT(LatencyStats::bucket_upper_ns(index - 1), v) << v;
    }
  }
  EXPECT_EQ(LatencyStats::bucket_index(~0ull), LatencyStats::bucket_count - 1);
}

TEST(LatencyStats, PercentilesMatchSortedSamplesWithinBucketResolution) {
  const unsigned seed = 99;
  std::printf("seed %u\n", seed);
  std::mt19937 random(seed);
  std::lognormal_distribution<double> block_time(std::log(50000.0), 0.6);  // ~50 us
  LatencyStats stats;
  std::vector<std::uint64_t> samples;
  double sum = 0;
  for (int i = 0; i < 20000; ++i) {
    const auto ns = static_cast<std::uint64_t>(block_time(random));
    samples.push_back(ns);
    sum += double(ns);
    stats.record(nanoseconds(ns));
  }
  std::sort(samples.begin(), samples.end());
  const auto exact = [&](double q) {  // nearest rank, in microseconds
    const auto rank = static_cast<std::size_t>(std::ceil(q * double(samples.size())));
    return double(samples[std::max<std::size_t>(rank, 1) - 1]) / 1000.0;
  };
  const auto summary = stats.summary();
  EXPECT_EQ(summary.count, samples.size());
  EXPECT_NEAR(summary.mean_us, sum / double(samples.size()) / 1000.0, 1e-6);
  EXPECT_DOUBLE_EQ(summary.max_us, double(samples.back()) / 1000.0);
  const std::pair<double, double> checks[] = {{0.5, summary.p50_us},
                                              {0.9, summary.p90_us},
                                              {0.99, summary.p99_us},
                                              {0.999, summary.p999_us}};
  for (const auto& [q, reported] : checks) {
    EXPECT_GE(reported, exact(q)) << "q " << q;
    EXPECT_LE(reported, exact(q) * (1.0 + 1.0 / 16.0)) << "q " << q;
  }
  std::printf("p50 %.1f p99 %.1f max %.1f us\n", summary.p50_us, summary.p99_us, summary.max_us);
}

TEST(LatencyStats, AWindowSummaryCountsOnlyTheBlocksRecordedInIt) {
  LatencyStats stats;
  for (int i = 0; i < 1000; ++i) stats.record(nanoseconds(1000));
  const auto before = stats.snapshot();
  for (int i = 0; i < 100; ++i) stats.record(nanoseconds(200000));
  const auto window = LatencyStats::summarize(stats.snapshot(), &before);
  EXPECT_EQ(window.count, 100u);
  EXPECT_NEAR(window.p50_us, 200.0, 200.0 / 16);
  EXPECT_NEAR(window.mean_us, 200.0, 1e-9);
  const auto all = stats.summary();
  EXPECT_EQ(all.count, 1100u);
  EXPECT_NEAR(all.p50_us, 1.0, 1.0 / 16);
}

TEST(LatencyStats, AReaderConcurrentWithTheEngineSeesCountsOnlyGrow) {
  LatencyStats stats;
  constexpr int blocks = 200000;
  std::atomic<bool> done{false};
  std::thread engine([&] {
    for (int i = 0; i < blocks; ++i) stats.record(nanoseconds(1000 + i % 5000));
    done.store(true, std::memory_order_release);
  });
  std::uint64_t last = 0;
  int reads = 0;
  while (!done.load(std::memory_order_acquire)) {
    const auto summary = stats.summary();
    ASSERT_GE(summary.count, last);
    if (summary.count > 0) {
      ASSERT_GE(summary.p50_us, 1.0);
      ASSERT_LE(summary.max_us, 6.0 * (1 + 1.0 / 16));
    }
    last = summary.count;
    ++reads;
  }
  engine.join();
  EXPECT_EQ(stats.summary().count, static_cast<std::uint64_t>(blocks));
  std::printf("%d concurrent reads\n", reads);
}

}  // namespace
}  // namespace tapstream

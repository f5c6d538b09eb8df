// The ring of the live pipeline's trace (dsp/realtime/trace_ring.hpp): it keeps
// the newest records, oldest first, and a reader racing the writer gets whole
// records or none, never a torn one.

#include "dsp/realtime/trace_ring.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <thread>

namespace tapstream {
namespace {

TEST(TraceRing, ASnapshotHoldsTheNewestRecordsOldestFirst) {
  TraceRing<2> ring(8);
  for (std::int64_t n = 0; n < 13; ++n) ring.write({n, 10 * n});
  EXPECT_EQ(ring.written(), 13u);
  const auto all = ring.snapshot(100);
  ASSERT_EQ(all.size(), 8u);
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i][0], std::int64_t(5 + i));
    EXPECT_EQ(all[i][1], std::int64_t(10 * (5 + i)));
  }
  const auto newest = ring.snapshot(3);
  ASSERT_EQ(newest.size(), 3u);
  EXPECT_EQ(newest.front()[0], 10);
  EXPECT_EQ(newest.back()[0], 12);
  EXPECT_TRUE(TraceRing<1>(4).snapshot(10).empty());
}

TEST(TraceRing, ACapacityThatIsNotAPowerOfTwoIsRefused) {
  EXPECT_THROW(TraceRing<1>(0), std::invalid_argument);
  EXPECT_THROW(TraceRing<1>(12), std::invalid_argument);
}

TEST(TraceRing, AReaderRacingTheWriterNeverSeesATornRecord) {
  // A small ring, so that the writer laps the reader many times mid-read.
  TraceRing<6> ring(16);
  std::atomic<bool> done{false};
  constexpr std::int64_t records = 400000;
  std::thread writer([&] {
    for (std::int64_t n = 0; n < records; ++n) ring.write({n, n, n, n, n, n});
    done.store(true);
  });
  std::uint64_t seen = 0, snapshots = 0;
  while (!done.load() || snapshots == 0) {
    const auto snapshot = ring.snapshot(16);
    ++snapshots;
    std::int64_t previous = -1;
    for (const auto& record : snapshot) {
      for (const std::int64_t value : record) ASSERT_EQ(value, record[0]) << "a torn record";
      ASSERT_GT(record[0], previous) << "records out of order";
      previous = record[0];
      ++seen;
    }
  }
  writer.join();
  std::printf("%llu snapshots, %llu records read while written\n",
              static_cast<unsigned long long>(snapshots), static_cast<unsigned long long>(seen));
  const auto last = ring.snapshot(16);
  ASSERT_EQ(last.size(), 16u);
  EXPECT_EQ(last.back()[0], records - 1);
}

}  // namespace
}  // namespace tapstream

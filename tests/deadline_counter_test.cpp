// DeadlineCounter: a waiter sees every count the writer publishes (and what
// the writer wrote before it), and gives up at its deadline, never before.

#include "dsp/deadline_counter.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace tapstream {
namespace {

TEST(DeadlineCounter, AWaiterSeesEveryCountAndTheDataWrittenBeforeIt) {
  constexpr std::uint64_t kCounts = 20000;
  DeadlineCounter counter;
  std::vector<std::uint64_t> data(kCounts + 1, 0);  // written by the writer, read after a wait
  std::thread writer([&] {
    for (std::uint64_t i = 1; i <= kCounts; ++i) {
      data[i] = i * 3;
      counter.advance(i);
      if (i % 1000 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  for (std::uint64_t i = 1; i <= kCounts; i += 7) {
    // Half the waits with a deadline far enough away never to pass.
    const timespec far = monotonic_after(std::chrono::seconds(30));
    ASSERT_TRUE(counter.wait_at_least(i, i % 2 ? &far : nullptr)) << "count " << i;
    ASSERT_EQ(data[i], i * 3) << "count " << i;
  }
  writer.join();
  EXPECT_EQ(counter.value(), kCounts);
}

TEST(DeadlineCounter, AWaitGivesUpAtItsDeadlineAndNotBefore) {
  DeadlineCounter counter;
  counter.advance(4);
  const timespec past = monotonic_after(std::chrono::nanoseconds(0));
  EXPECT_TRUE(counter.wait_at_least(4, &past)) << "reached already: true even past the deadline";
  EXPECT_FALSE(counter.wait_at_least(5, &past));
  const auto started = std::chrono::steady_clock::now();
  const timespec soon = monotonic_after(std::chrono::milliseconds(20));
  EXPECT_FALSE(counter.wait_at_least(5, &soon));
  const auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_GE(waited, std::chrono::milliseconds(19));
  EXPECT_LT(waited, std::chrono::seconds(5)) << "the deadline bounds the wait";
}

TEST(DeadlineCounter, AnAdvanceWakesASleepingWaiterBeforeItsDeadline) {
  DeadlineCounter counter;
  std::atomic<bool> waiting{false};
  std::thread writer([&] {
    while (!waiting.load()) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the waiter is asleep by now
    counter.advance(1);
  });
  waiting.store(true);
  const auto started = std::chrono::steady_clock::now();
  const timespec deadline = monotonic_after(std::chrono::seconds(30));
  EXPECT_TRUE(counter.wait_at_least(1, &deadline));
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
  writer.join();
}

}  // namespace
}  // namespace tapstream

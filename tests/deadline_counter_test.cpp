// DeadlineCounter: a waiter sees every count the writer publishes (and what
// the writer wrote before it), and gives up at its deadline, never before.

#include "dsp/realtime/deadline_counter.hpp"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "tests/process_support.hpp"
#include "tests/wait_for.hpp"

namespace tapstream {
namespace {

// The scheduler state of thread `tid` of this process (R running, S asleep,
// ...), from /proc; '?' if it cannot be read.
char thread_state(pid_t tid) {
  const std::string stat = testing::read_text("/proc/self/task/" + std::to_string(tid) + "/stat");
  const auto name_end = stat.rfind(')');  // the name may hold spaces and parentheses
  return name_end == std::string::npos || name_end + 2 >= stat.size() ? '?' : stat[name_end + 2];
}

TEST(DeadlineCounter, AWaiterSeesEveryCountAndTheDataWrittenBeforeIt) {
  constexpr std::uint64_t kCounts = 20000;
  DeadlineCounter counter;
  std::vector<std::uint64_t> data(kCounts + 1, 0);  // written by the writer, read after a wait
  std::thread writer([&] {
    for (std::uint64_t i = 1; i <= kCounts; ++i) {
      data[i] = i * 3;
      counter.advance(i);
      // Not a wait: pauses now and then, so that the waiter also falls
      // asleep (the futex path) rather than always finding its count reached.
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
  const pid_t waiter = static_cast<pid_t>(::syscall(SYS_gettid));
  std::thread writer([&] {
    while (!waiting.load()) std::this_thread::yield();
    // Advance only once the waiter sleeps (the kernel says so), so the
    // advance must wake it.
    EXPECT_TRUE(testing::wait_until(
        testing::long_wait, [&] { return thread_state(waiter) == 'S'; },
        [&] { return std::string("waiter state ") + thread_state(waiter); },
        std::chrono::microseconds(200)));
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

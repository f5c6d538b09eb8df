// wait_until (tests/wait_for.hpp), the one wait of the suites: a condition
// that holds returns at once, one that comes true is seen soon after, and one
// that never does fails at the deadline saying what was seen.

#include "tests/wait_for.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace tapstream {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

TEST(WaitUntil, AConditionThatHoldsReturnsAtOnceWithoutPolling) {
  int checks = 0;
  const auto started = Clock::now();
  EXPECT_TRUE(testing::wait_until(
      30s,
      [&] {
        ++checks;
        return true;
      },
      "true"));
  EXPECT_EQ(checks, 1);
  EXPECT_LT(Clock::now() - started, 1s);
}

TEST(WaitUntil, AConditionThatComesTrueOnAnotherThreadIsSeen) {
  std::atomic<bool> done{false};
  std::thread setter([&] {
    // The stimulus, not a wait: the condition comes true a little later.
    std::this_thread::sleep_for(20ms);
    done.store(true);
  });
  EXPECT_TRUE(testing::wait_until(
      testing::long_wait, [&] { return done.load(); }, "done"));
  setter.join();
}

TEST(WaitUntil, AConditionThatNeverHoldsFailsAtTheDeadlineSayingWhatWasSeen) {
  int seen = 0;
  const auto started = Clock::now();
  const ::testing::AssertionResult result = testing::wait_until(
      100ms,
      [&] {
        ++seen;
        return false;
      },
      [&] { return "checked " + std::to_string(seen) + " times"; }, 1ms);
  const auto waited = Clock::now() - started;
  EXPECT_FALSE(result);
  EXPECT_GE(waited, 100ms);
  EXPECT_LT(waited, 10s);
  EXPECT_GT(seen, 1) << "polled";
  const std::string message = result.message();
  EXPECT_NE(message.find("did not hold within 0.1 s"), std::string::npos) << message;
  EXPECT_NE(message.find("checked " + std::to_string(seen) + " times"), std::string::npos)
      << message;
}

}  // namespace
}  // namespace tapstream

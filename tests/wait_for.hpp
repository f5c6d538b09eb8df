#pragma once
// Waiting in tests: every wait is for a condition, with a deadline. A test
// never sleeps for a fixed time and hopes that what it needs has happened by
// then (a loaded machine makes any such time too short); it polls the log,
// the status, the port list or the file until the condition holds, and fails
// at a generous deadline saying what it saw. A condition that holds at once
// costs one check; only a failing test waits out the deadline.
//
//   ASSERT_TRUE(wait_until(long_wait, [&] { return log_has("ready"); },
//                          [&] { return read_text(log); }));

#include <gtest/gtest.h>

#include <chrono>
#include <concepts>
#include <iomanip>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

namespace tapstream::testing {

// The deadline for conditions that hold within milliseconds on an idle
// machine: generous enough for a 2-core machine that four builds load.
inline constexpr std::chrono::seconds long_wait{30};

// Polls `condition` every `poll` until it returns true (success), or until
// `timeout` has passed (failure: "the condition did not hold within T s;
// seen: <describe()>"). `describe` returns what the test saw (a log, a
// counter) as text. Use through ASSERT_TRUE / EXPECT_TRUE.
template <class Condition, std::invocable Describe>
::testing::AssertionResult wait_until(
    std::chrono::steady_clock::duration timeout, Condition&& condition, Describe&& describe,
    std::chrono::microseconds poll = std::chrono::milliseconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::ostringstream seconds;
      seconds << std::setprecision(3) << std::chrono::duration<double>(timeout).count();
      return ::testing::AssertionFailure()
             << "the condition did not hold within " << seconds.str() << " s; seen: " << describe();
    }
    // Polling: the one sleep of a wait, between two checks of its condition.
    std::this_thread::sleep_for(poll);
  }
  return ::testing::AssertionSuccess();
}

// wait_until with nothing to describe but what was awaited.
template <class Condition>
::testing::AssertionResult wait_until(
    std::chrono::steady_clock::duration timeout, Condition&& condition, const std::string& what,
    std::chrono::microseconds poll = std::chrono::milliseconds(5)) {
  return wait_until(
      timeout, std::forward<Condition>(condition), [&] { return "not yet: " + what; }, poll);
}

}  // namespace tapstream::testing

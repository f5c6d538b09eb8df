// The one rule for following a served thread's priority (dsp/realtime/thread_priority.hpp):
// helpers go just below it by rank, within their ceiling, never below 1; the
// served thread's priority is read with system calls that see a change the
// thread made to itself.

#include "dsp/realtime/thread_priority.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <thread>

namespace tapstream {
namespace {

TEST(ThreadPriority, HelpersRunJustBelowTheServedThreadByRankWithinTheirCeiling) {
  EXPECT_EQ(priority_below(80, 0, 99), 79);
  EXPECT_EQ(priority_below(80, 2, 99), 77);
  EXPECT_EQ(priority_below(80, 0, 60), 60) << "never above the helper's own ceiling";
  EXPECT_EQ(priority_below(2, 5, 60), 1) << "never below 1 (SCHED_FIFO's lowest)";
  EXPECT_EQ(priority_below(1, 0, 60), 1);
}

TEST(ThreadPriority, AThreadReadsItsOwnRealtimePriorityAndSeesItChange) {
  int before = -1, after = -1;
  bool granted = false;
  std::thread served([&] {
    before = own_realtime_priority();
    sched_param param{};
    param.sched_priority = 7;
    granted = pthread_setschedparam(pthread_self(), SCHED_FIFO, &param) == 0;
    after = own_realtime_priority();
  });
  served.join();
  EXPECT_EQ(before, 0) << "a new thread of this test runs at normal priority";
  if (!granted) GTEST_SKIP() << "SCHED_FIFO refused here (no rtprio): the change is not seen";
  EXPECT_EQ(after, 7);
}

TEST(ThreadPriority, AThreadRaisesItselfToTheAskedPriorityOrGetsTheRefusalsErrno) {
  int before = -1, error = -1, after = -1;
  std::thread callback([&] {
    before = own_realtime_priority();
    error = raise_own_priority(11);
    after = own_realtime_priority();
  });
  callback.join();
  EXPECT_EQ(before, 0);
  if (error != 0) {
    EXPECT_EQ(error, EPERM);
    EXPECT_EQ(after, 0) << "refused: the thread keeps its normal priority";
    GTEST_SKIP() << "SCHED_FIFO refused here (no rtprio): only the refusal was checked";
  }
  EXPECT_EQ(after, 11);
}

}  // namespace
}  // namespace tapstream

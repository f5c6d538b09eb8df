#pragma once
// What each thread of tapstream is, told to the system:
// - a name (at most 15 characters, "ts-" and its role), so that `top -H`, a
//   debugger and the load test's per-thread counters (bench/load-test-files.py)
//   say which thread was preempted or faulted;
// - for the threads that serve no deadline (the control plane, the file
//   watcher, the preparation of new filters), SCHED_BATCH at nice 10: the
//   scheduler then never preempts a running thread to run them at wake-up, so
//   a ctl request or a swap's preparation does not push the engine thread or
//   a device callback off its CPU on a machine that refuses real-time
//   priorities (the engine thread then runs at normal priority too).
// Both are best effort: a refusal changes nothing else.

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>

namespace tapstream {

inline void name_this_thread(const char* name) noexcept {
  char truncated[16] = {};
  std::strncpy(truncated, name, sizeof truncated - 1);
  pthread_setname_np(pthread_self(), truncated);
}

inline void make_this_thread_background() noexcept {
  sched_param param{};
  param.sched_priority = 0;
  sched_setscheduler(0, SCHED_BATCH, &param);
  setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
}

}  // namespace tapstream

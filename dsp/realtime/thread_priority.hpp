#pragma once
// One rule for a thread that serves another thread's deadlines: the live
// pipeline's engine thread serves the device callback (daemon/pipeline/
// live_pipeline), the non-uniform CPU engine's tail workers serve their caller
// (dsp/cpu/cpu_nonuniform_engine).
//
// - The served thread reads its own priority, with raw system calls on thread
//   0 (sched_getscheduler, sched_getparam: no glibc lock, no allocation, so an
//   audio callback may do it), on its first call and again every
//   kPriorityRereadCalls calls: a thread may change its own priority (JACK's
//   process thread after a server restart), and a system call per thousand
//   periods costs nothing.
// - A helper of rank r (0: the nearest; the engine's tails by partition
//   length, rate-monotonic) runs at SCHED_FIFO priority served - 1 - r, at
//   least 1 and never above its own ceiling (the pipeline's realtime_priority),
//   so the served thread never waits for it.
// - A served thread that is not real-time is not followed: the helper keeps
//   its own scheduling (the pipeline's engine thread its SCHED_FIFO
//   realtime_priority, which a buffered stream needs whatever the device's
//   callback runs at; the engine's workers their niceness below the caller).
// - A served thread that does the engine's work itself (the device callback
//   with the engine inside it) is owed what the engine thread would have had:
//   when it is not real-time (a JACK server without -R, PortAudio's ALSA
//   thread), it raises itself to SCHED_FIFO realtime_priority with
//   raise_own_priority(), on its first call; a thread the device made
//   real-time keeps the device's priority.
//
// The priority is read with system calls, not pthread_getschedparam, which
// takes glibc's per-thread lock: a callback must never wait on a lock.

#include <errno.h>
#include <sched.h>

#include <algorithm>

namespace tapstream {

inline constexpr unsigned kPriorityRereadCalls = 1024;

// The calling thread's SCHED_FIFO or SCHED_RR priority; 0 when it is not
// real-time or the priority cannot be read. Safe in an audio callback.
inline int own_realtime_priority() noexcept {
  const int policy = sched_getscheduler(0);
  sched_param param{};
  if (policy < 0 || sched_getparam(0, &param) != 0) return 0;
  return policy == SCHED_FIFO || policy == SCHED_RR ? param.sched_priority : 0;
}

// Makes the calling thread SCHED_FIFO at `priority` with one system call on
// thread 0 (sched_setscheduler: no glibc lock, no allocation, so an audio
// callback may do it); 0 when granted, else the errno (EPERM without rtprio).
inline int raise_own_priority(int priority) noexcept {
  sched_param param{};
  param.sched_priority = priority;
  return sched_setscheduler(0, SCHED_FIFO, &param) == 0 ? 0 : errno;
}

// The SCHED_FIFO priority of the helper of `rank` serving a real-time thread
// at `served` (> 0), never above `ceiling`, at least 1.
inline int priority_below(int served, int rank, int ceiling) noexcept {
  return std::clamp(served - 1 - rank, 1, std::max(1, ceiling));
}

}  // namespace tapstream

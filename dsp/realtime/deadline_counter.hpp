#pragma once
// A count of finished jobs that a waiter may give up on at a deadline: the
// audio callback waits for a tail partition of the CPU engine only until its
// period's deadline (std::atomic::wait has no timeout).
//
// Threads: one writer (a worker) calls advance(), or any number of writers
// call add() (the CPU worker pool's threads, each counting its finished
// tasks); any thread may read value() or wait. No lock, no allocation: the
// 64-bit count, and a 32-bit futex word bumped after it that waiters sleep on
// (FUTEX_WAIT_BITSET, absolute CLOCK_MONOTONIC timeout).
//
// Why the orderings suffice: advance() stores the count with release, so a
// waiter whose acquire load sees it also sees everything the worker wrote
// before (the job's output); each add() is a release read-modify-write that
// heads a release sequence every later add() continues, so a waiter that
// sees a count sees what every writer wrote before reaching it. No lost
// wake-up: the writer bumps `word_` and then reads `waiters_`, a waiter
// raises `waiters_` and then reads `word_`, all seq_cst, so either the writer
// sees the waiter (and wakes it) or the waiter reads the bumped word (and the
// kernel's compare in FUTEX_WAIT returns at once, or the count check before
// it succeeds). Spurious wake-ups only make the loop look again.

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>

namespace tapstream {

// The absolute CLOCK_MONOTONIC time `delay` from now: the deadline that
// DeadlineCounter::wait_at_least() and sem_clockwait() take.
inline timespec monotonic_after(std::chrono::nanoseconds delay) noexcept {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  const long long ns = t.tv_nsec + delay.count();
  t.tv_sec += static_cast<time_t>(ns / 1'000'000'000);
  t.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return t;
}

class DeadlineCounter {
 public:
  std::uint64_t value() const noexcept { return value_.load(std::memory_order_acquire); }

  // Writer only: publishes `value` (>= the current one) and wakes waiters.
  void advance(std::uint64_t value) noexcept {
    value_.store(value, std::memory_order_release);
    word_.fetch_add(1, std::memory_order_seq_cst);
    if (waiters_.load(std::memory_order_seq_cst) != 0) {
      syscall(SYS_futex, word_address(), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
    }
  }

  // Any number of writers: adds `n` to the count and wakes waiters.
  void add(std::uint64_t n) noexcept {
    value_.fetch_add(n, std::memory_order_acq_rel);
    word_.fetch_add(1, std::memory_order_seq_cst);
    if (waiters_.load(std::memory_order_seq_cst) != 0) {
      syscall(SYS_futex, word_address(), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
    }
  }

  // Waits until value() >= target; true then. With a deadline (absolute,
  // CLOCK_MONOTONIC), gives up once it has passed and returns false.
  bool wait_at_least(std::uint64_t target, const timespec* deadline = nullptr) const noexcept {
    // A job is often microseconds from done: look a few times before sleeping.
    for (int i = 0; i < 256; ++i) {
      if (value() >= target) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    bool reached = false;
    for (;;) {
      const std::uint32_t word = word_.load(std::memory_order_seq_cst);
      if (value() >= target) {
        reached = true;
        break;
      }
      const long result = syscall(SYS_futex, word_address(), FUTEX_WAIT_BITSET_PRIVATE, word,
                                  deadline, nullptr, FUTEX_BITSET_MATCH_ANY);
      if (result != 0 && errno == ETIMEDOUT) {
        reached = value() >= target;
        break;
      }
    }
    waiters_.fetch_sub(1, std::memory_order_seq_cst);
    return reached;
  }

 private:
  std::uint32_t* word_address() const noexcept {
    static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
    return reinterpret_cast<std::uint32_t*>(const_cast<std::atomic<std::uint32_t>*>(&word_));
  }

  std::atomic<std::uint64_t> value_{0};
  std::atomic<std::uint32_t> word_{0};
  mutable std::atomic<std::uint32_t> waiters_{0};
};

}  // namespace tapstream

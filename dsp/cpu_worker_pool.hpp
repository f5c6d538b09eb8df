#pragma once
// A fixed set of threads that run one job, split by index, and return when all
// parts are done: the CPU engine's way to filter channels on several cores.
//
// Threads and ordering: run() is called by one thread at a time (the engine's
// caller, per the Engine contract). It publishes the job (fn_, ctx_,
// remaining_) with plain and relaxed stores, then bumps generation_ with
// release; a worker that sees the new generation with acquire therefore sees
// the job. Each worker ends its part with a release decrement of remaining_,
// and run() returns only after an acquire load reads zero, so everything the
// workers wrote (their channels' output and state) is visible to the caller
// afterwards. The next job is published only after that, so workers never see
// a half-written job. Waiting spins briefly (kSpin), then uses C++20 atomic
// wait/notify (a futex on Linux): no locks, no allocation per job. The spin
// matters: waking a sleeping thread costs tens of microseconds on a virtual
// machine (its idle vCPU must be woken first), as much as a large block's
// work, while the calls of an offline job follow each other within
// microseconds, so a worker that spins a little is still awake for the next.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace tapstream {

class WorkerPool {
 public:
  // `workers` threads besides the caller (0: run() just calls the job).
  explicit WorkerPool(std::size_t workers) {
    threads_.reserve(workers);
    for (std::size_t i = 0; i < workers; ++i) threads_.emplace_back([this, i] { loop(i + 1); });
  }
  ~WorkerPool() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& t : threads_) t.join();
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // The caller plus the workers.
  std::size_t threads() const { return threads_.size() + 1; }

  // Calls job(i) for every i in [0, threads()): 0 on the caller, the others on
  // the workers; returns when all have returned. job must not throw.
  template <class Job>
  void run(Job& job) {
    if (threads_.empty()) {
      job(std::size_t{0});
      return;
    }
    fn_ = [](void* ctx, std::size_t i) { (*static_cast<Job*>(ctx))(i); };
    ctx_ = &job;
    remaining_.store(threads_.size(), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    job(std::size_t{0});
    spin_until([&] { return remaining_.load(std::memory_order_acquire) == 0; });
    for (std::size_t left; (left = remaining_.load(std::memory_order_acquire)) != 0;) {
      remaining_.wait(left, std::memory_order_acquire);
    }
  }

 private:
  static constexpr std::chrono::microseconds kSpin{200};

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  // Spins until done() or kSpin has passed; true when done.
  template <class Done>
  static bool spin_until(Done done) {
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (done()) return true;
        pause();
      }
      if (std::chrono::steady_clock::now() >= until) return false;
    }
  }

  void loop(std::size_t index) {
    std::uint64_t seen = 0;
    for (;;) {
      spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
      generation_.wait(seen, std::memory_order_acquire);
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_relaxed)) return;
      fn_(ctx_, index);
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining_.notify_one();
    }
  }

  std::vector<std::thread> threads_;
  void (*fn_)(void*, std::size_t) = nullptr;
  void* ctx_ = nullptr;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<std::size_t> remaining_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace tapstream

#pragma once
// A fixed set of threads that help the caller run the tasks of one job (the CPU
// engine's channels) and return when all are done.
//
// Tasks are claimed, not assigned: the caller and every awake worker take the
// next unclaimed task until none is left, then the caller waits only for tasks
// that a worker has already claimed. A worker that is asleep or not scheduled
// (a busy machine) therefore never delays a job: the caller does its share.
// Workers spin briefly (kSpin, yielding the core to anyone who wants it)
// before sleeping, because waking a sleeping thread costs tens of microseconds
// on a virtual machine, as much as a large block's work.
//
// Threads and ordering: run() is called by one thread at a time (the engine's
// caller, per the Engine contract). It writes the job (fn_, ctx_, tasks_,
// done_) and then publishes it with a release store of claim_, whose upper 32
// bits are the job's generation and lower 32 bits the next unclaimed task. A
// thread claims a task with a compare-exchange (acquire) that also checks the
// generation, so it only ever runs tasks of the job whose fields it has seen,
// and a late worker cannot touch a finished job. Finishing a task is a release
// increment of done_; run() returns after an acquire load sees all tasks done,
// so every write of every task is visible to the caller, and only then may the
// next job overwrite the fields. Sleeping uses C++20 atomic wait/notify on
// wake_ (a futex on Linux): no locks, no allocation per job.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace tapstream {

class WorkerPool {
 public:
  // `workers` threads besides the caller (0: run() does everything itself).
  explicit WorkerPool(std::size_t workers) {
    threads_.reserve(workers);
    for (std::size_t i = 0; i < workers; ++i) threads_.emplace_back([this, i] { loop(i + 1); });
  }
  ~WorkerPool() {
    stop_.store(true, std::memory_order_relaxed);
    wake_.fetch_add(1, std::memory_order_release);
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // The caller plus the workers: thread indices passed to jobs are below this.
  std::size_t threads() const { return threads_.size() + 1; }

  // Calls job(task, thread) once for every task in [0, tasks), on the caller
  // (thread 0) and whichever workers are awake (threads 1..); returns when all
  // have returned. A thread runs one task at a time. job must not throw.
  template <class Job>
  void run(Job& job, std::size_t tasks) {
    if (threads_.empty() || tasks <= 1) {
      for (std::size_t t = 0; t < tasks; ++t) job(t, std::size_t{0});
      return;
    }
    fn_ = [](void* ctx, std::size_t task, std::size_t thread) {
      (*static_cast<Job*>(ctx))(task, thread);
    };
    ctx_ = &job;
    tasks_.store(tasks, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    const std::uint64_t generation = ++generation_ & 0xffffffffu;
    claim_.store(generation << 32, std::memory_order_release);
    wake_.fetch_add(1, std::memory_order_release);
    wake_.notify_all();
    work(generation, 0);
    spin_until([&] { return done_.load(std::memory_order_acquire) == tasks; });
    for (std::size_t d; (d = done_.load(std::memory_order_acquire)) != tasks;) {
      done_.wait(d, std::memory_order_acquire);
    }
  }

 private:
  static constexpr std::chrono::microseconds kSpin{200};

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  // Spins until done() or kSpin has passed, yielding the core between rounds;
  // true when done.
  template <class Done>
  static bool spin_until(Done done) {
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (done()) return true;
        pause();
      }
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::yield();
    }
  }

  // Claims and runs tasks of job `generation` until none is left.
  void work(std::uint64_t generation, std::size_t thread) {
    std::uint64_t claim = claim_.load(std::memory_order_acquire);
    for (;;) {
      if ((claim >> 32) != generation) return;  // a later job: not ours to touch
      const std::uint64_t task = claim & 0xffffffffu;
      if (task >= tasks_.load(std::memory_order_relaxed)) return;
      if (!claim_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        continue;  // claim now holds the current value
      }
      fn_(ctx_, std::size_t(task), thread);
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 ==
          tasks_.load(std::memory_order_relaxed)) {
        done_.notify_one();
      }
      claim = claim_.load(std::memory_order_acquire);
    }
  }

  void loop(std::size_t thread) {
    std::uint64_t seen = 0;
    for (;;) {
      spin_until([&] { return wake_.load(std::memory_order_acquire) != seen; });
      wake_.wait(seen, std::memory_order_acquire);
      seen = wake_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_relaxed)) return;
      work(claim_.load(std::memory_order_acquire) >> 32, thread);
    }
  }

  std::vector<std::thread> threads_;
  void (*fn_)(void*, std::size_t, std::size_t) = nullptr;
  void* ctx_ = nullptr;
  std::uint64_t generation_ = 0;  // the caller's count of jobs
  std::atomic<std::size_t> tasks_{0};
  std::atomic<std::uint64_t> claim_{0};  // generation << 32 | next unclaimed task
  std::atomic<std::size_t> done_{0};
  std::atomic<std::uint64_t> wake_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace tapstream

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
// In an audio callback (run_by(), the non-uniform engine's in-call head) the
// caller waits for the workers' claimed tasks only until its deadline: a
// worker preempted in the middle of a task then leaves the job in flight, and
// the caller must see idle_by() true before it starts another job or touches
// what the job's tasks use. Nothing here locks or allocates per job.
//
// Threads and ordering: run() and run_by() are called by one thread at a time
// (the engine's caller, per the Engine contract). It writes the job (fn_,
// ctx_, tasks_) and then publishes it with a release store of claim_, whose
// upper 32 bits are the job's generation and lower 32 bits the next unclaimed
// task. A thread claims a task with a compare-exchange (acquire) that also
// checks the generation, so it only ever runs tasks of the job whose fields it
// has seen, and a late worker cannot touch a finished job. Finishing a task
// adds one to done_ (a DeadlineCounter: a release read-modify-write, and a
// futex wake only when someone sleeps on it), which counts the tasks of every
// job so far; the caller's job is over once an acquire load of done_ reaches
// job_end_, so every write of every task is visible to the caller, and only
// then may the next job overwrite the fields. Workers sleep with C++20 atomic
// wait/notify on wake_ (a futex on Linux).

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "dsp/realtime/deadline_counter.hpp"

namespace tapstream {

class WorkerPool {
 public:
  // `workers` threads besides the caller (0: run() does everything itself).
  explicit WorkerPool(std::size_t workers) : thread_ids_(workers) {
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

  // The kernel's id of worker `worker` (0 .. threads() - 2), for setting its
  // scheduling; 0 until the thread has started.
  int thread_id(std::size_t worker) const {
    return thread_ids_[worker].load(std::memory_order_acquire);
  }

  // Calls job(task, thread) once for every task in [0, tasks), on the caller
  // (thread 0) and whichever workers are awake (threads 1..); returns when all
  // have returned. A thread runs one task at a time. job must not throw.
  template <class Job>
  void run(Job& job, std::size_t tasks) {
    idle_by(nullptr);
    run_by(job, tasks, nullptr);
  }

  // run(), waiting for tasks the workers claimed only until `deadline`
  // (absolute, CLOCK_MONOTONIC; null: as long as it takes). False when some
  // were still running then: the job is in flight and `job` must outlive it.
  // Only when no job is in flight (idle_by() true).
  template <class Job>
  bool run_by(Job& job, std::size_t tasks, const timespec* deadline) {
    if (threads_.empty() || tasks <= 1) {
      for (std::size_t t = 0; t < tasks; ++t) job(t, std::size_t{0});
      return true;
    }
    fn_ = [](void* ctx, std::size_t task, std::size_t thread) {
      (*static_cast<Job*>(ctx))(task, thread);
    };
    ctx_ = &job;
    tasks_.store(tasks, std::memory_order_relaxed);
    job_end_ += tasks;
    const std::uint64_t generation = ++generation_ & 0xffffffffu;
    claim_.store(generation << 32, std::memory_order_release);
    wake_.fetch_add(1, std::memory_order_release);
    wake_.notify_all();
    work(generation, 0);
    return idle_by(deadline);
  }

  // Waits until the last job's tasks are all done, or until `deadline`
  // (null: no limit); true when they are (every write of theirs visible).
  bool idle_by(const timespec* deadline) {
    const auto done = [&] { return done_.value() >= job_end_; };
    if (done()) return true;
    auto until = std::chrono::steady_clock::now() + kSpin;
    if (deadline != nullptr) {
      // steady_clock is CLOCK_MONOTONIC (libstdc++ on Linux), the deadline's clock.
      until = std::min(until, std::chrono::steady_clock::time_point(
                                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::seconds(deadline->tv_sec) +
                                      std::chrono::nanoseconds(deadline->tv_nsec))));
    }
    if (spin_until(done, until)) return true;
    return done_.wait_at_least(job_end_, deadline);
  }

 private:
  static constexpr std::chrono::microseconds kSpin{200};

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  // Spins until done() or `until`, yielding the core between rounds; true
  // when done.
  template <class Done>
  static bool spin_until(Done done, std::chrono::steady_clock::time_point until) {
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
      done_.add(1);
      claim = claim_.load(std::memory_order_acquire);
    }
  }

  void loop(std::size_t thread) {
    thread_ids_[thread - 1].store(int(gettid()), std::memory_order_release);
    std::uint64_t seen = 0;
    for (;;) {
      spin_until([&] { return wake_.load(std::memory_order_acquire) != seen; },
                 std::chrono::steady_clock::now() + kSpin);
      wake_.wait(seen, std::memory_order_acquire);
      seen = wake_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_relaxed)) return;
      work(claim_.load(std::memory_order_acquire) >> 32, thread);
    }
  }

  std::vector<std::atomic<int>> thread_ids_;  // per worker, written by it
  std::vector<std::thread> threads_;
  void (*fn_)(void*, std::size_t, std::size_t) = nullptr;
  void* ctx_ = nullptr;
  std::uint64_t generation_ = 0;  // the caller's count of jobs
  std::atomic<std::size_t> tasks_{0};
  std::atomic<std::uint64_t> claim_{0};  // generation << 32 | next unclaimed task
  std::uint64_t job_end_ = 0;            // the caller's: tasks of all jobs so far
  DeadlineCounter done_;                 // tasks finished, all jobs so far
  std::atomic<std::uint64_t> wake_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace tapstream

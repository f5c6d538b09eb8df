#pragma once
// Host side of the persistent direct-form kernel (launch_persistent_tuned in
// kernels/device/direct_kernels): launched once, it filters call after call of a
// small streaming block with no launch per call; the host rings a doorbell
// in mapped pinned memory and spins on the word the kernel answers in.
//
// Threads and memory ordering: one host thread (the engine's caller) writes
// the control block's doorbell and stop words and reads done; the kernel
// reads the first two and writes done. The host's input is written before
// the doorbell's release store; the kernel's block 0 polls the doorbell and,
// once it changed, fences (acquire, system scope) before relaying it to the
// other blocks in device memory, which fence likewise before they read the
// input. The kernel fences its outputs at system scope before its release
// store of done, and the host reads done with an acquire load before it
// reads them. done is final only once the kernel has returned: after a
// relaunch only the new launch's answer counts.
//
// Never hangs: the kernel returns when no call comes within the idle timeout
// (a call after half that pause relaunches it first), and a call
// that gets no answer in 50 ms is served again by a fresh launch, then given
// up (call() returns false and the caller filters the call another way).
// While it runs it holds its blocks' multiprocessors, and other processes on
// the GPU share time with it (time slicing between contexts). While calls keep
// coming it does not return, so a device-wide synchronisation (cudaFree,
// cudaDeviceSynchronize) on another thread would wait for the stream to
// pause: the engine stops it before any of its own (swaps, reset, large
// calls), and in tapstream all CUDA work of an engine runs on its caller's
// thread.

#include <chrono>
#include <string>
#include <vector>

#include "kernels/cuda_resources.hpp"
#include "kernels/device/direct_kernels.hpp"

namespace tapstream::cuda {

class PersistentDirect {
 public:
  // What a measurement or a test may change (EngineOptions::cuda).
  struct Diagnostics {
    // How long a call waits for the answer before a fresh launch serves it
    // (EngineOptions::cuda.persistent_answer says why its default).
    std::chrono::nanoseconds answer_timeout{};
    bool trace = false;   // record per-call times (description() reports them)
    int input_loads = 2;  // PersistentArgs::input_loads
  };

  // `priority`: the kernel's stream priority; `idle_timeout`: how long the
  // kernel waits for a call before it returns (the next call relaunches it).
  PersistentDirect(int priority, std::chrono::nanoseconds idle_timeout,
                   const Diagnostics& diagnostics);
  ~PersistentDirect();
  PersistentDirect(const PersistentDirect&) = delete;
  PersistentDirect& operator=(const PersistentDirect&) = delete;

  bool running() const { return running_; }

  // Launches the kernel for `args` (the mapped staging, the taps, the history
  // layout; args.frames the most frames a call may have) on its own stream,
  // after the work recorded in `after`. history[h] is read by calls of
  // history index h, which carry into history[1 - h].
  void start(const DirectArgs& args, const PersistentShape& shape, float* history0, float* history1,
             const Event& after);

  // Filters one call of `frames` frames (input in the mapped staging, in
  // `planar` or interleaved layout) and waits for its output. False when the
  // kernel did not answer even after a relaunch: the call is not done and the
  // kernel is stopped.
  bool call(int frames, bool planar, int history_index);

  // Asks the kernel to return and waits for it (and for its last carry).
  void stop();

  // e.g. "persistent kernel, 8 blocks x 256 threads".
  std::string description() const;

 private:
  bool wait_for_answer(unsigned seq, std::chrono::steady_clock::time_point deadline);
  void launch(unsigned served);

  Stream stream_;
  PinnedBuffer<PersistentControl> control_;
  DeviceBuffer<unsigned int> counters_;
  PersistentArgs args_;
  PersistentShape shape_;
  std::chrono::nanoseconds idle_timeout_;
  Diagnostics diagnostics_;
  unsigned int seq_ = 0;  // the last call rung (and answered, between calls)
  std::chrono::steady_clock::time_point last_active_;  // the last launch or answer
  // Diagnostics::trace: per answered call, the kernel's times
  // (us after block 0 saw the doorbell) and the host's ring-to-answer time.
  std::vector<double> traced_[5];
  bool running_ = false;
};

}  // namespace tapstream::cuda

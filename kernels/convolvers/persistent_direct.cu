// Host side of the persistent direct-form kernel (see persistent_direct.hpp).

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "kernels/convolvers/persistent_direct.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tapstream::cuda {

namespace {

// Spins between looks at the clock, and at whether the kernel has returned.
constexpr unsigned kSpinsPerClock = 16;
constexpr unsigned kSpinsPerCheck = 256;

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

}  // namespace

PersistentDirect::PersistentDirect(int priority, std::chrono::nanoseconds idle_timeout,
                                   const Diagnostics& diagnostics)
    : stream_(priority),
      control_(1, /*mapped=*/true),
      counters_(4),
      idle_timeout_(idle_timeout),
      diagnostics_(diagnostics) {
  std::construct_at(control_.get());  // zero words in the fresh page-locked memory
}

PersistentDirect::~PersistentDirect() {
  try {
    stop();
  } catch (...) {
    // A device error at teardown cannot be handled here; the stream's
    // destructor still releases it.
  }
}

void PersistentDirect::start(const DirectArgs& args, const PersistentShape& shape, float* history0,
                             float* history1, const Event& after) {
  stop();
  args_ = PersistentArgs{};
  args_.direct = args;
  args_.history[0] = history0;
  args_.history[1] = history1;
  args_.control = control_.device_pointer();
  args_.counters = counters_.get();
  args_.idle_timeout_ns = idle_timeout_.count();
  args_.trace = diagnostics_.trace;
  args_.input_loads = diagnostics_.input_loads;
  shape_ = shape;
  after.wait_on(stream_.get());
  launch(seq_);
}

void PersistentDirect::launch(unsigned served) {
  args_.served = served;
  counters_.zero(stream_.get());
  launch_persistent_tuned(args_, shape_, stream_.get());
  running_ = true;
  last_active_ = std::chrono::steady_clock::now();
}

bool PersistentDirect::call(int frames, bool planar, int history_index) {
  // A kernel that may have reached its idle timeout is replaced before the
  // doorbell rings, so that no call races its return.
  if (std::chrono::steady_clock::now() - last_active_ > idle_timeout_ / 2) {
    stop();
    launch(seq_);
  }
  const unsigned seq = seq_ + 1;
  const unsigned long long word = (unsigned long long)seq | (unsigned long long)frames << 32 |
                                  (unsigned long long)(planar ? 1 : 0) << 62 |
                                  (unsigned long long)(history_index & 1) << 63;
  std::atomic_ref<unsigned long long>(control_.get()->doorbell)
      .store(word, std::memory_order_release);
  seq_ = seq;
  const auto rung = std::chrono::steady_clock::now();
  // No answer in time: the kernel returned after all, or a block of it is not
  // resident (the device is full). Once stopped (every block has returned),
  // `done` is final: if the call was answered after all, it is done;
  // otherwise a fresh launch serves it again. The kernel's writes are the
  // same the second time (same input, same history parity), so a half-served
  // call does no harm. A stale `done` must never pass for the new launch's
  // answer: the new launch would still be reading the input that the host
  // overwrites for the next call.
  std::atomic_ref<unsigned> done(control_.get()->done);
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (attempt > 0) launch(seq - 1);
    bool answered =
        wait_for_answer(seq, std::chrono::steady_clock::now() + diagnostics_.answer_timeout);
    if (!answered) {
      stop();
      answered = done.load(std::memory_order_acquire) == seq;
    }
    if (!answered) continue;
    last_active_ = std::chrono::steady_clock::now();
    if (args_.trace && traced_[0].size() < 100000) {
      const volatile unsigned long long* t = control_.get()->trace;
      for (int i = 1; i < 4; ++i) traced_[i - 1].push_back(double(t[i] - t[0]) / 1e3);
      traced_[3].push_back(double(t[4] - t[0]) / 1e3);
      traced_[4].push_back(std::chrono::duration<double, std::micro>(last_active_ - rung).count());
    }
    return true;
  }
  return false;
}

bool PersistentDirect::wait_for_answer(unsigned seq,
                                       std::chrono::steady_clock::time_point deadline) {
  std::atomic_ref<unsigned> done(control_.get()->done);
  for (unsigned spins = 1;; ++spins) {
    if (done.load(std::memory_order_acquire) == seq) return true;
    relax();
    if (spins % kSpinsPerClock == 0 && std::chrono::steady_clock::now() > deadline) return false;
    if (spins % kSpinsPerCheck != 0) continue;
    const cudaError_t state = cudaStreamQuery(stream_.get());
    if (state == cudaSuccess) {  // the kernel has returned
      running_ = false;
      return done.load(std::memory_order_acquire) == seq;
    }
    if (state != cudaErrorNotReady)
      throw_cuda_error(state, "cudaStreamQuery(persistent kernel's stream)", __FILE__, __LINE__);
  }
}

void PersistentDirect::stop() {
  if (!running_) return;
  std::atomic_ref<unsigned>(control_.get()->stop).store(1, std::memory_order_release);
  running_ = false;
  const cudaError_t error = cudaStreamSynchronize(stream_.get());
  std::atomic_ref<unsigned>(control_.get()->stop).store(0, std::memory_order_release);
  if (error != cudaSuccess)
    throw_cuda_error(error, "cudaStreamSynchronize(persistent kernel's stream)", __FILE__,
                     __LINE__);
}

std::string PersistentDirect::description() const {
  std::ostringstream d;
  d << "persistent kernel, " << shape_.blocks << " blocks x 256 threads, returns after "
    << std::chrono::duration_cast<std::chrono::milliseconds>(idle_timeout_).count()
    << " ms without a call";
  if (!traced_[0].empty()) {
    d << "; trace, median us after block 0 saw the doorbell: staged / computed / counted / done";
    for (const auto& v : traced_) {
      std::vector<double> s = v;
      std::nth_element(s.begin(), s.begin() + long(s.size() / 2), s.end());
      d << (&v == &traced_[4] ? ", host ring to answer " : " ") << s[s.size() / 2];
    }
    d << " (" << traced_[0].size() << " calls, loads " << args_.input_loads << ")";
  }
  return d.str();
}

}  // namespace tapstream::cuda

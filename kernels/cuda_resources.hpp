#pragma once
// RAII owners for the CUDA resources the engine uses: streams, events, device
// buffers, pinned (page-locked) host buffers, graphs and cuFFT plans. Each is
// move-only; constructors throw (through TAPSTREAM_CUDA_CHECK) naming the
// failing call, destructors release without throwing (a failure to release
// cannot be handled there and is ignored).

#include <cuda_runtime.h>
#include <cufft.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda_check.hpp"

namespace tapstream::cuda {

// Selects `device` on the calling thread for the lifetime of the guard and
// restores the previous device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    TAPSTREAM_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) TAPSTREAM_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

class Stream {
 public:
  Stream() { TAPSTREAM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  // A stream of the given scheduling priority (cudaDeviceGetStreamPriorityRange:
  // numerically lower is more urgent).
  explicit Stream(int priority) {
    TAPSTREAM_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority));
  }
  ~Stream() {
    if (stream_) cudaStreamDestroy(stream_);
  }
  Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept {
    std::swap(stream_, other.stream_);
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  void synchronize() const { TAPSTREAM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  // Events used only for ordering skip timing (cheaper to record and wait on).
  explicit Event(bool timing = false) {
    TAPSTREAM_CUDA_CHECK(
        cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~Event() {
    if (event_) cudaEventDestroy(event_);
  }
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  Event& operator=(Event&& other) noexcept {
    std::swap(event_, other.event_);
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream) { TAPSTREAM_CUDA_CHECK(cudaEventRecord(event_, stream)); }
  // Makes `stream` wait (on the device) for the work captured by the last record().
  void wait_on(cudaStream_t stream) const {
    TAPSTREAM_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
  }
  void synchronize() const { TAPSTREAM_CUDA_CHECK(cudaEventSynchronize(event_)); }

 private:
  cudaEvent_t event_ = nullptr;
};

// Device memory for `count` elements of T (uninitialised).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count_ > 0) TAPSTREAM_CUDA_CHECK(cudaMalloc(&data_, count_ * sizeof(T)));
  }
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  // Zeroes the whole buffer on `stream` (asynchronous).
  void zero(cudaStream_t stream) {
    if (data_) TAPSTREAM_CUDA_CHECK(cudaMemsetAsync(data_, 0, bytes(), stream));
  }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

// Page-locked host memory for `count` elements of T, so that copies to and from
// the device are asynchronous (DMA). With `mapped`, the device can also read
// and write it directly (zero-copy) through device_pointer().
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t count, bool mapped = false) : count_(count) {
    if (count_ == 0) return;
    TAPSTREAM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&data_), count_ * sizeof(T),
                                       mapped ? cudaHostAllocMapped : cudaHostAllocDefault));
    if (mapped)
      TAPSTREAM_CUDA_CHECK(
          cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_data_), data_, 0));
  }
  ~PinnedBuffer() {
    if (data_) cudaFreeHost(data_);
  }
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        device_data_(std::exchange(other.device_data_, nullptr)),
        count_(std::exchange(other.count_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(device_data_, other.device_data_);
    std::swap(count_, other.count_);
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  T* get() const { return data_; }
  // The device's address of a mapped buffer (nullptr when not mapped).
  T* device_pointer() const { return device_data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }

 private:
  T* data_ = nullptr;
  T* device_data_ = nullptr;
  std::size_t count_ = 0;
};

// An instantiated CUDA graph (captured from a stream), replayed with launch().
class GraphExec {
 public:
  GraphExec() = default;
  // Ends a capture begun with cudaStreamBeginCapture on `stream`,
  // instantiates it and uploads it to the device on `stream`, so that its
  // first launch (a tail step in a live period) costs what the later ones do.
  static GraphExec end_capture(cudaStream_t stream) {
    cudaGraph_t graph = nullptr;
    TAPSTREAM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    GraphExec result;
    const cudaError_t error = cudaGraphInstantiate(&result.exec_, graph, 0);
    cudaGraphDestroy(graph);
    if (error != cudaSuccess)
      throw_cuda_error(error, "cudaGraphInstantiate(&exec, graph, 0)", __FILE__, __LINE__);
    TAPSTREAM_CUDA_CHECK(cudaGraphUpload(result.exec_, stream));
    return result;
  }
  ~GraphExec() {
    if (exec_) cudaGraphExecDestroy(exec_);
  }
  GraphExec(GraphExec&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
  GraphExec& operator=(GraphExec&& other) noexcept {
    std::swap(exec_, other.exec_);
    return *this;
  }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;

  explicit operator bool() const { return exec_ != nullptr; }
  void launch(cudaStream_t stream) const { TAPSTREAM_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

// A cuFFT plan handle, created empty (cufftCreate); make the plan with a
// cufftMakePlan* call on get().
class FftPlan {
 public:
  FftPlan() { TAPSTREAM_CUFFT_CHECK(cufftCreate(&plan_)); }
  ~FftPlan() {
    if (valid_) cufftDestroy(plan_);
  }
  FftPlan(FftPlan&& other) noexcept
      : plan_(other.plan_), valid_(std::exchange(other.valid_, false)) {}
  FftPlan& operator=(FftPlan&& other) noexcept {
    std::swap(plan_, other.plan_);
    std::swap(valid_, other.valid_);
    return *this;
  }
  FftPlan(const FftPlan&) = delete;
  FftPlan& operator=(const FftPlan&) = delete;

  cufftHandle get() const { return plan_; }

 private:
  cufftHandle plan_ = 0;
  bool valid_ = true;
};

}  // namespace tapstream::cuda

#pragma once
// The CUDA engine's direct-form path (kernels/device/direct_kernels.hpp), and
// the persistent kernel that serves its small calls (persistent_direct.hpp).
//
// Filter state on the device: each channel's history (the last max_taps - 1
// input samples) lives in one of two device buffers; block k reads history[h]
// and its own input, and the carry (fused into the last filter launch) writes
// history[1 - h] for block k + 1. So block k + 1's input can be copied in
// while block k is filtered; the caller orders "filter + carry of k before
// filter of k + 1".
//
// Taps: two banks (constant memory when they fit, always a global copy too);
// a new bank is uploaded on the construction's stream (which the caller has
// ordered after every kernel already enqueued, so after any kernel reading
// that bank), and the blocks switch banks at the next call; with crossfade
// that call is filtered twice (old, then new blended).

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "kernels/convolvers/device_convolver.hpp"
#include "kernels/convolvers/persistent_direct.hpp"
#include "kernels/cuda_resources.hpp"
#include "kernels/device/direct_kernels.hpp"

namespace tapstream::cuda {

class DirectConvolver final : public DeviceConvolver {
 public:
  struct Setup {
    DirectKernel kernel = DirectKernel::tuned;
    std::size_t max_taps = 0;  // >= the bank's
    std::size_t max_block_frames = 0;
    int multiprocessors = 1;
    bool stream_tiles = true;  // DirectArgs::stream_tiles
    // Uploads and the history's clearing are enqueued here (the caller's
    // first stream, which it orders after every block before set_filters).
    cudaStream_t stream = nullptr;
    // The persistent kernel for small calls: the caller's mapped staging
    // (device pointers, interleaved or planar, channels x max_block_frames
    // floats each), its stream priority, idle timeout and diagnostics.
    const float* mapped_in = nullptr;
    float* mapped_out = nullptr;
    int priority = 0;
    std::chrono::nanoseconds persistent_idle{};
    PersistentDirect::Diagnostics persistent_diagnostics;
  };

  // Allocates the history and both tap banks and uploads `bank` (on setup.stream).
  DirectConvolver(const FilterBank& bank, const Setup& setup);
  ~DirectConvolver() override;
  DirectConvolver(const DirectConvolver&) = delete;
  DirectConvolver& operator=(const DirectConvolver&) = delete;

  bool takes_any_view() const override { return true; }
  void process(const DeviceBlock& block, cudaStream_t stream) override;
  void end_call() override;
  void set_filters(const FilterBank& bank, bool crossfade) override;
  void reset(cudaStream_t stream) override;

  bool resident_ready(const Event& after) override;
  bool resident_call(std::size_t frames, bool planar) override;
  void quiesce() override;
  std::string resident_description() const override;

  Algorithm algorithm() const override { return Algorithm::direct; }
  std::string kernel() const override;
  std::string taps_memory() const override;
  std::string description() const override;

 private:
  struct TapBank {
    DeviceBuffer<float> global;
    PinnedBuffer<float> staging;
    Event uploaded;
    int taps = 0;
    int taps_padded = 0;
    long long channel_stride = 0;
    bool in_constant = false;
  };

  void upload(const FilterBank& bank, int b);
  DirectArgs direct_args(const SampleView& x, float* y, long long y_channel_stride,
                         long long y_frame_stride, std::size_t frames, int bank) const;

  std::size_t channels_;
  Setup setup_;
  DeviceBuffer<float> history_[2];
  int history_index_ = 0;
  int history_len_ = 0;
  int history_end_ = 0;
  TapBank banks_[2];
  int active_ = 0;
  std::optional<int> pending_;
  bool crossfade_ = false;

  std::unique_ptr<PersistentDirect> persistent_;
  bool persistent_failed_ = false;
};

}  // namespace tapstream::cuda

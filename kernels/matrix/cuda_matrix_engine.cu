// Per call, split at segment boundaries (partition P, FFT size 2P): the new
// frames go into each input's window [previous segment | current segment,
// zeros after the frames seen]; a batched forward FFT gives the current
// spectra; the matrix MAC sums, per bin and output, the current spectra
// against the first partition and the delay line against the later ones; a
// batched inverse FFT per output and the valid half of it is the output.
// Outputs depend only on frames already seen, so no latency is added at any
// call size. At a segment boundary the current spectra enter the delay line.
// Because every chunk recomputes the whole sum from the delay line, a new
// matrix needs no state of its own: a swap uploads its spectra, and the
// crossfade call runs the MAC for both and blends in the emit kernel.

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda_check.hpp"
#include "kernels/cuda_resources.hpp"
#include "kernels/cufft_plan.hpp"
#include "kernels/direct_kernels.hpp"
#include "kernels/matrix/cuda_matrix_engine.hpp"
#include "kernels/matrix/matrix_mac.hpp"
#include "kernels/overlap_save_windows.hpp"

namespace tapstream {
namespace {

using cuda::DeviceBuffer;

std::size_t div_up(std::size_t n, std::size_t m) {
  return (n + m - 1) / m;
}

// The partition: the call size (so a call is one chunk when calls are
// aligned), at least 64 (shorter transforms waste the device), at most 8192
// (beyond, per-call FFT work grows faster than the delay line shrinks).
std::size_t choose_partition(std::size_t max_block) {
  std::size_t p = 64;
  while (p < max_block && p < 8192) p *= 2;
  return p;
}

class CudaMatrixEngine final : public MatrixEngine {
 public:
  CudaMatrixEngine(const RoutingMatrix& matrix, const EngineOptions& options);

  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout layout) override;
  void set_matrix(const RoutingMatrix& matrix, bool crossfade) override;
  void reset() override;

  const RoutingMatrix& matrix() const override { return *matrix_; }
  std::size_t max_block_frames() const override { return max_block_; }
  std::size_t max_taps() const override { return max_taps_; }
  std::string description() const override {
    return "cuda: matrix " + std::to_string(inputs()) + " -> " + std::to_string(outputs()) + ", " +
           std::to_string(matrix_->paths().size()) + " paths, partitioned FFT, " +
           std::to_string(2 * partition_) + "-point, " + std::to_string(partitions_) +
           " partitions, " + std::to_string(groups_) + " partition groups";
  }

 private:
  // Dense spectra [partitions][inputs][outputs][bins] of `m` into `dst`.
  void upload_spectra(const RoutingMatrix& m, DeviceBuffer<float2>& dst);
  void mac(const float2* spectra, float2* out, cudaStream_t stream);

  cuda::DeviceGuard device_guard_;
  std::unique_ptr<RoutingMatrix> matrix_, pending_matrix_;
  std::size_t max_block_, max_taps_, partition_, bins_, partitions_, slots_;
  int groups_ = 1;
  cuda::Stream stream_;
  cuda::RealFftPlan forward_, inverse_, filter_forward_;
  DeviceBuffer<char> fft_work_;
  DeviceBuffer<float2> spectra_, pending_spectra_, old_spectra_;
  DeviceBuffer<float> stage_;           // [inputs][2P]
  DeviceBuffer<float2> current_, fdl_;  // [inputs][bins], [slots][inputs][bins]
  DeviceBuffer<float2> partial_, y_, y_old_;
  DeviceBuffer<float> filtered_, filtered_old_;  // [outputs][2P]
  DeviceBuffer<float> d_in_, d_in_planar_, d_out_planar_, d_out_;
  cuda::PinnedBuffer<float> host_in_, host_out_;
  std::size_t position_ = 0, slot_ = 0;
  bool pending_crossfade_ = false;
};

CudaMatrixEngine::CudaMatrixEngine(const RoutingMatrix& matrix, const EngineOptions& options)
    : device_guard_(options.device),
      matrix_(std::make_unique<RoutingMatrix>(matrix)),
      max_block_(options.max_block_frames),
      max_taps_(options.max_taps == 0 ? matrix.max_taps() : options.max_taps) {
  if (max_block_ == 0) throw std::invalid_argument("cuda matrix engine: max_block_frames is 0");
  if (matrix.max_taps() > max_taps_)
    throw std::invalid_argument("cuda matrix engine: the matrix's longest path has " +
                                std::to_string(matrix.max_taps()) + " taps, more than max_taps " +
                                std::to_string(max_taps_));
  partition_ = choose_partition(max_block_);
  bins_ = partition_ + 1;
  partitions_ = div_up(max_taps_, partition_);
  slots_ = partitions_;
  const std::size_t n_in = matrix.inputs(), n_out = matrix.outputs();
  groups_ = cuda::matrix_mac_groups(int(n_in), int(n_out), int(bins_), int(partitions_));

  forward_ = cuda::RealFftPlan(2 * partition_, n_in, CUFFT_R2C);
  inverse_ = cuda::RealFftPlan(2 * partition_, n_out, CUFFT_C2R);
  filter_forward_ = cuda::RealFftPlan(2 * partition_, n_in * n_out, CUFFT_R2C);
  fft_work_ = DeviceBuffer<char>(std::max({forward_.work_bytes(), inverse_.work_bytes(),
                                           filter_forward_.work_bytes(), std::size_t(1)}));
  forward_.attach_work_area(fft_work_.get());
  inverse_.attach_work_area(fft_work_.get());
  filter_forward_.attach_work_area(fft_work_.get());

  const std::size_t spectra_count = partitions_ * n_in * n_out * bins_;
  spectra_ = DeviceBuffer<float2>(spectra_count);
  pending_spectra_ = DeviceBuffer<float2>(spectra_count);
  old_spectra_ = DeviceBuffer<float2>(spectra_count);
  stage_ = DeviceBuffer<float>(n_in * 2 * partition_);
  current_ = DeviceBuffer<float2>(n_in * bins_);
  fdl_ = DeviceBuffer<float2>(slots_ * n_in * bins_);
  partial_ = DeviceBuffer<float2>(std::size_t(groups_) * n_out * bins_);
  y_ = DeviceBuffer<float2>(n_out * bins_);
  y_old_ = DeviceBuffer<float2>(n_out * bins_);
  filtered_ = DeviceBuffer<float>(n_out * 2 * partition_);
  filtered_old_ = DeviceBuffer<float>(n_out * 2 * partition_);
  d_in_ = DeviceBuffer<float>(n_in * max_block_);
  d_in_planar_ = DeviceBuffer<float>(n_in * max_block_);
  d_out_planar_ = DeviceBuffer<float>(n_out * max_block_);
  d_out_ = DeviceBuffer<float>(n_out * max_block_);
  host_in_ = cuda::PinnedBuffer<float>(n_in * max_block_);
  host_out_ = cuda::PinnedBuffer<float>(n_out * max_block_);
  upload_spectra(matrix, spectra_);
  reset();
}

void CudaMatrixEngine::upload_spectra(const RoutingMatrix& m, DeviceBuffer<float2>& dst) {
  const std::size_t n_in = m.inputs(), n_out = m.outputs(), window = 2 * partition_;
  const float scale = 1.0f / float(window);
  std::vector<std::vector<float>> taps;
  for (const MatrixPath& p : m.paths()) taps.push_back(p.effective_taps());
  // One partition at a time: [inputs][outputs][2P] zero-padded, transformed
  // on the device into [inputs][outputs][bins].
  cuda::PinnedBuffer<float> host(n_in * n_out * window);
  DeviceBuffer<float> time(n_in * n_out * window);
  for (std::size_t j = 0; j < partitions_; ++j) {
    std::fill_n(host.get(), host.size(), 0.0f);
    for (std::size_t p = 0; p < taps.size(); ++p) {
      const std::size_t first = j * partition_;
      if (first >= taps[p].size()) continue;
      const std::size_t count = std::min(partition_, taps[p].size() - first);
      float* dst_time = host.get() + (m.paths()[p].input * n_out + m.paths()[p].output) * window;
      for (std::size_t t = 0; t < count; ++t) dst_time[t] = taps[p][first + t] * scale;
    }
    TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(time.get(), host.get(), host.bytes(),
                                         cudaMemcpyHostToDevice, stream_.get()));
    filter_forward_.forward(time.get(), dst.get() + j * n_in * n_out * bins_, stream_.get());
    // The pinned staging is reused by the next partition.
    stream_.synchronize();
  }
}

void CudaMatrixEngine::mac(const float2* spectra, float2* out, cudaStream_t stream) {
  cuda::MatrixMacArgs a;
  a.current = current_.get();
  a.fdl = fdl_.get();
  a.spectra = spectra;
  a.partial = partial_.get();
  a.out = out;
  a.inputs = int(inputs());
  a.outputs = int(outputs());
  a.bins = int(bins_);
  a.partitions = int(partitions_);
  a.slots = int(slots_);
  a.slot = int(slot_);
  a.groups = groups_;
  cuda::launch_matrix_mac(a, stream);
}

void CudaMatrixEngine::process(std::span<const float> in, std::span<float> out, std::size_t frames,
                               Layout layout) {
  const std::size_t n_in = inputs(), n_out = outputs(), P = partition_;
  if (frames == 0 || frames > max_block_)
    throw std::invalid_argument("cuda matrix engine: block of " + std::to_string(frames) +
                                " frames (1.." + std::to_string(max_block_) + ")");
  if (in.size() < n_in * frames || out.size() < n_out * frames)
    throw std::invalid_argument("cuda matrix engine: buffers smaller than the block");
  const cudaStream_t s = stream_.get();

  bool fade = false;
  if (pending_matrix_) {
    // The running spectra become the old ones; the pending ones run from now.
    std::swap(old_spectra_, spectra_);
    std::swap(spectra_, pending_spectra_);
    matrix_ = std::move(pending_matrix_);
    fade = pending_crossfade_;
  }

  std::memcpy(host_in_.get(), in.data(), n_in * frames * sizeof(float));
  TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(d_in_.get(), host_in_.get(), n_in * frames * sizeof(float),
                                       cudaMemcpyHostToDevice, s));
  const bool planar = layout == Layout::planar;
  cuda::SampleView in_view{d_in_.get(), planar ? (long long)frames : 1,
                           planar ? 1 : (long long)n_in};
  cuda::launch_copy_samples(in_view, d_in_planar_.get(), (long long)frames, 1, int(n_in),
                            int(frames), s);

  for (std::size_t done = 0; done < frames;) {
    const std::size_t n = std::min(frames - done, P - position_);
    cuda::launch_write_stage(stage_.get(), d_in_planar_.get() + done, frames, n_in, P, position_, n,
                             s);
    forward_.forward(stage_.get(), current_.get(), s);
    mac(spectra_.get(), y_.get(), s);
    inverse_.inverse(y_.get(), filtered_.get(), s);
    if (fade) {
      mac(old_spectra_.get(), y_old_.get(), s);
      inverse_.inverse(y_old_.get(), filtered_old_.get(), s);
    }
    cuda::EmitArgs e;
    e.filtered = filtered_.get();
    e.filtered_old = fade ? filtered_old_.get() : nullptr;
    e.out = d_out_planar_.get() + done;
    e.out_stride = frames;
    e.channels = n_out;
    e.partition = P;
    e.segments = 1;
    e.first = position_;
    e.frames = n;
    e.call_offset = done;
    e.call_frames = frames;
    cuda::launch_emit(e, s);
    position_ += n;
    done += n;
    if (position_ == P) {
      TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(fdl_.get() + slot_ * n_in * bins_, current_.get(),
                                           current_.bytes(), cudaMemcpyDeviceToDevice, s));
      cuda::launch_advance_stage(stage_.get(), n_in, P, s);
      slot_ = (slot_ + 1) % slots_;
      position_ = 0;
    }
  }

  cuda::SampleView out_view{d_out_planar_.get(), (long long)frames, 1};
  cuda::launch_copy_samples(out_view, d_out_.get(), planar ? (long long)frames : 1,
                            planar ? 1 : (long long)n_out, int(n_out), int(frames), s);
  TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(host_out_.get(), d_out_.get(),
                                       n_out * frames * sizeof(float), cudaMemcpyDeviceToHost, s));
  stream_.synchronize();
  std::memcpy(out.data(), host_out_.get(), n_out * frames * sizeof(float));
}

void CudaMatrixEngine::set_matrix(const RoutingMatrix& matrix, bool crossfade) {
  check_matrix_swap(pending_matrix_ ? *pending_matrix_ : *matrix_, matrix, max_taps_);
  upload_spectra(matrix, pending_spectra_);
  pending_matrix_ = std::make_unique<RoutingMatrix>(matrix);
  pending_crossfade_ = crossfade;
}

void CudaMatrixEngine::reset() {
  stage_.zero(stream_.get());
  fdl_.zero(stream_.get());
  stream_.synchronize();
  position_ = 0;
  slot_ = 0;
}

}  // namespace

std::unique_ptr<MatrixEngine> make_cuda_matrix_engine(const RoutingMatrix& matrix,
                                                      const EngineOptions& options) {
  return std::make_unique<CudaMatrixEngine>(matrix, options);
}

}  // namespace tapstream

// Per call, split at segment boundaries (partition P, FFT size 2P) into
// chunks: the new frames go into each input's window [previous segment |
// current segment, zeros after the frames seen]; a batched forward FFT gives
// the current spectra, which enter the mirrored delay line at their slot; the
// matrix MAC sums, per bin and output, the window of the delay line against
// the path spectra; a batched inverse FFT per output and the valid half of it
// is the output. Outputs depend only on frames already seen, so no latency is
// added at any call size. Because every chunk recomputes the whole sum from
// the delay line, a new matrix needs no state of its own: a swap uploads its
// spectra, and the crossfade call runs the MAC for both and blends in the
// emit kernel.
//
// Two sets of path spectra: the running one and the spare one, which a swap
// fills and the call after the swap reads as the fading-out set. A per-path
// update (set_paths, set_paths_device) costs its paths only: the spare set
// lags the running one by the paths of the update before (their entries are
// copied across, no others), the named paths' taps (the caller's device
// arrays, or host taps copied up in one transfer) are expanded into
// partitions, transformed in one batched FFT and written into the spare set
// in place (kernels/device/path_spectra). The call after it swaps the sets
// and crossfades: when at most half the paths changed, only the changed
// paths' products are added to a copy of the new output (their differences
// to the old spectra kept at install); beyond, the whole old set's MAC,
// which then costs less.
//
// The chunks' positions travel to the device with the call's input, and every
// kernel reads them there, so a call's launch sequence depends only on its
// shape. A shape seen twice is captured as a CUDA graph and replayed from then
// on (a live stream of fixed-size calls is one graph launch a call).
//
// A path's delay d = q P + r is a delay, not taps (dsp/model/segment_delay):
// the delay line keeps q_max more segments than the partitions, the MAC
// reads path i -> o's window q segments further back (a table of q per
// (input, output) that travels with the spectra), and only r < P becomes
// leading zeros of its taps, so H holds one partition more than max_taps
// needs, which a matrix whose paths do not reach it never runs. A swap that
// moves delays crossfades as any swap: both matrices read the same delay
// line. The cuBLAS variant shares one window across outputs and cannot read
// per path: it folds delays into taps (max_delay_frames() 0), as before.

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dsp/model/segment_delay.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/cuda_resources.hpp"
#include "kernels/cufft_plan.hpp"
#include "kernels/device/direct_kernels.hpp"
#include "kernels/device/matrix_chunks.hpp"
#include "kernels/device/matrix_mac.hpp"
#include "kernels/device/path_spectra.hpp"
#include "kernels/device_memory_check.hpp"
#include "kernels/matrix/cublas_matrix_mac.hpp"
#include "kernels/matrix/cuda_matrix_engine.hpp"

namespace tapstream {
namespace {

using cuda::DeviceBuffer;
using cuda::MatrixChunk;

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

// How the call after a swap fades out the old set: not at all, through the
// whole old set's MAC, or through the changed paths' differences only.
enum class Fade { none, whole, changed };

// What a call's launch sequence depends on.
struct CallShape {
  std::size_t frames = 0, chunks = 0;
  Layout layout = Layout::interleaved;
  Fade fade = Fade::none;
  const void* spectra = nullptr;
  const void* old_spectra = nullptr;
  std::size_t fade_paths = 0;  // Fade::changed
  const void* delays = nullptr;
  const void* old_delays = nullptr;
  long long k_first = 0, old_k_first = 0;
  bool device_io = false;  // the block in device_call_ already, the output left in d_out_
  bool operator==(const CallShape&) const = default;
};

// What the MAC needs to know of one set of spectra besides H: whether any
// path has a whole segment of delay (its table of q then on the device) and
// the first k any path reaches.
struct SpectraReach {
  bool delayed = false;
  std::size_t partitions = 0;  // the most any path of the set reaches
};

class CudaMatrixEngine final : public MatrixEngine {
 public:
  CudaMatrixEngine(const RoutingMatrix& matrix, const EngineOptions& options);

  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout layout) override;
  bool process_device(const float* in, std::size_t in_stride, float* out, std::size_t out_stride,
                      std::size_t frames, void* stream) override;
  void set_matrix(const RoutingMatrix& matrix, bool crossfade) override;
  void set_paths(std::span<const PathTaps> paths, bool crossfade) override;
  bool set_paths_device(std::span<const PathTaps> paths, bool crossfade, void* stream) override;
  void reset() override;
  DeviceMemory device_memory() const override;

  std::size_t inputs() const override { return matrix_->inputs(); }
  std::size_t outputs() const override { return matrix_->outputs(); }
  std::size_t max_block_frames() const override { return max_block_; }
  std::size_t max_taps() const override { return max_taps_; }
  std::size_t max_delay_frames() const override { return max_delay_; }
  std::string name() const override { return "cuda"; }
  std::string description() const override {
    return "cuda: matrix " + std::to_string(inputs()) + " -> " + std::to_string(outputs()) + ", " +
           std::to_string(matrix_->paths().size()) + " paths, partitioned FFT, " +
           std::to_string(2 * partition_) + "-point, " + std::to_string(partitions_) +
           " partitions, " +
           (cublas_ ? std::string("cuBLAS batched CGEMM")
                    : "tiled MAC, " + std::to_string(splits_) + " k-splits") +
           (use_graphs_ ? ", CUDA graphs" : ", no graphs") +
           (max_delay_ == 0 ? std::string(", delays folded into taps")
                            : ", delays up to " + std::to_string(max_delay_) + " frames");
  }

 private:
  static constexpr std::size_t kGraphs = 8, kSeen = 16;
  struct CachedGraph {
    CallShape shape;
    cuda::GraphExec exec;
    std::uint64_t used = 0;
  };

  // H of `m` into `dst`, its table of whole-segment delays into `delays`;
  // returns what the MAC needs to know of it.
  SpectraReach upload_spectra(const RoutingMatrix& m, DeviceBuffer<float2>& dst,
                              DeviceBuffer<int>& delays);
  // The leading zeros of `path`'s taps on this engine (all of its delay when
  // delays are folded, else its remainder).
  std::size_t leading_zeros(const MatrixPath& path) const {
    return max_delay_ == 0 ? path.delay_frames
                           : split_delay(path.delay_frames, partition_).remainder;
  }
  long long k_first(const SpectraReach& reach) const {
    return (long long)(partitions_ - std::min(partitions_, reach.partitions)) * (long long)inputs();
  }
  void bind_cublas();
  // Checks a call's size, takes a pending matrix and writes the call's
  // chunks into host_call_: the call's shape (chunks, fade, the sets of
  // spectra and delays it runs) for `frames`.
  CallShape begin_call(std::size_t frames, Layout layout);
  // The call's device work, after its chunks and input are in host_call_
  // (device_io: its input already in device_call_, its output left in d_out_).
  void enqueue(const CallShape& shape);
  void run(const CallShape& shape);
  // set_paths' work once the taps are device memory (`device_taps[u]` for
  // paths[u]), NaN and infinity looked for on the device.
  void update_paths(std::span<const PathTaps> paths, const std::vector<const float*>& device_taps,
                    bool crossfade);
  // The fade deltas and their paths' list, made at the first update that keeps them.
  void allocate_fade_deltas();
  // The running (or pending) matrix: set_paths checks against it.
  const RoutingMatrix& latest() const { return pending_matrix_ ? *pending_matrix_ : *matrix_; }

  cuda::DeviceGuard device_guard_;
  int device_;
  // The paths' routing, gains, delays and polarities; the taps of paths that
  // set_paths replaced since are in the spectra only (shared, never copied,
  // so that an update costs the named paths alone).
  std::shared_ptr<const RoutingMatrix> matrix_, pending_matrix_;
  std::size_t max_block_, max_taps_, max_delay_ = 0, partition_, bins_, partitions_, slots_,
                                     chunk_capacity_, chunk_bytes_;
  cuda::MatrixMacShape shape_;
  int splits_ = 1;
  bool use_graphs_;
  cuda::Stream stream_;
  cuda::Event caller_ready_;  // process_device: the caller's stream, recorded
  cuda::RealFftPlan forward_, inverse_, filter_forward_;
  DeviceBuffer<char> fft_work_;
  // The running set and the spare one (pending after an update; the
  // fading-out set during the call after a swap), each with its table of
  // whole-segment delays ([inputs][outputs_padded]) and its reach.
  DeviceBuffer<float2> spectra_, spare_;
  DeviceBuffer<int> delays_, spare_delays_;
  SpectraReach reach_, spare_reach_;
  DeviceBuffer<float> stage_;           // [inputs][2P]
  DeviceBuffer<float2> current_, fdl_;  // [inputs][bins], [2 * slots][inputs][bins]
  DeviceBuffer<float2> partial_, y_, y_old_;
  DeviceBuffer<float> filtered_, filtered_old_;  // [outputs][2P]
  // A call's chunks, then its input samples: pinned host memory and its device copy.
  cuda::PinnedBuffer<char> host_call_;
  DeviceBuffer<char> device_call_;
  DeviceBuffer<float> d_out_;
  cuda::PinnedBuffer<float> host_out_;
  std::optional<cuda::CublasMatrixMac> cublas_;
  std::vector<CachedGraph> graphs_;
  std::array<CallShape, kSeen> seen_{};
  std::size_t seen_next_ = 0;
  std::uint64_t calls_ = 0;
  std::size_t position_ = 0, slot_ = 0;
  bool pending_crossfade_ = false;
  // What the spare set holds beyond the running one. While a matrix is
  // pending: the whole set (pending_whole_: set_matrix) or the paths in
  // changed_ (per-path updates; slot_of_[path]: its row among the fade
  // deltas, -1 when unchanged). After a swap: the old set, which lags the
  // new one by stale_ (or everywhere: spare_stale_all_).
  bool pending_whole_ = false;
  bool fade_deltas_kept_ = false;  // for every path in changed_
  std::vector<std::size_t> changed_, stale_;
  std::vector<int> slot_of_;
  bool spare_stale_all_ = true;  // not yet filled
  // Per-path updates, made at the first one: the batch's descriptors, the
  // expanded partitions and their spectra (update_batch_ paths at a time),
  // host taps' staging, and the flag of a non-finite tap (device memory,
  // read back with the update's end).
  std::size_t update_batch_ = 0;
  cuda::RealFftPlan update_forward_;
  DeviceBuffer<char> update_work_;
  cuda::PinnedBuffer<cuda::PathUpdate> host_updates_;  // the update's paths, then the stale copies
  DeviceBuffer<cuda::PathUpdate> device_updates_;
  DeviceBuffer<float> update_time_;
  DeviceBuffer<float2> update_spectra_;
  cuda::PinnedBuffer<float> host_taps_;
  DeviceBuffer<float> device_taps_;
  DeviceBuffer<int> bad_;
  cuda::PinnedBuffer<int> host_bad_;
  // Marks of the paths named in an update (mark_[path] == marking_).
  std::vector<std::uint32_t> mark_;
  std::uint32_t marking_ = 0;
  // Fade deltas ([slot][partition][bins], up to half the paths) and their paths.
  DeviceBuffer<float2> fade_delta_;
  DeviceBuffer<cuda::FadePath> fade_list_;
  cuda::DeviceRanges device_ranges_;
};

CudaMatrixEngine::CudaMatrixEngine(const RoutingMatrix& matrix, const EngineOptions& options)
    : device_guard_(options.device),
      device_(options.device),
      matrix_(std::make_shared<const RoutingMatrix>(matrix)),
      max_block_(options.max_block_frames),
      use_graphs_(options.cuda.matrix_graphs),
      device_ranges_(options.device) {
  if (max_block_ == 0) throw std::invalid_argument("cuda matrix engine: max_block_frames is 0");
  const CudaMatrixKernel kind = options.cuda.matrix_kernel == CudaMatrixKernel::automatic
                                    ? CudaMatrixKernel::tiled
                                    : options.cuda.matrix_kernel;
  partition_ = choose_partition(max_block_);
  bins_ = partition_ + 1;
  if (kind == CudaMatrixKernel::cublas) {
    // Delays folded: max_taps bounds delay + taps, with room for the
    // matrix's own delays on top of a given filter length.
    max_taps_ =
        options.max_taps == 0 ? matrix.max_taps() : options.max_taps + matrix.max_delay_frames();
    if (matrix.max_taps() > max_taps_)
      throw std::invalid_argument(
          "cuda matrix engine: the matrix's longest path has " + std::to_string(matrix.max_taps()) +
          " taps (delay included), more than max_taps " + std::to_string(max_taps_));
    partitions_ = div_up(max_taps_, partition_);
    slots_ = partitions_;
  } else {
    // As the CPU matrix engine: the delay line reaches as far as the matrix
    // or the options ask, and at least 65536 frames (room for a swap that
    // brings delays) as long as that room costs at most 256 MiB of device
    // memory (a frame of one input is about 16 bytes, mirrored): a matrix of
    // thousands of inputs (binaural sources) keeps less spare room.
    max_taps_ = options.max_taps == 0 ? matrix.max_filter_taps() : options.max_taps;
    const std::size_t spare_frames = (std::size_t(256) << 20) / (16 * matrix.inputs());
    max_delay_ = std::max({options.max_delay_frames, matrix.max_delay_frames(),
                           std::min(std::size_t(65536), spare_frames)});
    if (matrix.max_filter_taps() > max_taps_)
      throw std::invalid_argument("cuda matrix engine: the matrix's longest path has " +
                                  std::to_string(matrix.max_filter_taps()) +
                                  " taps, more than max_taps " + std::to_string(max_taps_));
    partitions_ = partitions_for_any_delay(max_taps_, partition_);
    slots_ = delay_line_segments(max_taps_, max_delay_, partition_);
  }
  const std::size_t n_in = matrix.inputs(), n_out = matrix.outputs();
  shape_.inputs = int(n_in);
  shape_.outputs = int(n_out);
  shape_.bins = int(bins_);
  shape_.partitions = int(partitions_);
  splits_ = cuda::matrix_mac_splits(shape_);

  forward_ = cuda::RealFftPlan(2 * partition_, n_in, CUFFT_R2C);
  inverse_ = cuda::RealFftPlan(2 * partition_, n_out, CUFFT_C2R);
  filter_forward_ = cuda::RealFftPlan(2 * partition_, n_in * n_out, CUFFT_R2C);
  fft_work_ = DeviceBuffer<char>(std::max({forward_.work_bytes(), inverse_.work_bytes(),
                                           filter_forward_.work_bytes(), std::size_t(1)}));
  forward_.attach_work_area(fft_work_.get());
  inverse_.attach_work_area(fft_work_.get());
  filter_forward_.attach_work_area(fft_work_.get());

  const std::size_t spectra_count = std::size_t(shape_.spectra_count());
  spectra_ = DeviceBuffer<float2>(spectra_count);
  spare_ = DeviceBuffer<float2>(spectra_count);
  slot_of_.assign(matrix.paths().size(), -1);
  mark_.assign(matrix.paths().size(), 0);
  const std::size_t delay_count = n_in * std::size_t(shape_.outputs_padded());
  delays_ = DeviceBuffer<int>(delay_count);
  spare_delays_ = DeviceBuffer<int>(delay_count);
  stage_ = DeviceBuffer<float>(n_in * 2 * partition_);
  current_ = DeviceBuffer<float2>(n_in * bins_);
  fdl_ = DeviceBuffer<float2>(2 * slots_ * n_in * bins_);
  if (splits_ > 1) partial_ = DeviceBuffer<float2>(std::size_t(splits_) * n_out * bins_);
  y_ = DeviceBuffer<float2>(n_out * bins_);
  y_old_ = DeviceBuffer<float2>(n_out * bins_);
  filtered_ = DeviceBuffer<float>(n_out * 2 * partition_);
  filtered_old_ = DeviceBuffer<float>(n_out * 2 * partition_);
  // A call of max_block frames starting anywhere in a segment.
  chunk_capacity_ = div_up(max_block_, partition_) + 1;
  chunk_bytes_ = div_up(chunk_capacity_ * sizeof(MatrixChunk), 256) * 256;
  host_call_ = cuda::PinnedBuffer<char>(chunk_bytes_ + n_in * max_block_ * sizeof(float));
  device_call_ = DeviceBuffer<char>(host_call_.size());
  d_out_ = DeviceBuffer<float>(n_out * max_block_);
  host_out_ = cuda::PinnedBuffer<float>(n_out * max_block_);
  if (kind == CudaMatrixKernel::cublas) {
    cublas_.emplace(shape_);
    bind_cublas();
  }
  reach_ = upload_spectra(matrix, spectra_, delays_);
  reset();
}

SpectraReach CudaMatrixEngine::upload_spectra(const RoutingMatrix& m, DeviceBuffer<float2>& dst,
                                              DeviceBuffer<int>& delays) {
  const std::size_t n_in = m.inputs(), n_out = m.outputs(), window = 2 * partition_;
  const float scale = 1.0f / float(window);
  SpectraReach reach;
  std::vector<std::vector<float>> taps;
  for (const MatrixPath& p : m.paths()) {
    taps.push_back(p.effective_taps(leading_zeros(p)));
    reach.partitions = std::max(reach.partitions, div_up(taps.back().size(), partition_));
  }
  const std::size_t stride = std::size_t(shape_.outputs_padded());
  const std::vector<int> table = max_delay_ == 0 ? std::vector<int>(n_in * stride, 0)  // folded
                                                 : segment_delay_table(m, partition_, stride);
  reach.delayed = std::any_of(table.begin(), table.end(), [](int q) { return q != 0; });
  // Synchronous from pageable memory; the stream is synchronized below anyway.
  TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(delays.get(), table.data(), table.size() * sizeof(int),
                                       cudaMemcpyHostToDevice, stream_.get()));
  // One partition at a time: [inputs][outputs][2P] zero-padded, transformed
  // on the device into [inputs][outputs][bins], packed into H.
  cuda::PinnedBuffer<float> host(n_in * n_out * window);
  DeviceBuffer<float> time(n_in * n_out * window);
  DeviceBuffer<float2> partition_spectra(n_in * n_out * bins_);
  dst.zero(stream_.get());  // H's padding outputs and absent paths
  // Partitions no path reaches stay zero.
  for (std::size_t j = 0; j < std::min(partitions_, reach.partitions); ++j) {
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
    filter_forward_.forward(time.get(), partition_spectra.get(), stream_.get());
    cuda::launch_pack_spectra(partition_spectra.get(), dst.get(), shape_, int(j), stream_.get());
    // The pinned staging is reused by the next partition.
    stream_.synchronize();
  }
  return reach;
}

void CudaMatrixEngine::bind_cublas() {
  cublas_->bind(0, spectra_.get(), y_.get(), stream_.get());
  cublas_->bind(1, spare_.get(), y_old_.get(), stream_.get());
}

void CudaMatrixEngine::enqueue(const CallShape& shape) {
  const bool device_io = shape.device_io;
  const std::size_t chunks = shape.chunks, frames = shape.frames;
  const Layout layout = shape.layout;
  const bool fade = shape.fade != Fade::none;
  const cudaStream_t s = stream_.get();
  const std::size_t n_in = inputs(), n_out = outputs();
  const int P = int(partition_);
  TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(
      device_call_.get(), host_call_.get(),
      chunk_bytes_ + (device_io ? 0 : n_in * frames * sizeof(float)), cudaMemcpyHostToDevice, s));
  const auto* d_chunks = reinterpret_cast<const MatrixChunk*>(device_call_.get());
  const bool planar = layout == Layout::planar;
  const cuda::Samples in{reinterpret_cast<float*>(device_call_.get() + chunk_bytes_),
                         planar ? (long long)frames : 1, planar ? 1 : (long long)n_in};
  const cuda::Samples out{d_out_.get(), planar ? (long long)frames : 1,
                          planar ? 1 : (long long)n_out};
  const int widest = int(std::min(frames, partition_));
  for (std::size_t c = 0; c < chunks; ++c) {
    const MatrixChunk* chunk = d_chunks + c;
    cuda::launch_stage_input(stage_.get(), in, chunk, int(n_in), P, widest, s);
    forward_.forward(stage_.get(), current_.get(), s);
    cuda::launch_store_current(fdl_.get(), current_.get(), chunk, int(n_in), int(bins_),
                               int(slots_), stage_.get(), P,
                               cublas_ ? cublas_->window_pointers() : nullptr, s);
    for (int set = 0; set < (shape.fade == Fade::whole ? 2 : 1); ++set) {
      if (cublas_) {
        cublas_->run(set, s);
      } else {
        cuda::MatrixMacArgs a;
        a.shape = shape_;
        a.fdl = fdl_.get();
        a.slots = int(slots_);
        a.delays = static_cast<const int*>(set == 0 ? shape.delays : shape.old_delays);
        a.k_first = set == 0 ? shape.k_first : shape.old_k_first;
        a.chunk = chunk;
        a.spectra = static_cast<const float2*>(set == 0 ? shape.spectra : shape.old_spectra);
        a.partial = partial_.get();
        a.out = set == 0 ? y_.get() : y_old_.get();
        a.splits = splits_;
        cuda::launch_matrix_mac(a, s);
      }
      inverse_.inverse(set == 0 ? y_.get() : y_old_.get(),
                       set == 0 ? filtered_.get() : filtered_old_.get(), s);
    }
    if (shape.fade == Fade::changed) {
      // The old set's output: the new one plus the changed paths' differences.
      TAPSTREAM_CUDA_CHECK(
          cudaMemcpyAsync(y_old_.get(), y_.get(), y_.bytes(), cudaMemcpyDeviceToDevice, s));
      cuda::launch_add_fade_delta(fade_list_.get(), int(shape.fade_paths), fade_delta_.get(),
                                  fdl_.get(), int(slots_), chunk, shape_, y_old_.get(), s);
      inverse_.inverse(y_old_.get(), filtered_old_.get(), s);
    }
    cuda::launch_emit_output(out, filtered_.get(), fade ? filtered_old_.get() : nullptr, chunk,
                             int(n_out), P, widest, int(frames), s);
  }
  if (device_io) return;
  TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(host_out_.get(), d_out_.get(),
                                       n_out * frames * sizeof(float), cudaMemcpyDeviceToHost, s));
}

void CudaMatrixEngine::run(const CallShape& shape) {
  const cudaStream_t s = stream_.get();
  ++calls_;
  if (use_graphs_) {
    for (CachedGraph& g : graphs_) {
      if (g.shape == shape) {
        g.used = calls_;
        g.exec.launch(s);
        return;
      }
    }
    if (std::find(seen_.begin(), seen_.end(), shape) != seen_.end()) {
      TAPSTREAM_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      try {
        enqueue(shape);
      } catch (...) {
        cudaGraph_t broken = nullptr;
        cudaStreamEndCapture(s, &broken);
        if (broken) cudaGraphDestroy(broken);
        throw;
      }
      cuda::GraphExec exec = cuda::GraphExec::end_capture(s);
      if (graphs_.size() == kGraphs) {
        graphs_.erase(std::min_element(
            graphs_.begin(), graphs_.end(),
            [](const CachedGraph& a, const CachedGraph& b) { return a.used < b.used; }));
      }
      graphs_.push_back({shape, std::move(exec), calls_});
      graphs_.back().exec.launch(s);
      return;
    }
    seen_[seen_next_] = shape;
    seen_next_ = (seen_next_ + 1) % kSeen;
  }
  enqueue(shape);
}

CallShape CudaMatrixEngine::begin_call(std::size_t frames, Layout layout) {
  if (frames == 0 || frames > max_block_)
    throw std::invalid_argument("cuda matrix engine: block of " + std::to_string(frames) +
                                " frames (1.." + std::to_string(max_block_) + ")");
  CallShape shape;
  shape.frames = frames;
  shape.layout = layout;
  if (pending_matrix_) {
    // The pending spectra run from now; the running ones fade out.
    std::swap(spectra_, spare_);
    std::swap(delays_, spare_delays_);
    std::swap(reach_, spare_reach_);
    matrix_ = std::move(pending_matrix_);
    if (pending_crossfade_) shape.fade = fade_deltas_kept_ ? Fade::changed : Fade::whole;
    if (shape.fade == Fade::changed) shape.fade_paths = changed_.size();
    // The spare set now lags by what changed.
    for (const std::size_t p : changed_) slot_of_[p] = -1;
    stale_ = std::move(changed_);
    changed_.clear();
    spare_stale_all_ = pending_whole_;
    pending_whole_ = false;
    fade_deltas_kept_ = false;
    if (cublas_) bind_cublas();
  }
  shape.spectra = spectra_.get();
  shape.delays = reach_.delayed ? delays_.get() : nullptr;
  shape.k_first = k_first(reach_);
  if (shape.fade == Fade::whole) {
    shape.old_spectra = spare_.get();
    shape.old_delays = spare_reach_.delayed ? spare_delays_.get() : nullptr;
    shape.old_k_first = k_first(spare_reach_);
  }

  auto* chunks = reinterpret_cast<MatrixChunk*>(host_call_.get());
  std::size_t count = 0;
  for (std::size_t done = 0; done < frames; ++count) {
    const std::size_t n = std::min(frames - done, partition_ - position_);
    chunks[count] = MatrixChunk{int(position_), int(n), int(done), int(slot_)};
    position_ += n;
    done += n;
    if (position_ == partition_) {
      slot_ = (slot_ + 1) % slots_;
      position_ = 0;
    }
  }
  shape.chunks = count;
  return shape;
}

void CudaMatrixEngine::process(std::span<const float> in, std::span<float> out, std::size_t frames,
                               Layout layout) {
  const std::size_t n_in = inputs(), n_out = outputs();
  if (frames != 0 && (in.size() < n_in * frames || out.size() < n_out * frames))
    throw std::invalid_argument("cuda matrix engine: buffers smaller than the block");
  const CallShape shape = begin_call(frames, layout);
  std::memcpy(host_call_.get() + chunk_bytes_, in.data(), n_in * frames * sizeof(float));
  run(shape);
  stream_.synchronize();
  std::memcpy(out.data(), host_out_.get(), n_out * frames * sizeof(float));
}

// The input is copied on the device into the call's staging and the output
// out of d_out_ (two strided copy kernels), so that the call's graph holds the
// engine's pointers, not the caller's (which change from call to call).
bool CudaMatrixEngine::process_device(const float* in, std::size_t in_stride, float* out,
                                      std::size_t out_stride, std::size_t frames, void* stream) {
  const std::size_t n_in = inputs(), n_out = outputs();
  cuda::check_device_memory(in, "the input");
  cuda::check_device_memory(out, "the output");
  if (in_stride < frames || out_stride < frames)
    throw std::invalid_argument("cuda matrix engine: a channel stride below the block's frames");
  CallShape shape = begin_call(frames, Layout::planar);
  shape.device_io = true;
  const cudaStream_t s = stream_.get();
  // After what the caller enqueued, on the device: no host wait.
  caller_ready_.record(static_cast<cudaStream_t>(stream));
  caller_ready_.wait_on(s);
  // Copies as kernels (a small device-to-device cudaMemcpy2DAsync waits for a copy engine).
  const auto n = (long long)frames;
  cuda::launch_copy_samples({in, (long long)in_stride, 1},
                            reinterpret_cast<float*>(device_call_.get() + chunk_bytes_), n, 1,
                            int(n_in), int(frames), s);
  run(shape);
  cuda::launch_copy_samples({d_out_.get(), n, 1}, out, (long long)out_stride, 1, int(n_out),
                            int(frames), s);
  stream_.synchronize();
  return true;
}

void CudaMatrixEngine::set_matrix(const RoutingMatrix& matrix, bool crossfade) {
  check_matrix_swap(pending_matrix_ ? *pending_matrix_ : *matrix_, matrix, max_taps_, max_delay_);
  spare_reach_ = upload_spectra(matrix, spare_, spare_delays_);
  pending_matrix_ = std::make_shared<const RoutingMatrix>(matrix);
  pending_crossfade_ = crossfade;
  pending_whole_ = true;
  fade_deltas_kept_ = false;
  for (const std::size_t p : changed_) slot_of_[p] = -1;
  changed_.clear();
}

void CudaMatrixEngine::set_paths(std::span<const PathTaps> paths, bool crossfade) {
  // The taps' values are checked on the device, where they are read anyway.
  check_path_taps(latest().paths(), paths, max_taps_, max_delay_, /*finite=*/false);
  std::size_t total = 0;
  for (const PathTaps& update : paths) total += update.taps.size();
  // Every tap goes up in one transfer, packed into a staging kept from one
  // update to the next (the stream is idle between calls: the last copy
  // from it is done).
  if (host_taps_.size() < total) {
    host_taps_ = cuda::PinnedBuffer<float>(total);
    device_taps_ = DeviceBuffer<float>(total);
  }
  std::vector<const float*> device_taps;
  device_taps.reserve(paths.size());
  std::size_t at = 0;
  for (const PathTaps& update : paths) {
    std::memcpy(host_taps_.get() + at, update.taps.data(), update.taps.size() * sizeof(float));
    device_taps.push_back(device_taps_.get() + at);
    at += update.taps.size();
  }
  if (total > 0)
    TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(device_taps_.get(), host_taps_.get(),
                                         total * sizeof(float), cudaMemcpyHostToDevice,
                                         stream_.get()));
  update_paths(paths, device_taps, crossfade);
}

bool CudaMatrixEngine::set_paths_device(std::span<const PathTaps> paths, bool crossfade,
                                        void* stream) {
  check_path_taps(latest().paths(), paths, max_taps_, max_delay_, /*finite=*/false);
  std::vector<const float*> device_taps;
  device_taps.reserve(paths.size());
  // One look-up per allocation the taps lie in, not per path.
  device_ranges_.forget();
  for (const PathTaps& update : paths) {
    device_ranges_.check(update.taps.data(), update.taps.size_bytes(), [&] {
      return RoutingMatrix::describe_path(update.path, latest().paths()[update.path]) + "'s taps";
    });
    device_taps.push_back(update.taps.data());
  }
  // After what the caller enqueued: its taps are then complete.
  TAPSTREAM_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  update_paths(paths, device_taps, crossfade);
  return true;
}

void CudaMatrixEngine::allocate_fade_deltas() {
  if (fade_delta_.size() != 0) return;
  const std::size_t rows = std::max<std::size_t>(1, matrix_->paths().size() / 2);
  fade_delta_ = DeviceBuffer<float2>(rows * partitions_ * bins_);
  fade_list_ = DeviceBuffer<cuda::FadePath>(rows);
}

void CudaMatrixEngine::update_paths(std::span<const PathTaps> paths,
                                    const std::vector<const float*>& device_taps, bool crossfade) {
  const cudaStream_t s = stream_.get();
  const std::size_t window = 2 * partition_, all_paths = matrix_->paths().size();
  if (update_batch_ == 0) {
    // Up to 64 MiB of expanded partitions per batch (1024 paths of 8192 taps
    // at 128-frame partitions), at least one path, no more than the matrix
    // has (an update names each path once) nor a grid's z dimension holds.
    update_batch_ = std::max<std::size_t>(
        1, std::min<std::size_t>({(std::size_t(64) << 20) / (partitions_ * window * sizeof(float)),
                                  all_paths, 65535}));
    update_forward_ = cuda::RealFftPlan(window, update_batch_ * partitions_, CUFFT_R2C);
    update_work_ = DeviceBuffer<char>(std::max<std::size_t>(update_forward_.work_bytes(), 1));
    update_forward_.attach_work_area(update_work_.get());
    update_time_ = DeviceBuffer<float>(update_batch_ * partitions_ * window);
    update_spectra_ = DeviceBuffer<float2>(update_batch_ * partitions_ * bins_);
    bad_ = DeviceBuffer<int>(1);
    host_bad_ = cuda::PinnedBuffer<int>(1);
  }
  const bool fresh = !pending_matrix_;
  // A fresh update first brings the spare set up to the running one where
  // it lags (the paths of the update before), except where this one writes.
  if (++marking_ == 0) {  // wrapped: no old mark may match
    std::fill(mark_.begin(), mark_.end(), 0);
    marking_ = 1;
  }
  for (const PathTaps& update : paths) mark_[update.path] = marking_;
  std::size_t stale_copies = 0;
  if (fresh && !spare_stale_all_)
    for (const std::size_t p : stale_)
      if (mark_[p] != marking_) ++stale_copies;
  if (host_updates_.size() < paths.size() + stale_copies) {
    host_updates_ = cuda::PinnedBuffer<cuda::PathUpdate>(all_paths);
    device_updates_ = DeviceBuffer<cuda::PathUpdate>(all_paths);
  }
  // The paths that will differ from the running set once this is in, and
  // whether the fade keeps their differences (while at most half the
  // paths changed; beyond, the whole old set's MAC costs less).
  // (changed_ is empty while nothing is pending.)
  std::size_t changed = changed_.size();
  for (const PathTaps& update : paths)
    if (slot_of_[update.path] < 0) ++changed;
  const bool keep_deltas =
      (fresh || fade_deltas_kept_) && !pending_whole_ && 2 * changed <= all_paths;
  if (keep_deltas) allocate_fade_deltas();

  const RoutingMatrix& running = latest();
  cuda::PathUpdate* host = host_updates_.get();
  std::size_t next_slot = changed_.size();
  long long longest = 0;
  for (std::size_t u = 0; u < paths.size(); ++u) {
    const MatrixPath& path = running.paths()[paths[u].path];
    cuda::PathUpdate& d = host[u];
    d.taps = device_taps[u];
    d.count = (long long)paths[u].taps.size();
    d.delay = (long long)leading_zeros(path);
    d.segments = max_delay_ == 0 ? 0 : int(split_delay(path.delay_frames, partition_).segments);
    d.gain = std::pow(10.0, path.gain_db / 20.0) * (path.invert ? -1.0 : 1.0);
    d.input = int(path.input);
    d.output = int(path.output);
    d.index = int(u);
    const int known = slot_of_[paths[u].path];
    d.slot = known >= 0 ? known : int(next_slot++);
    longest = std::max(longest, d.count);
  }
  // In H's order, so that the install writes consecutive paths together.
  const auto h_order = [](const cuda::PathUpdate& a, const cuda::PathUpdate& b) {
    return a.input != b.input ? a.input < b.input : a.output < b.output;
  };
  if (!std::is_sorted(host, host + paths.size(), h_order))
    std::sort(host, host + paths.size(), h_order);
  std::size_t copies = 0;
  std::vector<std::size_t> overwritten;  // stale paths this update writes
  if (fresh && !spare_stale_all_) {
    for (const std::size_t p : stale_) {
      if (mark_[p] == marking_) {
        overwritten.push_back(p);
        continue;
      }
      cuda::PathUpdate& d = host[paths.size() + copies++];
      d.input = int(running.paths()[p].input);
      d.output = int(running.paths()[p].output);
    }
  }
  if (paths.size() + copies > 0)
    TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(device_updates_.get(), host,
                                         (paths.size() + copies) * sizeof(cuda::PathUpdate),
                                         cudaMemcpyHostToDevice, s));
  TAPSTREAM_CUDA_CHECK(cudaMemsetAsync(bad_.get(), 0x7f, sizeof(int), s));
  // One batch: the expansion finds bad taps as it reads them; several: all
  // are looked at before the first batch is installed.
  const bool one_batch = paths.size() <= update_batch_;
  if (!one_batch)
    cuda::launch_find_non_finite_taps(device_updates_.get(), int(paths.size()), longest, bad_.get(),
                                      s);
  if (fresh && spare_stale_all_) {
    TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(spare_.get(), spectra_.get(), spectra_.bytes(),
                                         cudaMemcpyDeviceToDevice, s));
    // The paths' delays stay: the running table goes with the spectra (the
    // spare set lagging by paths only already has it: updates keep delays).
    TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(spare_delays_.get(), delays_.get(), delays_.bytes(),
                                         cudaMemcpyDeviceToDevice, s));
  } else if (copies > 0) {
    cuda::launch_copy_path_spectra(device_updates_.get() + paths.size(), int(copies),
                                   spectra_.get(), spare_.get(), shape_, s);
  }
  for (std::size_t first = 0; first < paths.size(); first += update_batch_) {
    const int count = int(std::min(update_batch_, paths.size() - first));
    const cuda::PathUpdate* batch = device_updates_.get() + first;
    cuda::launch_expand_path_taps(batch, count, int(partitions_), int(partition_),
                                  update_time_.get(), one_batch ? bad_.get() : nullptr, s);
    update_forward_.forward(update_time_.get(), update_spectra_.get(), s);
    cuda::launch_install_path_spectra(batch, count, update_spectra_.get(), spectra_.get(),
                                      spare_.get(), keep_deltas ? fade_delta_.get() : nullptr,
                                      fade_list_.get(), bad_.get(), shape_, s);
  }
  TAPSTREAM_CUDA_CHECK(
      cudaMemcpyAsync(host_bad_.get(), bad_.get(), sizeof(int), cudaMemcpyDeviceToHost, s));
  // The caller's taps are read by the time this returns.
  stream_.synchronize();
  if (fresh) {
    // Copied across, whatever the taps held; those this update was to
    // write still lag until it succeeds.
    stale_ = std::move(overwritten);
    spare_stale_all_ = false;
  }
  if (const int u = *host_bad_.get(); u != cuda::kNoBadTap) {
    // Nothing was installed: what runs and what is pending stay.
    throw std::invalid_argument(
        RoutingMatrix::describe_path(paths[u].path, running.paths()[paths[u].path]) +
        ": a tap is not a finite number");
  }
  if (fresh) stale_.clear();
  // A longer filter may reach partitions the set did not (a fresh update's
  // spare set is the running one's copy).
  if (fresh) spare_reach_ = reach_;
  for (std::size_t u = 0; u < paths.size(); ++u)
    spare_reach_.partitions = std::max(
        spare_reach_.partitions, div_up(std::size_t(host[u].delay + host[u].count), partition_));
  for (const PathTaps& update : paths) {
    if (slot_of_[update.path] >= 0) continue;
    slot_of_[update.path] = int(changed_.size());
    changed_.push_back(update.path);
  }
  fade_deltas_kept_ = keep_deltas;
  if (fresh) {
    pending_matrix_ = matrix_;
    pending_crossfade_ = crossfade;
  } else {
    pending_crossfade_ = pending_crossfade_ || crossfade;
  }
}

DeviceMemory CudaMatrixEngine::device_memory() const {
  const int device = device_;
  DeviceMemory memory;
  memory.allocate = [device](std::size_t floats) {
    cuda::DeviceGuard guard(device);
    float* p = nullptr;
    TAPSTREAM_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(floats, 1) * sizeof(float)));
    return p;
  };
  memory.free = [](float* p) {
    cudaFree(p);  // unified addressing finds its device; in a destructor: no failure to tell
  };
  memory.copy_from_host = [device](float* dst, const float* src, std::size_t floats) {
    cuda::DeviceGuard guard(device);
    TAPSTREAM_CUDA_CHECK(cudaMemcpy(dst, src, floats * sizeof(float), cudaMemcpyHostToDevice));
  };
  return memory;
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

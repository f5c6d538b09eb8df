// Uniformly partitioned overlap-save on the GPU (see fft_convolver.hpp).
//
// The stream is cut into segments of P frames (the partition); the filter into
// K partitions of P taps, each zero-padded to 2P and transformed once (H_j,
// with the inverse FFT's 1/(2P) folded in). X_s is the spectrum of the 2P-frame
// window [segment s-1 | segment s]; segment s of the output is the second half
// of IFFT(sum_j X_{s-j} H_j). The frequency-domain delay line keeps the X of
// completed segments on the device.
//
// Zero added latency: a call that ends inside a segment transforms the window
// with the segment's future zeroed (causal, so the frames already there come
// out exact), and since partitions j >= 1 read only completed segments, their
// sum (the "tail") is computed once per segment and reused by each call that
// lands inside it. A run of whole segments is plain batched overlap-save: one
// forward FFT, one fused multiply-accumulate and one inverse FFT over every
// segment and channel of the run. With one partition (K == 1) such a run is
// instead one kernel per run (fused_overlap_save.hpp): windows, both transforms,
// the multiply and the copy-out in shared memory, about 3x faster (docs/history.md,
// "Fused single-partition overlap-save kernel").
// With K > 1 partitions of 256..16384 frames (K up to 16, or 32), such a run is
// three kernels (multi_partition_overlap_save.hpp): the forward transforms in
// shared memory, a MAC sliding along the segments with the filter and the last
// K spectra in registers, and the inverse transforms in shared memory: about 44
// bytes of device memory per output instead of about 124.
//
// Only counts (segment index, offset within it) live on the host; samples and
// spectra stay on the device and every step is enqueued on the caller's stream.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "kernels/convolvers/fft_convolver.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/cuda_resources.hpp"
#include "kernels/cufft_plan.hpp"
#include "kernels/device/fft_callbacks.hpp"
#include "kernels/device/fused_overlap_save.hpp"
#include "kernels/device/multi_partition_overlap_save.hpp"
#include "kernels/device/overlap_save_windows.hpp"
#include "kernels/device/spectral_mac.hpp"

namespace tapstream::cuda {
namespace {

constexpr std::size_t kMinPartition = 64;
constexpr std::size_t kMaxPartition = 32768;
// Filters longer than this get two partitions of half their length, which the
// cuFFT passes run faster than one partition of the filter's length
// (docs/performance.md, "Cost models").
constexpr std::size_t kSinglePartitionTaps = 8192;

// Big blocks get big partitions (fewer, larger transforms per frame), but no
// larger than the filter needs: past that, the FFT grows and nothing is saved.
std::size_t choose_partition(std::size_t max_block_frames, std::size_t max_taps) {
  const std::size_t by_block =
      std::clamp<std::size_t>(std::bit_ceil(max_block_frames), kMinPartition, kMaxPartition);
  std::size_t by_taps = std::bit_ceil(max_taps);
  if (by_taps > kSinglePartitionTaps) by_taps /= 2;
  return std::min(by_block, std::max(kMinPartition, by_taps));
}

// For the fused single-partition kernel: the filter in one partition (the
// smallest transform that holds it, since a larger one only adds work per
// output) when blocks are long enough to fill it; 0 where it does not apply.
std::size_t choose_fused_partition(std::size_t max_block_frames, std::size_t max_taps) {
  const std::size_t by_taps = std::max<std::size_t>(256, std::bit_ceil(max_taps));
  if (!fused_overlap_save_supports(by_taps) || std::bit_ceil(max_block_frames) < by_taps) return 0;
  return by_taps;
}

// For the multi-partition kernels (K > 1, runs of whole segments): the
// smallest partition of at least 4096 frames whose K the MAC is built for,
// when blocks are long enough to fill it; 0 where they do not apply (filters
// that fit one fused partition, or more than 32 x 16384 taps). The shorter
// transforms win, down to 4096 (the 8192-point transform's block leaves room
// for more blocks per SM; docs/performance.md, "Offline throughput").
constexpr std::size_t kMinSegmentKernelPartition = 4096;
std::size_t choose_segment_kernel_partition(std::size_t max_block_frames, std::size_t max_taps) {
  for (std::size_t partition = kMinSegmentKernelPartition; partition <= kMaxPartition;
       partition *= 2) {
    const std::size_t partitions = (max_taps + partition - 1) / partition;
    if (partitions < 2 || std::bit_ceil(max_block_frames) < partition) return 0;
    if (multi_partition_overlap_save_supports(partition, partitions)) return partition;
  }
  return 0;
}

}  // namespace

struct FftConvolver::State {
  std::size_t channels = 0;
  std::size_t max_taps = 0;
  std::size_t max_block_frames = 0;
  std::size_t partition = 0;         // P
  std::size_t bins = 0;              // P + 1
  std::size_t partitions = 0;        // K
  std::size_t max_segments = 0;      // whole segments one call can hold (at least 1)
  std::size_t ring_slots = 0;        // K - 1 + max_segments: see spectral_mac.hpp
  std::vector<RealFftPlan> forward;  // [i]: batch channels << i (with callbacks when fused)
  std::vector<RealFftPlan> inverse;
  // Plain plans of batch `channels` for single segments when forward/inverse are
  // fused (otherwise forward[0] and inverse[0] serve).
  RealFftPlan single_forward;
  RealFftPlan single_inverse;
  bool fused = false;
  bool fused_kernel = false;     // whole segments through fused_overlap_save (K == 1)
  bool segment_kernels = false;  // whole segments through multi_partition_overlap_save (K > 1)
  int multiprocessors = 1;       // the device's, for the segment kernels' grid
  std::string fused_kernel_failure;
  std::string fused_failure;  // why the fused path is off, when it was asked for
  DeviceBuffer<FusedParams> fused_params;
  void* fused_params_pointer = nullptr;  // the plans' caller info
  DeviceBuffer<unsigned char> work;
  DeviceBuffer<float> stage;          // [C][2P]
  DeviceBuffer<float> windows;        // [S][C][2P]; then the inverse FFTs' output
  DeviceBuffer<float2> new_spectra;   // [S][C][bins]; then the old filters' inverse FFT output
  DeviceBuffer<float2> products;      // [S][C][bins]
  DeviceBuffer<float2> products_old;  // [S][C][bins], during a crossfade
  DeviceBuffer<float2> ring;          // [ring_slots][C][bins]
  DeviceBuffer<float2> tail;          // [C][bins]
  DeviceBuffer<float2> filters[2];    // [K][C or 1][bins]
  bool filter_shared[2] = {false, false};
  int current = 0;
  int old = 1;
  bool crossfade_pending = false;
  bool filters_shared_description = false;

  std::int64_t segment = 0;  // index of the segment being filled
  std::size_t offset = 0;    // frames of it received so far
  bool tail_valid = false;   // `tail` holds partitions 1..K-1 for `segment`, current filters

  void run_forward(const float* in, float2* out, std::size_t segments, cudaStream_t stream) const {
    std::size_t done = 0;
    for (std::size_t i = forward.size(); i-- > 0;) {
      if (segments & (std::size_t(1) << i)) {
        forward[i].forward(in + done * channels * 2 * partition, out + done * channels * bins,
                           stream);
        done += std::size_t(1) << i;
      }
    }
  }
  void run_inverse(float2* in, float* out, std::size_t segments, cudaStream_t stream) const {
    std::size_t done = 0;
    for (std::size_t i = inverse.size(); i-- > 0;) {
      if (segments & (std::size_t(1) << i)) {
        inverse[i].inverse(in + done * channels * bins, out + done * channels * 2 * partition,
                           stream);
        done += std::size_t(1) << i;
      }
    }
  }

  SpectralMacArgs mac_args(int bank, std::size_t segments, float2* out) {
    SpectralMacArgs a;
    a.new_spectra = new_spectra.get();
    a.ring = ring.get();
    a.ring_slots = ring_slots;
    a.filter = filters[bank].get();
    a.filter_channel_stride = filter_shared[bank] ? 0 : bins;
    a.filter_partition_stride = (filter_shared[bank] ? 1 : channels) * bins;
    a.out = out;
    a.first_segment = segment;
    a.segments = segments;
    a.channels = channels;
    a.bins = bins;
    a.first_partition = 0;
    a.end_partition = partitions;
    a.store_from = segments;  // none
    return a;
  }

  // Writes frames [first, first + frames) of each of `segments` inverse
  // transforms in `windows` to out, faded from `filtered_old` when it is set.
  void emit(const float* filtered_old, float* out, std::size_t out_stride, std::size_t segments,
            std::size_t first, std::size_t frames, std::size_t call_offset, std::size_t call_frames,
            cudaStream_t stream) const {
    EmitArgs a;
    a.filtered = windows.get();
    a.filtered_old = filtered_old;
    a.out = out;
    a.out_stride = out_stride;
    a.channels = channels;
    a.partition = partition;
    a.segments = segments;
    a.first = first;
    a.frames = frames;
    a.call_offset = call_offset;
    a.call_frames = call_frames;
    launch_emit(a, stream);
  }

  // Frames [offset, offset + frames) of the current segment, within one segment.
  void process_partial(const float* in, std::size_t in_stride, float* out, std::size_t out_stride,
                       std::size_t frames, std::size_t call_offset, std::size_t call_frames,
                       bool fading, cudaStream_t stream) {
    launch_write_stage(stage.get(), in, in_stride, channels, partition, offset, frames, stream);
    (fused ? single_forward : forward[0]).forward(stage.get(), new_spectra.get(), stream);
    const bool completes = offset + frames == partition;

    SpectralMacArgs mac = mac_args(current, 1, products.get());
    // A completed segment's spectrum is final: it joins the delay line.
    mac.store_from = completes ? 0 : 1;
    if (!fading && partitions > 1 && (tail_valid || !completes)) {
      if (!tail_valid) {
        SpectralMacArgs tail_mac = mac_args(current, 1, tail.get());
        tail_mac.new_spectra = nullptr;
        tail_mac.first_partition = 1;
        launch_spectral_mac(tail_mac, stream);
        tail_valid = true;
      }
      mac.end_partition = 1;
      mac.addend = tail.get();
    }
    launch_spectral_mac(mac, stream);
    if (fading) {
      SpectralMacArgs old_mac = mac_args(old, 1, products_old.get());
      launch_spectral_mac(old_mac, stream);
    }

    float* filtered_old = reinterpret_cast<float*>(new_spectra.get());
    const RealFftPlan& inverse_single = fused ? single_inverse : inverse[0];
    inverse_single.inverse(products.get(), windows.get(), stream);
    if (fading) inverse_single.inverse(products_old.get(), filtered_old, stream);

    emit(fading ? filtered_old : nullptr, out, out_stride, 1, offset, frames, call_offset,
         call_frames, stream);

    if (completes) {
      launch_advance_stage(stage.get(), channels, partition, stream);
      ++segment;
      offset = 0;
      tail_valid = false;
    } else {
      offset += frames;
    }
  }

  // `segments` whole segments from a segment boundary, current filters only,
  // through the fused plans: the windows, the multiply-accumulate and the
  // output copy happen inside cuFFT's loads and stores.
  void process_segments_fused(const float* in, std::size_t in_stride, float* out,
                              std::size_t out_stride, std::size_t segments, cudaStream_t stream) {
    FusedParams p{};
    p.in = in;
    p.in_stride = in_stride;
    p.stage = stage.get();
    p.window_base = windows.get();
    p.product_base = products.get();
    p.time_base = windows.get();
    p.out = out;
    p.out_stride = out_stride;
    p.new_spectra = new_spectra.get();
    p.ring = ring.get();
    p.ring_slots = ring_slots;
    p.filter = filters[current].get();
    p.filter_channel_stride = filter_shared[current] ? 0 : bins;
    p.filter_partition_stride = (filter_shared[current] ? 1 : channels) * bins;
    p.first_segment = segment;
    p.store_from = segments > partitions - 1 ? segments - (partitions - 1) : 0;
    p.partitions = partitions;
    p.channels = channels;
    p.partition = partition;
    p.bins = bins;
    launch_set_fused_params(fused_params.get(), p, stream);
    // Inputs and outputs named here are never touched: the callbacks read and
    // write the real data; the pointers only tell them the batch.
    run_forward(windows.get(), new_spectra.get(), segments, stream);
    run_inverse(products.get(), windows.get(), segments, stream);
    // After the forward FFTs have read the stage's previous segment.
    launch_keep_last_segment(stage.get(), in, in_stride, channels, partition, segments, stream);
    segment += std::int64_t(segments);
    tail_valid = false;
  }

  // `segments` whole segments from a segment boundary, current filters only,
  // one partition: the whole overlap-save in one kernel. The stage's previous
  // segment feeds the first window; then the stage keeps this run's last
  // segment, exactly as process_segments leaves it (K == 1 stores nothing in
  // the delay line: no later output reads an older spectrum).
  void process_segments_kernel(const float* in, std::size_t in_stride, float* out,
                               std::size_t out_stride, std::size_t segments, cudaStream_t stream) {
    FusedOverlapSaveArgs f;
    f.in = in;
    f.in_stride = in_stride;
    f.history = stage.get();
    f.history_stride = 2 * partition;
    f.filter = filters[current].get();
    f.filter_channel_stride = filter_shared[current] ? 0 : bins;
    f.out = out;
    f.out_stride = out_stride;
    f.channels = channels;
    f.partition = partition;
    f.segments = segments;
    launch_fused_overlap_save(f, stream);
    launch_keep_last_segment(stage.get(), in, in_stride, channels, partition, segments, stream);
    segment += std::int64_t(segments);
    tail_valid = false;
  }

  // `segments` whole segments from a segment boundary, current filters only,
  // K > 1: the three shared-memory FFT kernels. The delay line supplies the
  // spectra before the run and keeps the run's last K - 1, and the stage keeps
  // the last segment, exactly as process_segments leaves them.
  void process_segments_kernels(const float* in, std::size_t in_stride, float* out,
                                std::size_t out_stride, std::size_t segments, cudaStream_t stream) {
    MultiPartitionArgs a;
    a.in = in;
    a.in_stride = in_stride;
    a.history = stage.get();
    a.history_stride = 2 * partition;
    a.spectra = new_spectra.get();
    a.products = products.get();
    a.ring = ring.get();
    a.ring_slots = ring_slots;
    a.filter = filters[current].get();
    a.filter_channel_stride = filter_shared[current] ? 0 : bins;
    a.filter_partition_stride = (filter_shared[current] ? 1 : channels) * bins;
    a.first_segment = segment;
    a.store_from = segments > partitions - 1 ? segments - (partitions - 1) : 0;
    a.out = out;
    a.out_stride = out_stride;
    a.channels = channels;
    a.partition = partition;
    a.partitions = partitions;
    a.segments = segments;
    a.multiprocessors = multiprocessors;
    launch_multi_partition_overlap_save(a, stream);
    launch_keep_last_segment(stage.get(), in, in_stride, channels, partition, segments, stream);
    segment += std::int64_t(segments);
    tail_valid = false;
  }

  // `segments` whole segments starting at a segment boundary.
  void process_segments(const float* in, std::size_t in_stride, float* out, std::size_t out_stride,
                        std::size_t segments, std::size_t call_offset, std::size_t call_frames,
                        bool fading, cudaStream_t stream) {
    launch_build_windows(windows.get(), in, in_stride, stage.get(), channels, partition, segments,
                         stream);
    launch_keep_last_segment(stage.get(), in, in_stride, channels, partition, segments, stream);
    run_forward(windows.get(), new_spectra.get(), segments, stream);

    SpectralMacArgs mac = mac_args(current, segments, products.get());
    // Later segments need the last K - 1 spectra of this run.
    mac.store_from = segments > partitions - 1 ? segments - (partitions - 1) : 0;
    launch_spectral_mac(mac, stream);
    if (fading) launch_spectral_mac(mac_args(old, segments, products_old.get()), stream);

    float* filtered_old = reinterpret_cast<float*>(new_spectra.get());
    run_inverse(products.get(), windows.get(), segments, stream);
    if (fading) run_inverse(products_old.get(), filtered_old, segments, stream);

    emit(fading ? filtered_old : nullptr, out, out_stride, segments, 0, partition, call_offset,
         call_frames, stream);

    segment += std::int64_t(segments);
    tail_valid = false;
  }
};

FftConvolver::FftConvolver(const FilterBank& bank, std::size_t max_taps,
                           std::size_t max_block_frames, std::size_t partition_frames,
                           bool fused_callbacks, bool use_fused_kernel)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  if (max_taps == 0) max_taps = bank.max_taps();
  if (bank.max_taps() > max_taps)
    throw std::invalid_argument("FFT convolver: filter of " + std::to_string(bank.max_taps()) +
                                " taps exceeds max_taps " + std::to_string(max_taps));
  if (max_block_frames == 0)
    throw std::invalid_argument("FFT convolver: max_block_frames must be at least 1");
  if (bank.channels() > 65535)
    throw std::invalid_argument("FFT convolver: " + std::to_string(bank.channels()) +
                                " channels exceed the limit of 65535");
  if (partition_frames != 0 && !std::has_single_bit(partition_frames))
    throw std::invalid_argument("FFT convolver: partition_frames " +
                                std::to_string(partition_frames) + " is not a power of two");

  s.channels = bank.channels();
  s.max_taps = max_taps;
  s.max_block_frames = max_block_frames;
  const std::size_t fused_partition =
      use_fused_kernel ? choose_fused_partition(max_block_frames, max_taps) : 0;
  const std::size_t segment_kernel_partition =
      use_fused_kernel && fused_partition == 0
          ? choose_segment_kernel_partition(max_block_frames, max_taps)
          : 0;
  s.partition = partition_frames != 0           ? partition_frames
                : fused_partition != 0          ? fused_partition
                : segment_kernel_partition != 0 ? segment_kernel_partition
                                                : choose_partition(max_block_frames, max_taps);
  s.bins = s.partition + 1;
  s.partitions = (max_taps + s.partition - 1) / s.partition;
  s.max_segments = std::max<std::size_t>(1, max_block_frames / s.partition);
  s.ring_slots = s.partitions - 1 + s.max_segments;

  const std::size_t window = 2 * s.partition;
  if (use_fused_kernel && s.partitions == 1 && fused_overlap_save_supports(s.partition)) {
    try {
      prepare_fused_overlap_save(s.partition);
      s.fused_kernel = true;
    } catch (const std::exception& error) {
      s.fused_kernel_failure = error.what();
    }
  }
  if (use_fused_kernel && s.partitions > 1 &&
      multi_partition_overlap_save_supports(s.partition, s.partitions)) {
    try {
      prepare_multi_partition_overlap_save(s.partition);
      int device = 0;
      TAPSTREAM_CUDA_CHECK(cudaGetDevice(&device));
      TAPSTREAM_CUDA_CHECK(
          cudaDeviceGetAttribute(&s.multiprocessors, cudaDevAttrMultiProcessorCount, device));
      s.segment_kernels = true;
    } catch (const std::exception& error) {
      s.fused_kernel_failure = error.what();
    }
  }
  // The fused kernels take every run of whole segments the callbacks would.
  if (s.fused_kernel || s.segment_kernels) fused_callbacks = false;
  if (fused_callbacks) {
    // Any failure (no NVRTC, no JIT linker, a plan the library cannot make
    // with callbacks) leaves the plain path, and says why.
    try {
      s.fused_params = DeviceBuffer<FusedParams>(1);
      s.fused_params_pointer = s.fused_params.get();
      const std::vector<char>& ltoir = fused_callbacks_ltoir();
      const FftCallback load_window[] = {{kLoadWindowSymbol, CUFFT_CB_LD_REAL}};
      const FftCallback product_to_output[] = {{kLoadProductSymbol, CUFFT_CB_LD_COMPLEX},
                                               {kStoreOutputSymbol, CUFFT_CB_ST_REAL}};
      for (std::size_t batch = 1; batch <= s.max_segments; batch *= 2) {
        s.forward.emplace_back(window, batch * s.channels, CUFFT_R2C, load_window, &ltoir,
                               &s.fused_params_pointer);
        s.inverse.emplace_back(window, batch * s.channels, CUFFT_C2R, product_to_output, &ltoir,
                               &s.fused_params_pointer);
      }
      s.single_forward = RealFftPlan(window, s.channels, CUFFT_R2C);
      s.single_inverse = RealFftPlan(window, s.channels, CUFFT_C2R);
      s.fused = true;
    } catch (const std::exception& error) {
      s.fused_failure = error.what();
      s.forward.clear();
      s.inverse.clear();
    }
  }
  if (!s.fused) {
    for (std::size_t batch = 1; batch <= s.max_segments; batch *= 2) {
      s.forward.emplace_back(window, batch * s.channels, CUFFT_R2C);
      s.inverse.emplace_back(window, batch * s.channels, CUFFT_C2R);
    }
  }
  std::size_t work_bytes = 0;
  for (const auto& plan : s.forward) work_bytes = std::max(work_bytes, plan.work_bytes());
  for (const auto& plan : s.inverse) work_bytes = std::max(work_bytes, plan.work_bytes());
  if (s.fused) {
    work_bytes =
        std::max({work_bytes, s.single_forward.work_bytes(), s.single_inverse.work_bytes()});
  }
  s.work = DeviceBuffer<unsigned char>(std::max<std::size_t>(work_bytes, 1));
  for (auto& plan : s.forward) plan.attach_work_area(s.work.get());
  for (auto& plan : s.inverse) plan.attach_work_area(s.work.get());
  if (s.fused) {
    s.single_forward.attach_work_area(s.work.get());
    s.single_inverse.attach_work_area(s.work.get());
  }

  const std::size_t spectra = s.max_segments * s.channels * s.bins;
  s.stage = DeviceBuffer<float>(s.channels * window);
  s.windows = DeviceBuffer<float>(s.max_segments * s.channels * window);
  s.new_spectra = DeviceBuffer<float2>(spectra);
  s.products = DeviceBuffer<float2>(spectra);
  s.products_old = DeviceBuffer<float2>(spectra);
  s.ring = DeviceBuffer<float2>(s.ring_slots * s.channels * s.bins);
  s.tail = DeviceBuffer<float2>(s.channels * s.bins);
  for (auto& f : s.filters) f = DeviceBuffer<float2>(s.partitions * s.channels * s.bins);

  // The legacy default stream orders these before any later work on blocking
  // streams; set_filters() below synchronises the device anyway.
  s.stage.zero(nullptr);
  s.ring.zero(nullptr);
  set_filters(bank, false);
}

FftConvolver::~FftConvolver() = default;

void FftConvolver::process(const DeviceBlock& block, cudaStream_t stream) {
  State& s = *state_;
  if (block.in.frame_stride != 1 || block.out_frame_stride != 1)
    throw std::invalid_argument("FFT convolver: planar blocks only (frame strides in " +
                                std::to_string(block.in.frame_stride) + ", out " +
                                std::to_string(block.out_frame_stride) + ")");
  const float* in = block.in.data;
  const std::size_t in_stride = std::size_t(block.in.channel_stride);
  float* out = block.out;
  const std::size_t out_stride = std::size_t(block.out_channel_stride);
  const std::size_t frames = block.frames;
  if (frames == 0 || frames > s.max_block_frames)
    throw std::invalid_argument("FFT convolver: block of " + std::to_string(frames) +
                                " frames is outside 1.." + std::to_string(s.max_block_frames));
  if (s.channels > 1 && (in_stride < frames || out_stride < frames))
    throw std::invalid_argument("FFT convolver: channel stride (in " + std::to_string(in_stride) +
                                ", out " + std::to_string(out_stride) + ") is below the " +
                                std::to_string(frames) + " frames of the block");
  const bool fading = s.crossfade_pending;
  std::size_t done = 0;
  while (done < frames) {
    const std::size_t left = frames - done;
    if (s.offset > 0 || left < s.partition) {
      const std::size_t piece = std::min(left, s.partition - s.offset);
      s.process_partial(in + done, in_stride, out + done, out_stride, piece, done, frames, fading,
                        stream);
      done += piece;
    } else if (s.fused_kernel && !fading) {
      const std::size_t segments = std::min(left / s.partition, s.max_segments);
      s.process_segments_kernel(in + done, in_stride, out + done, out_stride, segments, stream);
      done += segments * s.partition;
    } else if (s.segment_kernels && !fading) {
      const std::size_t segments = std::min(left / s.partition, s.max_segments);
      s.process_segments_kernels(in + done, in_stride, out + done, out_stride, segments, stream);
      done += segments * s.partition;
    } else if (s.fused && fading) {
      // A crossfade needs both filters' outputs: the plain single-segment path.
      s.process_partial(in + done, in_stride, out + done, out_stride, s.partition, done, frames,
                        fading, stream);
      done += s.partition;
    } else {
      const std::size_t segments = std::min(left / s.partition, s.max_segments);
      if (s.fused) {
        s.process_segments_fused(in + done, in_stride, out + done, out_stride, segments, stream);
      } else {
        s.process_segments(in + done, in_stride, out + done, out_stride, segments, done, frames,
                           fading, stream);
      }
      done += segments * s.partition;
    }
  }
  s.crossfade_pending = false;
}

void FftConvolver::set_filters(const FilterBank& bank, bool crossfade) {
  State& s = *state_;
  if (bank.channels() != s.channels)
    throw std::invalid_argument("FFT convolver: new filter bank has " +
                                std::to_string(bank.channels()) + " channels, the stream has " +
                                std::to_string(s.channels));
  if (bank.max_taps() > s.max_taps)
    throw std::invalid_argument("FFT convolver: new filter of " + std::to_string(bank.max_taps()) +
                                " taps exceeds max_taps " + std::to_string(s.max_taps));

  // Zero-padded partitions [K][filters][2P], scaled by the inverse FFT's 1/(2P).
  const std::size_t filters = bank.is_shared() ? 1 : s.channels;
  const std::size_t window = 2 * s.partition;
  const float scale = 1.0f / float(window);
  std::vector<float> padded(s.partitions * filters * window, 0.0f);
  for (std::size_t f = 0; f < filters; ++f) {
    const auto taps = bank.taps(f);
    for (std::size_t k = 0; k < taps.size(); ++k) {
      const std::size_t j = k / s.partition;
      padded[(j * filters + f) * window + k % s.partition] = taps[k] * scale;
    }
  }
  DeviceBuffer<float> time_domain(padded.size());
  RealFftPlan plan(window, s.partitions * filters, CUFFT_R2C);
  DeviceBuffer<unsigned char> plan_work(std::max<std::size_t>(plan.work_bytes(), 1));
  plan.attach_work_area(plan_work.get());

  // No kernel still reading the bank about to be overwritten.
  TAPSTREAM_CUDA_CHECK(cudaDeviceSynchronize());
  int target = s.current;
  if (crossfade && !s.crossfade_pending) {
    s.old = s.current;
    target = 1 - s.current;
  }
  TAPSTREAM_CUDA_CHECK(
      cudaMemcpy(time_domain.get(), padded.data(), time_domain.bytes(), cudaMemcpyHostToDevice));
  plan.forward(time_domain.get(), s.filters[target].get(), nullptr);
  TAPSTREAM_CUDA_CHECK(cudaDeviceSynchronize());
  s.filter_shared[target] = bank.is_shared();
  s.current = target;
  s.crossfade_pending = crossfade;
  s.tail_valid = false;
}

void FftConvolver::reset(cudaStream_t stream) {
  State& s = *state_;
  s.stage.zero(stream);
  s.ring.zero(stream);
  s.segment = 0;
  s.offset = 0;
  s.tail_valid = false;
}

std::size_t FftConvolver::partition_frames() const {
  return state_->partition;
}

std::size_t FftConvolver::partitions() const {
  return state_->partitions;
}

bool FftConvolver::fused() const {
  return state_->fused;
}

bool FftConvolver::fused_kernel() const {
  return state_->fused_kernel;
}

bool FftConvolver::segment_kernels() const {
  return state_->segment_kernels;
}

std::string FftConvolver::description() const {
  const State& s = *state_;
  std::ostringstream text;
  text << "partitioned FFT (cuFFT), " << 2 * s.partition << "-point, " << s.partitions
       << (s.partitions == 1 ? " partition" : " partitions") << " of " << s.partition << " frames, "
       << s.channels << (s.channels == 1 ? " channel" : " channels")
       << (s.filter_shared[s.current] ? ", shared filter" : ", per-channel filters")
       << (s.fused_kernel ? ", fused overlap-save kernel"
           : s.segment_kernels
               ? ", shared-memory FFT kernels with a sliding MAC over the partitions"
           : s.fused ? ", fused cuFFT callbacks"
                     : ", separate kernels");
  if (!s.fused_kernel_failure.empty())
    text << " (fused overlap-save kernels unavailable: " << s.fused_kernel_failure << ")";
  if (!s.fused_failure.empty()) text << " (fused path unavailable: " << s.fused_failure << ")";
  return text.str();
}

}  // namespace tapstream::cuda

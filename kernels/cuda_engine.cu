// The CUDA engine: direct form (kernels/device/direct_kernels) or partitioned
// FFT (kernels/convolvers/fft_convolver) behind the Engine interface.
//
// Filter state on the device: each channel's history (the last max_taps - 1 input
// samples) lives in one of two device buffers; block k reads history[h] and its
// own input, and a carry kernel writes history[1 - h] for block k + 1. So block
// k + 1's input can be copied in while block k is filtered, and the only chain
// between blocks is "filter + carry of k before filter of k + 1" (the chain_
// event); copies in and out of different blocks overlap freely on the streams.
//
// Taps: two banks (constant memory when they fit, always a global copy too); a
// new bank is uploaded, ordered after every kernel already enqueued (so after any
// kernel reading that bank), and the blocks switch banks at the next block
// boundary; with crossfade that block is filtered twice (old, then new blended).
//
// Threads: an engine is used by one thread at a time (dsp/engine.hpp).

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "dsp/engine_tuning.hpp"
#include "kernels/convolvers/fft_convolver.hpp"
#include "kernels/convolvers/partitioned_convolver.hpp"
#include "kernels/convolvers/persistent_direct.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/cuda_engine.hpp"
#include "kernels/cuda_resources.hpp"
#include "kernels/device/architecture_probe.hpp"
#include "kernels/device/direct_kernels.hpp"

namespace tapstream {

namespace {

using cuda::DeviceBuffer;
using cuda::DeviceGuard;
using cuda::DirectArgs;
using cuda::DirectKernel;
using cuda::Event;
using cuda::PinnedBuffer;
using cuda::SampleView;
using cuda::Stream;

std::size_t round_up(std::size_t n, std::size_t m) {
  return (n + m - 1) / m * m;
}

// EngineOptions::kernel naming the non-uniformly partitioned path (forced,
// whatever the cost model says).
constexpr const char* kPartitionedKernel = "partitioned";
// Larger calls are cut into chunks of at least this many samples, pipelined over
// the streams.
constexpr std::size_t kMinChunkSamples = 65536;
// Device staging per stream holds at most this many frames per channel.
constexpr std::size_t kMaxSlotFrames = 131072;

// Cost model for Algorithm::automatic, in microseconds per call of F frames:
//   direct = C F M / kDirectMacsPerUs (x kGlobalTapsPenalty for global taps) + kLaunchUs
//   fft    = C F (16 M / P + kFftBytesPerSample) / kBytesPerUs + kFftLaunches kLaunchUs
// (M taps, P the FFT partition). The FFT term is its memory traffic: the
// frequency-domain delay line and the filter spectra (8 bytes per bin each, M/P
// partitions) plus the transforms. Calibrated on an H100 (8 ch x 2^21 frames,
// one call, device events): tuned direct 0.252 ms at 256 taps and 1.84 ms at
// 2048 (model: 0.22 and 1.72), FFT 0.53 to 0.61 ms from 256 to 16384 taps
// (model: 0.68); the crossover falls between 256 and 2048 taps at large blocks,
// and further out for short blocks, where launches dominate.
constexpr double kDirectMacsPerUs = 1.9e7;
constexpr double kGlobalTapsPenalty = 1.2;
constexpr double kBytesPerUs = 2.0e6;
constexpr double kFftBytesPerSample = 64.0;
constexpr double kLaunchUs = 3.0;
constexpr double kFftLaunches = 4.0;

// Whether Algorithm::automatic may choose the non-uniformly partitioned path
// (for calls of at most kMaxPartitionedBlock frames, where its head in direct
// form stays short). On: its exactness suites and compute-sanitizer passed on
// the H100/H200 and it measured 17 us p50 at 8 ch x 64 frames x 65536 taps
// against 118 us for the direct form the cost model chose before (see
// docs/performance.md, "Issue 8"). EngineOptions::cuda.partitioned = false
// turns it off.
constexpr std::size_t kMaxPartitionedBlock = 1024;
// The models above count work and assume the device full; with few channels
// and short calls the direct and uniform FFT paths are latency-bound instead:
// each output walks all M taps one after another, each FFT bin all M / P
// partitions. Measured on the H100/H200 (2026-11-23): direct 8 ch x 64 frames
// x 65536 taps 118 us (model 24), 2 x 256 x 2048 14.7 us = the 11 us round
// trip + 3.7; the automatic choice at 1-4 ch x 256 frames x 262144 taps
// (1024 partitions) 316 us. Used only to weigh the partitioned path, whose
// model is measured per step, against them.
constexpr double kDirectSerialUsPerTap = 1.8e-3;
constexpr double kFftSerialUsPerPartition = 0.3;

// How a small call (zero-copy, direct form) reaches the device and is waited
// for. EngineOptions::cuda.small_calls picks one (for measurements);
// persistent is the default: the fastest of the three at every
// small shape measured (H100, docs/performance.md "Small calls under the
// launch floor": 2 ch x 256 frames x 2048 taps 13.1 / 19.1 us p50 / p99
// against 16.8 / 28.5 for a launch). Calls the persistent kernel cannot take
// (a swap's crossfade, too much work for its few blocks) fall back to a
// launch with a spin wait.
using SmallCalls = CudaSmallCalls;
constexpr SmallCalls kDefaultSmallCalls = SmallCalls::persistent;
// The persistent kernel holds this many blocks (one SM each at most) while
// the stream runs, and takes a call only when each block's share of the
// multiply-adds stays near a microsecond (2^18 at ~64 per clock is 2 us);
// larger work is faster spread over a whole grid by a launch.
constexpr int kPersistentMaxBlocks = 16;
constexpr long long kPersistentMaxMacsPerBlock = 1 << 18;

double direct_cost_us(std::size_t C, std::size_t F, std::size_t M, bool global) {
  return double(C) * double(F) * double(M) / kDirectMacsPerUs *
             (global ? kGlobalTapsPenalty : 1.0) +
         kLaunchUs;
}

// The fused overlap-save kernel (one partition, whole segments) moves fewer
// bytes but grows with its in-shared-memory FFT; its cost as bytes per sample at
// kBytesPerUs, from the H100 measurements of 8 ch x 2^22 frames (0.30 ms up to
// P = 4096, 0.48 ms at 8192, 0.55 ms at 16384).
double fused_bytes_per_sample(std::size_t P) {
  if (P <= 4096) return 18.5;
  return P <= 8192 ? 28.5 : 32.6;
}

double fft_cost_us(std::size_t C, std::size_t F, std::size_t M, const cuda::FftConvolver& fft) {
  const std::size_t P = fft.partition_frames();
  if (fft.fused_kernel() && fft.partitions() == 1 && F >= P) {
    return double(C) * double(F) * fused_bytes_per_sample(P) / kBytesPerUs + kLaunchUs;
  }
  // The multi-partition kernels: the same two shared-memory transforms, plus
  // the spectra's round trips through device memory (X and Y, each written and
  // read: 32 bytes a sample). Measured on an H100 (8 ch x 2^22 frames, 4096-frame
  // partitions): 0.636 ms at 65536 taps, 0.768 at 131072, where this says 0.86:
  // pessimistic by 10-25 %, which only ever favours this path's rivals.
  if (fft.segment_kernels() && F >= P) {
    return double(C) * double(F) * (fused_bytes_per_sample(P) + 32.0) / kBytesPerUs +
           3.0 * kLaunchUs;
  }
  return double(C) * double(F) * (16.0 * double(M) / double(P) + kFftBytesPerSample) / kBytesPerUs +
         kFftLaunches * kLaunchUs;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return "device " + std::to_string(device);
  return prop.name;
}

class CudaEngineImpl final : public CudaEngine {
 public:
  CudaEngineImpl(const FilterBank& bank, const EngineOptions& options)
      : channels_(bank.channels()),
        max_block_frames_(options.max_block_frames),
        max_taps_(options.max_taps ? options.max_taps : bank.max_taps()),
        device_(options.device),
        force_partitioned_(options.kernel == kPartitionedKernel),
        kernel_(cuda::parse_direct_kernel(force_partitioned_ ? "auto" : options.kernel)),
        tuning_(options.cuda) {
    if (max_block_frames_ == 0) throw std::invalid_argument("max_block_frames must be at least 1");
    if (options.streams < 1 || options.streams > 16)
      throw std::invalid_argument("streams must be 1..16, got " + std::to_string(options.streams));
    if (max_taps_ < bank.max_taps())
      throw std::invalid_argument("max_taps " + std::to_string(max_taps_) +
                                  " is below the bank's " + std::to_string(bank.max_taps()) +
                                  " taps");
    if (max_taps_ > (std::size_t(1) << 30) || max_block_frames_ > (std::size_t(1) << 30))
      throw std::invalid_argument("max_taps and max_block_frames must be below 2^30");
    check_cuda_options(tuning_);
    if (tuning_.small_calls != SmallCalls::automatic) small_calls_ = tuning_.small_calls;

    int count = 0;
    TAPSTREAM_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (device_ < 0 || device_ >= count)
      throw std::invalid_argument("CUDA device " + std::to_string(device_) + " does not exist (" +
                                  std::to_string(count) + " found)");
    DeviceGuard guard(device_);
    TAPSTREAM_CUDA_CHECK(
        cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, device_));
    device_name_ = device_name(device_);

    // The engine's streams run ahead of the partitioned path's tail stream.
    int least_priority = 0, greatest_priority = 0;
    TAPSTREAM_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
    for (int s = 0; s < options.streams; ++s) streams_.emplace_back(greatest_priority);
    stream_priority_ = greatest_priority;
    slot_frames_ = std::min(max_block_frames_, kMaxSlotFrames);
    const std::size_t block_samples = channels_ * max_block_frames_;
    pinned_in_ = PinnedBuffer<float>(block_samples, /*mapped=*/true);
    pinned_out_ = PinnedBuffer<float>(block_samples, /*mapped=*/true);
    for (std::size_t s = 0; s < streams_.size(); ++s) {
      slot_in_.emplace_back(channels_ * slot_frames_);
      slot_out_.emplace_back(channels_ * slot_frames_);
      done_.emplace_back();
    }
    for (std::size_t i = 0; i < 2 * streams_.size() + 2; ++i) chunk_done_.emplace_back();

    choose_algorithm(bank, options.algorithm);

    if (fft_) {
      for (std::size_t s = 0; s < streams_.size(); ++s) {
        fft_in_.emplace_back(channels_ * slot_frames_);
        fft_out_.emplace_back(channels_ * slot_frames_);
      }
    } else if (!partitioned_) {
      history_len_ = int(max_taps_ - 1);
      history_end_ = int(round_up(std::size_t(history_len_), 4));
      for (auto& h : history_) {
        h = DeviceBuffer<float>(channels_ * std::size_t(history_end_));
        h.zero(streams_[0].get());
      }
      const std::size_t capacity = channels_ * round_up(max_taps_, cuda::kTapPadding);
      for (auto& b : banks_) {
        b.global = DeviceBuffer<float>(capacity);
        b.staging = PinnedBuffer<float>(capacity);
      }
      upload(bank, 0);
      active_ = 0;
      pending_.reset();
    }
    chain_.record(streams_[0].get());
    chain_stream_ = 0;
    synchronize();
  }

  ~CudaEngineImpl() override {
    persistent_.reset();  // stops the kernel
    for (auto& s : streams_) cudaStreamSynchronize(s.get());
    if (partitioned_) partitioned_->synchronize();
  }

  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout layout) override {
    check_frames(frames);
    const std::size_t n = channels_ * frames;
    if (in.size() < n || out.size() < n)
      throw std::invalid_argument("process: " + std::to_string(frames) + " frames of " +
                                  std::to_string(channels_) + " channels need " +
                                  std::to_string(n) + " samples, got " + std::to_string(in.size()) +
                                  " in and " + std::to_string(out.size()) + " out");
    const auto call_start = std::chrono::steady_clock::now();
    DeviceGuard guard(device_);
    const bool in_staged = in.data() == pinned_in_.get();
    const bool out_staged = out.data() == pinned_out_.get();

    if (n <= tuning_.zero_copy_samples) {
      if (!in_staged) std::memcpy(pinned_in_.get(), in.data(), n * sizeof(float));
      if (start_persistent()) {
        note_enqueued(call_start);
        if (persistent_->call(int(frames), layout == Layout::planar, history_index_)) {
          if (history_len_ > 0) history_index_ = 1 - history_index_;
          if (!out_staged) std::memcpy(out.data(), pinned_out_.get(), n * sizeof(float));
          return;
        }
        persistent_failed_ = true;  // from now on a launch per call (below)
      }
      stop_persistent();
      const SampleView x = view(pinned_in_.device_pointer(), layout, frames, 0);
      const SampleView y = view(pinned_out_.device_pointer(), layout, frames, 0);
      filter(0, x, const_cast<float*>(y.data), y.channel_stride, y.frame_stride, frames, 0, frames,
             /*mapped=*/true);
      done_[0].record(streams_[0].get());
      end_block();
      note_enqueued(call_start);
      if (small_calls_ == SmallCalls::event)
        done_[0].synchronize();
      else
        spin_until(done_[0]);
      if (!out_staged) std::memcpy(out.data(), pinned_out_.get(), n * sizeof(float));
      return;
    }
    stop_persistent();

    // Chunks pipelined over the streams: chunk i on stream i % S, its own device
    // slot; chunk i - E is drained (waited for and copied out) before chunk i is
    // enqueued so that host copies overlap device work too. The caller's own
    // page-locked buffers are copied from and to directly; pageable ones go
    // through the pinned staging, so that the copies stay asynchronous.
    const float* host_in = in_staged || is_page_locked(in.data()) ? in.data() : pinned_in_.get();
    float* host_out = out_staged || is_page_locked(out.data()) ? out.data() : pinned_out_.get();
    const bool stage_in = host_in != in.data();
    const bool stage_out = host_out != out.data();
    const std::size_t S = streams_.size();
    std::size_t chunk =
        std::max((frames + 2 * S - 1) / (2 * S), (kMinChunkSamples + channels_ - 1) / channels_);
    chunk = std::min(round_up(chunk, 64), slot_frames_);
    const std::size_t chunks = (frames + chunk - 1) / chunk;
    const std::size_t E = chunk_done_.size();
    std::size_t drained = 0;
    auto drain = [&](std::size_t i) {
      const std::size_t a = i * chunk, b = std::min(frames, a + chunk);
      chunk_done_[i % E].synchronize();
      if (stage_out) copy_host(out.data(), pinned_out_.get(), layout, frames, a, b);
    };
    for (std::size_t i = 0; i < chunks; ++i) {
      if (i >= E) drain(drained++);
      const std::size_t a = i * chunk, b = std::min(frames, a + chunk);
      const std::size_t m = b - a;
      const std::size_t s = i % S;
      cudaStream_t stream = streams_[s].get();
      if (stage_in) copy_host(pinned_in_.get(), in.data(), layout, frames, a, b);
      copy_2d(slot_in_[s].get(), host_in, layout, frames, a, m, cudaMemcpyHostToDevice, stream);
      const SampleView x = view(slot_in_[s].get(), layout, m, 0);
      const SampleView y = view(slot_out_[s].get(), layout, m, 0);
      filter(s, x, slot_out_[s].get(), y.channel_stride, y.frame_stride, m, a, frames, false);
      copy_2d(host_out, slot_out_[s].get(), layout, frames, a, m, cudaMemcpyDeviceToHost, stream);
      chunk_done_[i % E].record(stream);
    }
    end_block();
    note_enqueued(call_start);
    while (drained < chunks) drain(drained++);
  }

  void process_device(const float* d_in, float* d_out, std::size_t frames,
                      std::size_t channel_stride) override {
    check_frames(frames);
    if (channel_stride < frames && channels_ > 1)
      throw std::invalid_argument("process_device: channel_stride " +
                                  std::to_string(channel_stride) + " is below frames " +
                                  std::to_string(frames));
    DeviceGuard guard(device_);
    stop_persistent();
    const SampleView x{d_in, (long long)channel_stride, 1};
    filter(0, x, d_out, (long long)channel_stride, 1, frames, 0, frames, false);
    end_block();
  }

  void set_filters(const FilterBank& bank, bool crossfade) override {
    if (bank.channels() != channels_)
      throw std::invalid_argument("set_filters: the bank has " + std::to_string(bank.channels()) +
                                  " channels, the engine " + std::to_string(channels_));
    if (bank.max_taps() > max_taps_)
      throw std::invalid_argument("set_filters: the bank has " + std::to_string(bank.max_taps()) +
                                  " taps, the engine holds at most " + std::to_string(max_taps_));
    DeviceGuard guard(device_);
    stop_persistent();
    if (partitioned_) {
      partitioned_->set_filters(bank, crossfade);
      return;
    }
    if (fft_) {
      synchronize();
      fft_->set_filters(bank, crossfade);
      return;
    }
    // A swap not yet taken by a block is replaced; its bank is the one to reuse.
    const int b = pending_ ? *pending_ : 1 - active_;
    upload(bank, b);
    pending_ = b;
    crossfade_ = crossfade;
  }

  void reset() override {
    DeviceGuard guard(device_);
    stop_persistent();
    cudaStream_t stream = streams_[0].get();
    wait_chain(0);
    if (partitioned_) {
      partitioned_->reset(stream);
    } else if (fft_) {
      fft_->reset(stream);
    } else {
      for (auto& h : history_) h.zero(stream);
    }
    chain_.record(stream);
    chain_stream_ = 0;
  }

  void synchronize() override {
    DeviceGuard guard(device_);
    for (auto& s : streams_) s.synchronize();
    if (partitioned_) partitioned_->synchronize();
  }

  CUstream_st* stream() const override { return streams_[0].get(); }
  double last_call_host_us() const override { return last_call_host_us_; }

  std::span<float> pinned_input() override { return {pinned_in_.get(), pinned_in_.size()}; }
  std::span<float> pinned_output() override { return {pinned_out_.get(), pinned_out_.size()}; }

  std::size_t channels() const override { return channels_; }
  std::size_t max_block_frames() const override { return max_block_frames_; }
  std::size_t max_taps() const override { return max_taps_; }
  std::string name() const override { return "cuda"; }
  Algorithm algorithm() const override { return algorithm_; }
  std::string kernel() const override {
    return algorithm_ == Algorithm::fft ? std::string() : cuda::direct_kernel_name(kernel_);
  }
  std::string taps_memory() const override {
    if (algorithm_ == Algorithm::fft) return "fft";
    const int b = pending_ ? *pending_ : active_;
    return banks_[b].in_constant && kernel_ != DirectKernel::naive ? "constant" : "global";
  }

  std::string description() const override {
    std::ostringstream d;
    d << "cuda (" << device_name_ << "): ";
    if (partitioned_) {
      d << partitioned_->description();
    } else if (algorithm_ == Algorithm::fft) {
      d << fft_->description();
    } else {
      d << "direct form, kernel " << kernel() << ", taps in " << taps_memory() << " memory";
      if (taps_memory() == "global" && kernel_ != DirectKernel::naive)
        d << " (" << channels_ << " ch x " << max_taps_ << " taps exceed a constant bank of "
          << cuda::kConstantBankFloats << " floats)";
    }
    d << ", " << streams_.size() << " streams, zero-copy up to " << tuning_.zero_copy_samples
      << " samples per call (" << small_calls_description() << ")";
    if (!choice_note_.empty()) d << "; " << choice_note_;
    return d.str();
  }

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

  void check_frames(std::size_t frames) const {
    if (frames == 0 || frames > max_block_frames_)
      throw std::invalid_argument("process: " + std::to_string(frames) + " frames, expected 1.." +
                                  std::to_string(max_block_frames_));
  }

  void choose_algorithm(const FilterBank& bank, Algorithm requested) {
    const std::size_t C = channels_, F = max_block_frames_, M = max_taps_;
    const bool fits_constant =
        (bank.is_shared() ? 1 : C) * round_up(M, cuda::kTapPadding) <= cuda::kConstantBankFloats;
    if (requested == Algorithm::direct) {
      algorithm_ = Algorithm::direct;
      return;
    }
    if (force_partitioned_) {
      partitioned_ = std::make_unique<cuda::PartitionedConvolver>(
          bank, M, F, cuda::plan_gpu_partitions(C, F, M));
      algorithm_ = Algorithm::fft;
      choice_note_ = "partitioned path requested";
      return;
    }
    if (requested == Algorithm::fft) {
      fft_ = std::make_unique<cuda::FftConvolver>(bank, M, F, tuning_.fft_partition,
                                                  /*fused_callbacks=*/false, tuning_.fft_fused);
      algorithm_ = Algorithm::fft;
      return;
    }
    // automatic: very short filters never pay for the transforms.
    if (M <= 64) {
      algorithm_ = Algorithm::direct;
      choice_note_ = "direct by cost model";
      return;
    }
    try {
      auto fft = std::make_unique<cuda::FftConvolver>(bank, M, F, tuning_.fft_partition,
                                                      /*fused_callbacks=*/false, tuning_.fft_fused);
      const double fft_us = fft_cost_us(C, F, M, *fft);
      const double direct_us = direct_cost_us(C, F, M, !fits_constant);
      std::ostringstream note;
      note.precision(3);
      note << "cost model: direct " << direct_us << " us, FFT " << fft_us << " us per " << F
           << "-frame block";
      // Streaming with long filters and short calls: the non-uniform plan,
      // when it has a tail at all and its per-call share of the work is the least.
      if (F <= kMaxPartitionedBlock && tuning_.partitioned) {
        PartitionPlan plan = cuda::plan_gpu_partitions(C, F, M);
        const double partitioned_us =
            plan.cost_ns_per_frame(cuda::GpuPartitionCosts(C)) * double(F) / 1000.0;
        note << ", partitioned " << partitioned_us << " us";
        const double direct_latency_us =
            std::max(direct_us, double(M) * kDirectSerialUsPerTap + kLaunchUs);
        const double fft_latency_us =
            std::max(fft_us, double(fft->partitions()) * kFftSerialUsPerPartition);
        if (plan.segments.size() > 1 &&
            partitioned_us < std::min(fft_latency_us, direct_latency_us)) {
          choice_note_ = note.str();
          partitioned_ = std::make_unique<cuda::PartitionedConvolver>(bank, M, F, std::move(plan));
          algorithm_ = Algorithm::fft;
          return;
        }
      }
      choice_note_ = note.str();
      if (fft_us < direct_us) {
        fft_ = std::move(fft);
        algorithm_ = Algorithm::fft;
        return;
      }
    } catch (const std::exception& e) {
      choice_note_ = std::string("FFT path unavailable (") + e.what() + "), direct form";
    }
    algorithm_ = Algorithm::direct;
  }

  // Packs `bank` into staging, then uploads it (global copy, constant bank when
  // it fits) on stream 0 after every kernel enqueued so far.
  void upload(const FilterBank& bank, int b) {
    TapBank& tb = banks_[b];
    tb.uploaded.synchronize();  // the previous upload from this staging is done
    const std::size_t padded = round_up(bank.max_taps(), cuda::kTapPadding);
    const std::size_t rows = bank.is_shared() ? 1 : channels_;
    float* dst = tb.staging.get();
    std::fill(dst, dst + rows * padded, 0.0f);
    for (std::size_t r = 0; r < rows; ++r) {
      const auto taps = bank.taps(r);
      std::copy(taps.begin(), taps.end(), dst + r * padded);
    }
    tb.taps = int(bank.max_taps());
    tb.taps_padded = int(padded);
    tb.channel_stride = bank.is_shared() ? 0 : (long long)padded;
    tb.in_constant = rows * padded <= cuda::kConstantBankFloats;
    cudaStream_t stream = streams_[0].get();
    wait_chain(0);
    TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(tb.global.get(), dst, rows * padded * sizeof(float),
                                         cudaMemcpyHostToDevice, stream));
    if (tb.in_constant) cuda::upload_constant_bank(b, dst, rows * padded, stream);
    tb.uploaded.record(stream);
    chain_.record(stream);
    chain_stream_ = 0;
  }

  // Starts the persistent kernel for small calls unless it runs already;
  // false when small calls take a launch each instead (another mode, not the
  // tuned direct form, a swap to crossfade, or too much work for its blocks).
  bool start_persistent() {
    if (small_calls_ != SmallCalls::persistent || persistent_failed_) return false;
    if (algorithm_ != Algorithm::direct || kernel_ != DirectKernel::tuned || pending_) return false;
    if (persistent_ && persistent_->running()) return true;
    const SampleView x = view(pinned_in_.device_pointer(), Layout::interleaved, 0, 0);
    DirectArgs a = direct_args(x, pinned_out_.device_pointer(), 1, (long long)channels_,
                               max_block_frames_, active_);
    const cuda::PersistentShape shape = cuda::persistent_tuned_shape(a, kPersistentMaxBlocks);
    const long long macs_per_block =
        (long long)shape.P * 8 * (long long)banks_[active_].taps_padded;
    if (shape.blocks == 0 || macs_per_block > kPersistentMaxMacsPerBlock) return false;
    if (!persistent_)
      persistent_ = std::make_unique<cuda::PersistentDirect>(
          stream_priority_, tuning_.persistent_idle,
          cuda::PersistentDirect::Diagnostics{tuning_.persistent_answer, tuning_.persistent_trace,
                                              tuning_.persistent_loads});
    persistent_->start(a, shape, history_[0].get(), history_[1].get(), chain_);
    return true;
  }

  // Before any other work: the persistent kernel returns (after its last
  // carry), so that nothing else runs beside it on the history.
  void stop_persistent() {
    if (persistent_) persistent_->stop();
  }

  // Waits for `event` by polling it: no sleep and wake-up in the driver.
  static void spin_until(const Event& event) {
    for (;;) {
      const cudaError_t state = cudaEventQuery(event.get());
      if (state == cudaSuccess) return;
      if (state != cudaErrorNotReady)
        cuda::throw_cuda_error(state, "cudaEventQuery(small call's event)", __FILE__, __LINE__);
    }
  }

  std::string small_calls_description() const {
    if (persistent_failed_)
      return "small calls: the persistent kernel did not answer; a launch each";
    switch (small_calls_) {
      case SmallCalls::persistent:
        if (persistent_) return "small calls: " + persistent_->description();
        return algorithm_ == Algorithm::direct && kernel_ == DirectKernel::tuned
                   ? "small calls: persistent kernel where its blocks fit"
                   : "small calls: a launch each, spin wait";
      case SmallCalls::spin:
        return "small calls: a launch each, spin wait";
      case SmallCalls::event:
        return "small calls: a launch each, event wait";
      case SmallCalls::automatic:
        break;  // resolved in the constructor
    }
    return "?";
  }

  void note_enqueued(std::chrono::steady_clock::time_point call_start) {
    last_call_host_us_ =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - call_start)
            .count();
  }

  void wait_chain(std::size_t s) {
    if (chain_stream_ != s) chain_.wait_on(streams_[s].get());
  }

  // True for memory from cudaHostAlloc/cudaMallocHost or cudaHostRegister.
  static bool is_page_locked(const void* p) {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it so later checks do not see it
      return false;
    }
    return attributes.type == cudaMemoryTypeHost;
  }

  SampleView view(const float* base, Layout layout, std::size_t frames, std::size_t) const {
    if (layout == Layout::interleaved) return {base, 1, (long long)channels_};
    return {base, (long long)frames, 1};
  }

  // Host copy of frames [a, b) of a call of `frames` frames between user memory
  // and the pinned staging (same layout, same offsets).
  void copy_host(float* dst, const float* src, Layout layout, std::size_t frames, std::size_t a,
                 std::size_t b) const {
    if (layout == Layout::interleaved) {
      std::memcpy(dst + a * channels_, src + a * channels_, (b - a) * channels_ * sizeof(float));
    } else {
      for (std::size_t c = 0; c < channels_; ++c)
        std::memcpy(dst + c * frames + a, src + c * frames + a, (b - a) * sizeof(float));
    }
  }

  // Copies frames [a, a + m) of a host buffer laid out as the call (`frames`
  // frames: the pinned staging or the caller's page-locked buffer)
  // to or from a device slot holding just those m frames, in the same layout.
  void copy_2d(float* dst, const float* src, Layout layout, std::size_t frames, std::size_t a,
               std::size_t m, cudaMemcpyKind kind, cudaStream_t stream) const {
    const bool to_device = kind == cudaMemcpyHostToDevice;
    if (layout == Layout::interleaved) {
      const std::size_t offset = a * channels_;
      TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(to_device ? dst : dst + offset,
                                           to_device ? src + offset : src,
                                           m * channels_ * sizeof(float), kind, stream));
    } else {
      const std::size_t host_pitch = frames * sizeof(float), slot_pitch = m * sizeof(float);
      TAPSTREAM_CUDA_CHECK(cudaMemcpy2DAsync(
          to_device ? dst : dst + a, to_device ? slot_pitch : host_pitch, to_device ? src + a : src,
          to_device ? host_pitch : slot_pitch, m * sizeof(float), channels_, kind, stream));
    }
  }

  DirectArgs direct_args(const SampleView& x, float* y, long long y_channel_stride,
                         long long y_frame_stride, std::size_t frames, int bank) const {
    const TapBank& tb = banks_[bank];
    DirectArgs a;
    a.in = x;
    a.history = history_len_ > 0 ? history_[history_index_].get() : nullptr;
    a.history_stride = history_end_;
    a.history_end = history_end_;
    a.history_len = history_len_;
    a.out = y;
    a.out_channel_stride = y_channel_stride;
    a.out_frame_stride = y_frame_stride;
    a.channels = int(channels_);
    a.frames = int(frames);
    a.taps = tb.taps;
    a.taps_padded = tb.taps_padded;
    a.taps_channel_stride = tb.channel_stride;
    a.global_taps = tb.global.get();
    a.constant_bank = tb.in_constant ? bank : -1;
    a.multiprocessors = multiprocessors_;
    a.stream_tiles = tuning_.stream_tiles;
    return a;
  }

  // Filters one chunk (frames [offset, offset + frames) of a call of call_frames)
  // on stream s, after the previous chunk's filter and carry; records the chain.
  void filter(std::size_t s, const SampleView& x, float* y, long long y_channel_stride,
              long long y_frame_stride, std::size_t frames, std::size_t offset,
              std::size_t call_frames, bool mapped) {
    cudaStream_t stream = streams_[s].get();
    wait_chain(s);
    if (partitioned_) {
      cuda::DeviceBlock block;
      block.in = x;
      block.out = y;
      block.out_channel_stride = y_channel_stride;
      block.out_frame_stride = y_frame_stride;
      block.frames = frames;
      block.call_offset = offset;
      block.call_frames = call_frames;
      partitioned_->process(block, stream);
    } else if (fft_) {
      // The convolver wants planar device memory: (de)interleave (or read the
      // mapped host staging) through the slot's scratch when it is not.
      const bool stage_in = mapped || x.frame_stride != 1;
      const bool stage_out = mapped || y_frame_stride != 1;
      const float* fin = x.data;
      std::size_t fin_stride = std::size_t(x.channel_stride);
      if (stage_in) {
        cuda::launch_copy_samples(x, fft_in_[s].get(), (long long)frames, 1, int(channels_),
                                  int(frames), stream);
        fin = fft_in_[s].get();
        fin_stride = frames;
      }
      float* fout = stage_out ? fft_out_[s].get() : y;
      const std::size_t fout_stride = stage_out ? frames : std::size_t(y_channel_stride);
      fft_->process(cuda::planar_block(fin, fin_stride, fout, fout_stride, frames), stream);
      if (stage_out)
        cuda::launch_copy_samples({fout, (long long)frames, 1}, y, y_channel_stride, y_frame_stride,
                                  int(channels_), int(frames), stream);
    } else {
      const bool fading = pending_ && crossfade_;
      const int bank = pending_ ? *pending_ : active_;
      float* carry_to = history_len_ > 0 ? history_[1 - history_index_].get() : nullptr;
      if (fading) {
        cuda::launch_direct(
            kernel_, direct_args(x, y, y_channel_stride, y_frame_stride, frames, active_), stream);
      }
      DirectArgs a = direct_args(x, y, y_channel_stride, y_frame_stride, frames, bank);
      if (fading) {
        a.blend = true;
        a.blend_offset = (long long)offset;
        a.blend_frames = (long long)call_frames;
      }
      a.carry_to = carry_to;  // fused into the (last) filter launch
      cuda::launch_direct(kernel_, a, stream);
      if (carry_to) history_index_ = 1 - history_index_;
    }
    chain_.record(stream);
    chain_stream_ = s;
  }

  // After the last chunk of a block: a pending filter swap has been taken.
  void end_block() {
    if (pending_) {
      active_ = *pending_;
      pending_.reset();
      crossfade_ = false;
    }
  }

  std::size_t channels_;
  std::size_t max_block_frames_;
  std::size_t max_taps_;
  int device_;
  bool force_partitioned_;
  DirectKernel kernel_;
  CudaEngineOptions tuning_;
  int multiprocessors_ = 1;
  std::string device_name_;
  SmallCalls small_calls_ = kDefaultSmallCalls;
  int stream_priority_ = 0;
  std::unique_ptr<cuda::PersistentDirect> persistent_;
  bool persistent_failed_ = false;
  double last_call_host_us_ = 0.0;
  Algorithm algorithm_ = Algorithm::direct;
  std::string choice_note_;

  std::vector<Stream> streams_;
  Event chain_;
  std::size_t chain_stream_ = 0;
  std::vector<Event> done_;
  std::vector<Event> chunk_done_;
  std::size_t slot_frames_ = 0;
  PinnedBuffer<float> pinned_in_, pinned_out_;
  std::vector<DeviceBuffer<float>> slot_in_, slot_out_;
  std::vector<DeviceBuffer<float>> fft_in_, fft_out_;

  // Direct form state.
  DeviceBuffer<float> history_[2];
  int history_index_ = 0;
  int history_len_ = 0;
  int history_end_ = 0;
  TapBank banks_[2];
  int active_ = 0;
  std::optional<int> pending_;
  bool crossfade_ = false;

  // FFT state.
  std::unique_ptr<cuda::FftConvolver> fft_;
  // Non-uniformly partitioned state (streaming, long filters, short calls).
  std::unique_ptr<cuda::PartitionedConvolver> partitioned_;
};

}  // namespace

namespace {

std::string runtime_version_text() {
  int version = 0;
  cudaRuntimeGetVersion(&version);
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// One plain sentence per way a GPU can be missing, for a user who did not
// ask for the details of the CUDA runtime.
std::string unavailable_sentence(cudaError_t error) {
  switch (error) {
    case cudaErrorInsufficientDriver: {
      int driver = 0;
      cudaDriverGetVersion(&driver);
      if (driver == 0) return "no NVIDIA driver is installed or loaded";
      return "the NVIDIA driver is older than this build's CUDA " + runtime_version_text() +
             " needs (update the driver)";
    }
    case cudaErrorNoDevice:
      return "no NVIDIA GPU was found";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidDeviceFunction:
      return "the GPU is too old for the CUDA architectures this build was compiled for";
    case cudaErrorMemoryAllocation:
      return "the GPU is out of memory";
    default:
      return std::string("the GPU cannot be used (") + cudaGetErrorString(error) + ")";
  }
}

}  // namespace

bool cuda_device_available(std::string* reason) {
  try {
    int count = 0;
    cudaError_t error = cudaGetDeviceCount(&count);
    if (error == cudaSuccess && count == 0) error = cudaErrorNoDevice;
    if (error == cudaSuccess) {
      error = cuda::probe_architecture();
      if (error == cudaSuccess) return true;
    }
    if (reason) *reason = unavailable_sentence(error);
    cudaGetLastError();  // clear it so that later calls do not report it again
    return false;
  } catch (...) {
    if (reason) *reason = "the GPU cannot be used (the CUDA device query failed)";
    return false;
  }
}

std::string cuda_failure_sentence(const std::string& what) {
  // cudaGetErrorString(cudaErrorMemoryAllocation) is "out of memory".
  if (what.find("out of memory") != std::string::npos) {
    return unavailable_sentence(cudaErrorMemoryAllocation) + " (" + what + ")";
  }
  return "the CUDA engine failed to start (" + what + ")";
}

std::vector<std::string> cuda_kernel_variants() {
  return cuda::direct_kernel_names();
}

std::unique_ptr<CudaEngine> make_cuda_device_engine(const FilterBank& bank,
                                                    const EngineOptions& options) {
  return std::make_unique<CudaEngineImpl>(bank, options);
}

std::unique_ptr<Engine> make_cuda_engine(const FilterBank& bank, const EngineOptions& options) {
  return make_cuda_device_engine(bank, options);
}

}  // namespace tapstream

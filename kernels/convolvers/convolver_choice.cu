// The CUDA engine's cost model (see convolver_choice.hpp).

#include <algorithm>
#include <sstream>

#include "kernels/convolvers/convolver_choice.hpp"
#include "kernels/convolvers/fft_convolver.hpp"
#include "kernels/convolvers/partitioned_convolver.hpp"
#include "kernels/device/direct_kernels.hpp"

namespace tapstream::cuda {

namespace {

std::size_t round_up(std::size_t n, std::size_t m) {
  return (n + m - 1) / m * m;
}

// Cost model for Algorithm::automatic, in microseconds per call of F frames:
//   direct = C F M / kDirectMacsPerUs (x kGlobalTapsPenalty for global taps) + kLaunchUs
//   fft    = C F (16 M / P + kFftBytesPerSample) / kBytesPerUs + kFftLaunches kLaunchUs
// (M taps, P the FFT partition). The FFT term is its memory traffic: the
// frequency-domain delay line and the filter spectra (8 bytes per bin each, M/P
// partitions) plus the transforms. The constants are fitted to whole-signal
// calls of both paths (docs/performance.md, "Cost models"); the crossover falls
// between 256 and 2048 taps at large blocks, and further out for short blocks,
// where launches dominate.
constexpr double kDirectMacsPerUs = 1.9e7;
constexpr double kGlobalTapsPenalty = 1.2;
constexpr double kBytesPerUs = 2.0e6;
constexpr double kFftBytesPerSample = 64.0;
constexpr double kLaunchUs = 3.0;
constexpr double kFftLaunches = 4.0;

// Whether Algorithm::automatic may choose the non-uniformly partitioned path
// (for calls of at most kMaxPartitionedBlock frames, where its head in direct
// form stays short). On: at small calls and long filters it is several times
// faster per call than the direct form the cost model chose before it was
// weighed in (docs/performance.md, "Cost models").
// EngineOptions::cuda.partitioned = false turns it off.
constexpr std::size_t kMaxPartitionedBlock = 1024;
// The models above count work and assume the device full; with few channels
// and short calls the direct and uniform FFT paths are latency-bound instead:
// each output walks all M taps one after another, each FFT bin all M / P
// partitions; the work model alone priced the direct form at a fraction of
// what such calls take (docs/performance.md, "Cost models"). Used only to
// weigh the partitioned path, whose model is measured per step, against them.
constexpr double kDirectSerialUsPerTap = 1.8e-3;
constexpr double kFftSerialUsPerPartition = 0.3;

double direct_cost_us(std::size_t C, std::size_t F, std::size_t M, bool global) {
  return double(C) * double(F) * double(M) / kDirectMacsPerUs *
             (global ? kGlobalTapsPenalty : 1.0) +
         kLaunchUs;
}

// The fused overlap-save kernel (one partition, whole segments) moves fewer
// bytes but grows with its in-shared-memory FFT; its cost as bytes per sample at
// kBytesPerUs, fitted to its offline times by P (docs/performance.md, "Cost
// models").
double fused_bytes_per_sample(std::size_t P) {
  if (P <= 4096) return 18.5;
  return P <= 8192 ? 28.5 : 32.6;
}

double fft_cost_us(std::size_t C, std::size_t F, std::size_t M, const FftConvolver& fft) {
  const std::size_t P = fft.partition_frames();
  if (fft.fused_kernel() && fft.partitions() == 1 && F >= P) {
    return double(C) * double(F) * fused_bytes_per_sample(P) / kBytesPerUs + kLaunchUs;
  }
  // The multi-partition kernels: the same two shared-memory transforms, plus
  // the spectra's round trips through device memory (X and Y, each written and
  // read: 32 bytes a sample). Pessimistic by 10-25 % against the measured
  // times (docs/performance.md, "Cost models"), which only ever favours this
  // path's rivals.
  if (fft.segment_kernels() && F >= P) {
    return double(C) * double(F) * (fused_bytes_per_sample(P) + 32.0) / kBytesPerUs +
           3.0 * kLaunchUs;
  }
  return double(C) * double(F) * (16.0 * double(M) / double(P) + kFftBytesPerSample) / kBytesPerUs +
         kFftLaunches * kLaunchUs;
}

}  // namespace

ConvolverChoice choose_convolver(
    const FilterBank& bank, const ConvolverRequest& request,
    const std::function<std::unique_ptr<DeviceConvolver>()>& make_direct) {
  const std::size_t C = request.channels, F = request.max_block_frames, M = request.max_taps;
  const CudaEngineOptions& tuning = request.tuning;
  const bool fits_constant =
      (bank.is_shared() ? 1 : C) * round_up(M, kTapPadding) <= kConstantBankFloats;
  ConvolverChoice choice;
  if (request.algorithm == Algorithm::direct) {
    choice.convolver = make_direct();
    return choice;
  }
  if (request.force_partitioned) {
    choice.convolver =
        std::make_unique<PartitionedConvolver>(bank, M, F, plan_gpu_partitions(C, F, M));
    choice.note = "partitioned path requested";
    return choice;
  }
  if (request.algorithm == Algorithm::fft) {
    choice.convolver = std::make_unique<FftConvolver>(bank, M, F, tuning.fft_partition,
                                                      /*fused_callbacks=*/false, tuning.fft_fused);
    return choice;
  }
  // automatic: very short filters never pay for the transforms.
  if (M <= 64) {
    choice.note = "direct by cost model";
    choice.convolver = make_direct();
    return choice;
  }
  try {
    // The uniform path's shape (partition, fused kernels) depends on the
    // block and the filter length, not on the channels: a one-channel
    // convolver prices it. Building it for the whole bank first held its
    // spectra beside the partitioned path's while that one was built: twice
    // the set-up time, and at 16384 channels of 65536 taps more than an
    // 80 GB card, where the failure left the direct form (107 ms a call).
    const FilterBank one_channel = FilterBank::per_channel({std::vector<float>{1.0f}});
    const FftConvolver shape(one_channel, M, F, tuning.fft_partition,
                             /*fused_callbacks=*/false, tuning.fft_fused);
    const double fft_us = fft_cost_us(C, F, M, shape);
    const double direct_us = direct_cost_us(C, F, M, !fits_constant);
    std::ostringstream note;
    note.precision(3);
    note << "cost model: direct " << direct_us << " us, FFT " << fft_us << " us per " << F
         << "-frame block";
    // Streaming with long filters and short calls: the non-uniform plan,
    // when it has a tail at all and its per-call share of the work is the least.
    if (F <= kMaxPartitionedBlock && tuning.partitioned) {
      PartitionPlan plan = plan_gpu_partitions(C, F, M);
      const double partitioned_us =
          plan.cost_ns_per_frame(GpuPartitionCosts(C)) * double(F) / 1000.0;
      note << ", partitioned " << partitioned_us << " us";
      const double direct_latency_us =
          std::max(direct_us, double(M) * kDirectSerialUsPerTap + kLaunchUs);
      const double fft_latency_us =
          std::max(fft_us, double(shape.partitions()) * kFftSerialUsPerPartition);
      if (plan.segments.size() > 1 &&
          partitioned_us < std::min(fft_latency_us, direct_latency_us)) {
        choice.note = note.str();
        choice.convolver = std::make_unique<PartitionedConvolver>(bank, M, F, std::move(plan));
        return choice;
      }
    }
    choice.note = note.str();
    if (fft_us < direct_us) {
      choice.convolver =
          std::make_unique<FftConvolver>(bank, M, F, tuning.fft_partition,
                                         /*fused_callbacks=*/false, tuning.fft_fused);
      return choice;
    }
  } catch (const std::exception& e) {
    choice.note = std::string("FFT path unavailable (") + e.what() + "), direct form";
  }
  choice.convolver = make_direct();
  return choice;
}

}  // namespace tapstream::cuda

#include "dsp/cpu/cpu_cost_model.hpp"

#include <algorithm>
#include <iterator>

namespace tapstream {
namespace {

std::size_t round_up(std::size_t n, std::size_t m) {
  return (n + m - 1) / m * m;
}
std::size_t div_up(std::size_t n, std::size_t m) {
  return (n + m - 1) / m;
}

// Measured with `cpu_engine_bench --calibrate` (CPU time) on the development
// machine (Xeon, AVX-512, 2 cores; docs/cpu-engine.md). FFT pairs (forward +
// inverse, measured FFTW plans) by size, since FFTW's speed per point is far
// from a smooth N log N (8192 points is its sweet spot here); a complex bin
// multiply-add of the delay line, in and out of L2; one tap of one
// direct-form output (computed 16 outputs at a time).
constexpr double kNsPerFftPair[] = {
    // N = 32, 64, ..., 131072
    350, 434, 539, 755, 1252, 2363, 4857, 10549, 20015, 49340, 101263, 226961, 521670};
constexpr double kNsPerSpectralBin = 0.2;
constexpr double kNsPerSpectralBinOutOfCache = 0.5;
constexpr double kCacheBytes = 1 << 20;  // delay line + spectra of one channel
constexpr double kNsPerDirectTap = 0.03;
constexpr double kNsPerCallOverhead = 40.0;

double fft_pair_ns(std::size_t n) {
  std::size_t i = 0;
  for (std::size_t size = 32; size < n && i + 1 < std::size(kNsPerFftPair); size *= 2) ++i;
  return kNsPerFftPair[i];
}

}  // namespace

double cpu_fft_pair_ns(std::size_t points) {
  return fft_pair_ns(points);
}

double cpu_spectral_bin_ns(double working_bytes) {
  return working_bytes <= kCacheBytes ? kNsPerSpectralBin : kNsPerSpectralBinOutOfCache;
}

double cpu_fft_cost_ns(std::size_t block, std::size_t taps, std::size_t p) {
  const double partitions = double(div_up(taps, p));
  const double fft_pair = fft_pair_ns(2 * p);
  const double bins = double(p + 1);
  const double mac = 2.0 * partitions * bins * 8.0 <= kCacheBytes ? kNsPerSpectralBin
                                                                  : kNsPerSpectralBinOutOfCache;
  // Each call costs one FFT pair and one multiply-add per chunk (a call is cut
  // at segment boundaries); each completed segment adds the tail's products.
  const double chunks = double(div_up(block, p)) + (block % p != 0 && block > p ? 1.0 : 0.0);
  const double per_call = kNsPerCallOverhead + chunks * (fft_pair + mac * bins) +
                          double(block) / double(p) * (partitions - 1.0) * mac * bins;
  return per_call / double(block);
}

double cpu_direct_cost_ns(std::size_t block, std::size_t taps) {
  return kNsPerCallOverhead / double(block) +
         kNsPerDirectTap * double(taps) * double(round_up(block, 16)) / double(block);
}

std::size_t cpu_best_partition(std::size_t block, std::size_t taps) {
  std::size_t best = 16;
  double best_cost = cpu_fft_cost_ns(block, taps, best);
  for (std::size_t p = 32; p <= 65536; p *= 2) {
    const double c = cpu_fft_cost_ns(block, taps, p);
    if (c < best_cost) {
      best_cost = c;
      best = p;
    }
  }
  return best;
}

double CpuPartitionCosts::head_ns(std::size_t block_frames, std::size_t partition_frames,
                                  std::size_t count) const {
  // One transform pair and one product per call, the older partitions' sum
  // once per completed partition (as CpuEngine::fft_channel does).
  const double bins = double(partition_frames + 1);
  const double mac = 2.0 * double(count) * bins * 8.0 <= kCacheBytes ? kNsPerSpectralBin
                                                                     : kNsPerSpectralBinOutOfCache;
  const double calls = double(div_up(block_frames, partition_frames));
  return kNsPerCallOverhead + calls * (fft_pair_ns(2 * partition_frames) + mac * bins) +
         double(block_frames) / double(partition_frames) * (double(count) - 1.0) * mac * bins;
}

double CpuPartitionCosts::tail_step_ns(std::size_t partition_frames, std::size_t count) const {
  const double bins = double(partition_frames + 1);
  // Every channel's delay line and the (shared) spectra of the segment.
  const double bytes = double(channels_ + 1) * double(count) * bins * 8.0;
  const double mac = bytes <= kCacheBytes ? kNsPerSpectralBin : kNsPerSpectralBinOutOfCache;
  return kNsPerCallOverhead + fft_pair_ns(2 * partition_frames) + mac * bins * double(count);
}

std::size_t CpuPartitionCosts::min_slack_frames(std::size_t partition_frames,
                                                std::size_t head_frames) const {
  return std::max(partition_frames, head_frames);
}

double cpu_uniform_cost_ns_per_frame(std::size_t block_frames, std::size_t taps) {
  return std::min(cpu_direct_cost_ns(block_frames, taps),
                  cpu_fft_cost_ns(block_frames, taps, cpu_best_partition(block_frames, taps)));
}

}  // namespace tapstream

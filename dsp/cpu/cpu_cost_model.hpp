#pragma once
// The CPU engines' cost model: what a call of the direct form, the uniformly
// partitioned FFT and the non-uniform engine's head and tail steps cost, in
// nanoseconds, from constants measured with `cpu_engine_bench --calibrate`
// (CPU time) on the development machine (docs/cpu-engine.md). The engines
// (dsp/cpu/cpu_engine, dsp/cpu/cpu_nonuniform_engine) choose their algorithm, their
// partition and whether to spread a call over threads by it; the partition
// planner (dsp/model/partition_plan) sees it through PartitionCostModel. It lives
// apart from both so that neither calls into the other.

#include <cstddef>

#include "dsp/model/partition_plan.hpp"

namespace tapstream {

// The measured constants themselves, for an engine that counts its own work
// (the CPU matrix engine): an FFT pair (forward + inverse) of `points`, and
// one complex multiply-add of a bin when the spectra and delay line a pass
// walks take `working_bytes`.
double cpu_fft_pair_ns(std::size_t points);
double cpu_spectral_bin_ns(double working_bytes);

// Direct form: ns per sample of one channel for calls of `block` frames.
double cpu_direct_cost_ns(std::size_t block, std::size_t taps);
// Uniformly partitioned FFT with partitions of `partition` frames: ns per
// sample of one channel for calls of `block` frames.
double cpu_fft_cost_ns(std::size_t block, std::size_t taps, std::size_t partition);
// Below this much estimated work per call, waking other threads costs more
// than it saves (a futex wake-up and join cost several microseconds): the
// engines then keep a call on its caller.
inline constexpr double kCpuParallelCallNs = 30000.0;

// The cheapest partition (16..65536 frames) for calls of `block` frames.
std::size_t cpu_best_partition(std::size_t block, std::size_t taps);
// The cheaper of direct form and the best uniform partition, ns per frame of
// one channel, for calls of `block_frames`.
double cpu_uniform_cost_ns_per_frame(std::size_t block_frames, std::size_t taps);

// The non-uniform planner's view of the same costs (dsp/model/partition_plan.hpp), per channel.
class CpuPartitionCosts final : public PartitionCostModel {
 public:
  // `channels`: the stream's. A tail step walks every channel's delay line of
  // its segment, after the head, the other segments and the other channels
  // have been through the cache, so its products run at L2 speed only when
  // all of them fit (65536 taps, 16 ch, 64-frame periods: with a per-channel
  // test the planner chose 2048 x 31 tail partitions, 16 MB of delay lines).
  explicit CpuPartitionCosts(std::size_t channels = 1) : channels_(channels) {}
  double head_ns(std::size_t block_frames, std::size_t partition_frames,
                 std::size_t count) const override;
  double tail_step_ns(std::size_t partition_frames, std::size_t count) const override;
  // A tail step gets its own partition's length of stream time, as in
  // zita-convolver and the CUDA engine: then a step costs no more of its slack
  // than the segment's share of the average load, so a load the cores can
  // carry on average never makes a step late. With one call of slack (the
  // default) a long step of many channels can cost more than its slack and
  // miss every deadline it meets (docs/history.md, "One call of slack was not
  // enough").
  std::size_t min_slack_frames(std::size_t partition_frames,
                               std::size_t head_frames) const override;

 private:
  std::size_t channels_;
};

}  // namespace tapstream

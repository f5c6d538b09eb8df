#pragma once
// Non-uniformly partitioned convolution for the CUDA engine's streaming path
// (Gardner 1995, Garcia 2002, Wefers 2015), laid out by dsp/partition_plan.
//
// - The head (the plan's first segment, taps [0, H)) is computed inside every
//   call in direct form: one kernel reads the call's input (device or mapped
//   host memory, any strides), appends it to the device input ring, convolves
//   it with the head taps, adds what the tail has left for those frames in the
//   output ring and writes the call's output. Exact for any call size, no
//   latency added.
// - Each tail segment (partition P, `count` partitions from tap a) takes one
//   step whenever the stream crosses a multiple of P: transform the 2P-frame
//   window of the input ring (cuFFT), multiply-accumulate against its filter
//   spectra over all partitions in parallel, inverse-transform, and add the P
//   frames of output into the output ring at stream frame a + jP. Each
//   segment has a stream of its own (shorter partitions more urgent, all below
//   the caller's), so a long step never delays a short one, and each step is
//   one replay of a CUDA graph captured at construction (the step index lives
//   on the device), ordered after the call that completed its input; a call
//   waits (on the device) only for the steps whose output falls inside it,
//   which by the plan's slack (>= one call) were launched at least one call
//   earlier.
// - A filter swap transforms the new filters on the tail stream; the first call
//   after it recomputes, with the new filters, every tail step whose output is
//   still ahead (the frequency-domain delay line keeps the spectra it needs),
//   into the second output ring, and crossfades head + ring of the old filters
//   into head + ring of the new over that call.
// - Two sets of filters (raw taps and spectra), the running one and the
//   spare one, as the CUDA matrix engine keeps two sets of path spectra. A
//   per-channel update (set_channel_filters) costs its channels only: the
//   spare set lags the running one by the channels of the update before
//   (their rows are copied across, no others), the named channels' taps go
//   up packed in one copy, their partitions are transformed in batches of
//   those channels only and scattered into their rows of the spare set. The
//   first call after it swaps the sets and, for the named channels only,
//   copies their output-ring rows into the second ring (the old filters'
//   tail, to fade from), clears them and recomputes every tail step whose
//   output is still ahead with the new spectra; the head kernel crossfades
//   those channels (a flag per channel) and plays the others on.
//
// Every operation is enqueued without host synchronisation; calls must be
// issued in stream order.

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "dsp/model/filter_bank.hpp"
#include "dsp/model/partition_plan.hpp"
#include "kernels/convolvers/device_convolver.hpp"

namespace tapstream::cuda {

// The GPU's costs for plan_partitions, measured (docs/performance.md, "Cost
// models"): a tail step's fixed cost and its time per
// sample of transform and per partition of multiply-accumulate, and the direct
// head kernel's launch and rate.
class GpuPartitionCosts final : public PartitionCostModel {
 public:
  explicit GpuPartitionCosts(std::size_t channels) : channels_(channels) {}
  double head_ns(std::size_t block_frames, std::size_t partition_frames,
                 std::size_t count) const override;
  double tail_step_ns(std::size_t partition_frames, std::size_t count) const override;
  // A tail step of P frames gets P frames of slack: the big transforms then
  // run in the background over many calls instead of delaying the next one.
  std::size_t min_slack_frames(std::size_t partition_frames,
                               std::size_t head_frames) const override;

 private:
  std::size_t channels_;
};

// The plan the engine uses for `channels` channels of up to `taps` taps under
// calls of up to max_block_frames frames (head size: max_block_frames rounded
// up to a power of two).
PartitionPlan plan_gpu_partitions(std::size_t channels, std::size_t max_block_frames,
                                  std::size_t taps);

// Device calibration of the cost model (bench/cuda_partitioned_bench): one
// tail step of `channels` channels, partition P, `count` partitions (window
// gather, forward transform, multiply-accumulate, inverse transform, ring
// update) and one head call (`frames` frames, `head_taps` taps, device input),
// each repeated `reps` times back to back on a stream of their own. gpu_us:
// device time per repetition (events); host_us: the calling thread's time to
// enqueue one.
struct StepTiming {
  double gpu_us = 0, host_us = 0;
};
StepTiming measure_tail_step(std::size_t channels, std::size_t P, std::size_t count, int reps);
StepTiming measure_head(std::size_t channels, std::size_t frames, std::size_t head_taps, int reps);

class PartitionedConvolver final : public DeviceConvolver {
 public:
  PartitionedConvolver(const FilterBank& bank, std::size_t max_taps, std::size_t max_block_frames,
                       PartitionPlan plan);
  ~PartitionedConvolver() override;
  PartitionedConvolver(const PartitionedConvolver&) = delete;
  PartitionedConvolver& operator=(const PartitionedConvolver&) = delete;

  // The head kernel reads any view of device or mapped host memory.
  bool takes_any_view() const override { return true; }

  // Filters block.frames (1..max_block_frames) new frames of every channel on
  // `stream`; a crossfade after a swap spans the block's call.
  void process(const DeviceBlock& block, cudaStream_t stream) override;
  // A whole call with an output_done event, where every tail step is short
  // (the cost model), is one captured graph: the head, the event, and the
  // steps due as parallel branches (partitioned_convolver.cu, "Calls as one
  // graph").
  bool recorded_output_done() const override;

  // Transforms the new filters on the tail stream (no host synchronisation
  // with tail work in flight); they take effect at the next call.
  void set_filters(const FilterBank& bank, bool crossfade) override;

  // The named channels' new filters (see the top), at the next call.
  bool set_channel_filters(std::span<const PathTaps> channels, bool crossfade) override;

  // Forgets the stream (as if it started again); orders after `stream`.
  void reset(cudaStream_t stream) override;

  // Waits for the tail streams (for teardown and tests).
  void synchronize() override;

  Algorithm algorithm() const override { return Algorithm::fft; }

  const PartitionPlan& plan() const;
  std::string description() const override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tapstream::cuda

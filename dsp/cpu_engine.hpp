#pragma once
// The CPU engine: direct form for short filters, uniformly partitioned FFT
// convolution (FFTW3f, overlap-save, frequency-domain delay line) for long
// ones, chosen per bank by a cost model unless EngineOptions::algorithm says;
// for live-sized blocks of long filters, non-uniformly partitioned
// convolution (dsp/cpu_nonuniform_engine.cpp): a head computed in the call,
// longer tail partitions computed ahead of need on lower-priority threads.

#include <cstddef>
#include <memory>

#include "dsp/engine.hpp"
#include "dsp/partition_plan.hpp"

namespace tapstream {

// Chooses the algorithm (see above) and builds the engine. With
// options.realtime_calls and a live-sized block, always the non-uniform form
// (it alone may run inside an audio callback, see RealtimeEngine).
std::unique_ptr<Engine> make_cpu_engine(const FilterBank& bank, const EngineOptions& options);

// Largest block for which make_cpu_engine considers non-uniform partitions:
// beyond it (offline), the uniform engine over the worker pool wins.
inline constexpr std::size_t kMaxHeadFrames = 1024;

// The non-uniformly partitioned engine for `plan` (made for calls of up to
// plan.head_frames frames, which must be >= options.max_block_frames).
std::unique_ptr<Engine> make_cpu_nonuniform_engine(const FilterBank& bank,
                                                   const EngineOptions& options,
                                                   const PartitionPlan& plan);

// Filters a CpuHeadEngine prepared (opaque outside it).
class PreparedHeadFilters {
 public:
  virtual ~PreparedHeadFilters() = default;
};

// The in-call head of the non-uniform engine: a CPU engine on the calling
// thread only, whose filters for a swap can be prepared on another thread and
// installed in the call without allocating or freeing.
class CpuHeadEngine : public Engine {
 public:
  // Any thread, also while process() runs (it reads only what construction
  // fixed): the filters of `bank`, checked as set_filters() checks them.
  virtual std::unique_ptr<PreparedHeadFilters> prepare_filters(const FilterBank& bank) const = 0;
  // process()'s thread: `filters` (from prepare_filters() of this engine)
  // play from the next process() on. Never allocates or frees: returns the
  // filters that no call uses any more (or null), for the caller to free
  // elsewhere.
  virtual std::unique_ptr<PreparedHeadFilters> install_filters(
      std::unique_ptr<PreparedHeadFilters> filters, bool crossfade) noexcept = 0;
};

// The direct-form or uniformly partitioned engine (by cost), on the calling
// thread only: the in-call head of the non-uniform engine. Like every CPU
// engine it adds no latency at any call size.
std::unique_ptr<CpuHeadEngine> make_cpu_head_engine(const FilterBank& bank,
                                                    const EngineOptions& options);

// The CPU engine's measured costs (constants in cpu_engine.cpp, measured with
// `cpu_engine_bench --calibrate` on the development machine), per channel.
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

// The cheaper of direct form and the best uniform partition, ns per frame of
// one channel, for calls of `block_frames`.
double cpu_uniform_cost_ns_per_frame(std::size_t block_frames, std::size_t taps);

}  // namespace tapstream

#pragma once
// The CPU engine: direct form for short filters, uniformly partitioned FFT
// convolution (FFTW3f, overlap-save, frequency-domain delay line) for long
// ones, chosen per bank by a cost model unless EngineOptions::algorithm says;
// for live-sized blocks of long filters, non-uniformly partitioned
// convolution (dsp/cpu/cpu_nonuniform_engine.cpp): a head computed in the call,
// longer tail partitions computed ahead of need on lower-priority threads.

#include <cstddef>
#include <memory>

#include "dsp/model/engine.hpp"
#include "dsp/model/partition_plan.hpp"

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

// The in-call head of the non-uniform engine: a CPU engine without threads of
// its own, whose filters for a swap can be prepared on another thread and
// installed in the call without allocating or freeing, and whose calls the
// caller may spread over threads of its own, channel by channel.
class CpuHeadEngine : public Engine {
 public:
  // A call split by channel, as process() does it (same output): on
  // process()'s thread begin_call(), then call_channel() once for every
  // channel, on any threads, then end_call() on process()'s thread once every
  // call_channel() has returned. `x` and `y` are the channel's `frames` input
  // and output frames; `thread` (below the head's threads, see
  // make_cpu_head_engine) picks the scratch memory, so two channels run at
  // once only on different threads. Nothing else of the engine is called
  // between begin_call() and end_call(). No allocation, no lock.
  virtual void begin_call(std::size_t frames) noexcept = 0;
  virtual void call_channel(std::size_t channel, const float* x, float* y,
                            std::size_t thread) noexcept = 0;
  virtual void end_call() noexcept = 0;

  // Any thread, also while process() runs (it reads only what construction
  // fixed): the filters of `bank`, checked as set_filters() checks them.
  virtual std::unique_ptr<PreparedHeadFilters> prepare_filters(const FilterBank& bank) const = 0;
  // Any thread, also while process() runs: `base` (from prepare_filters()
  // or prepare_channel_filters() of this engine, installed or not, which
  // must outlive the result's preparation only) with the named channels'
  // filters replaced (checked as set_channel_filters() checks them), sharing
  // every other channel's with it; installed, only the named channels fade
  // (and, when `base_pending`, base's own changed channels too: the two
  // updates play as one). Null where base is one shared filter (then a
  // whole bank).
  virtual std::unique_ptr<PreparedHeadFilters> prepare_channel_filters(
      const PreparedHeadFilters& base, std::span<const PathTaps> channels,
      bool base_pending) const = 0;
  // process()'s thread: `filters` (from prepare_filters() of this engine)
  // play from the next process() on. Never allocates or frees: returns the
  // filters that no call uses any more (or null), for the caller to free
  // elsewhere.
  virtual std::unique_ptr<PreparedHeadFilters> install_filters(
      std::unique_ptr<PreparedHeadFilters> filters, bool crossfade) noexcept = 0;
};

// The direct-form or uniformly partitioned engine (by cost), without threads
// of its own: the in-call head of the non-uniform engine, whose calls may be
// split over `threads` threads (see CpuHeadEngine). Like every CPU engine it
// adds no latency at any call size.
std::unique_ptr<CpuHeadEngine> make_cpu_head_engine(const FilterBank& bank,
                                                    const EngineOptions& options,
                                                    std::size_t threads);

}  // namespace tapstream

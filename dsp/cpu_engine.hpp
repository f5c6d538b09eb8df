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

// Chooses the algorithm (see above) and builds the engine.
std::unique_ptr<Engine> make_cpu_engine(const FilterBank& bank, const EngineOptions& options);

// Largest block for which make_cpu_engine considers non-uniform partitions:
// beyond it (offline), the uniform engine over the worker pool wins.
inline constexpr std::size_t kMaxHeadFrames = 1024;

// The non-uniformly partitioned engine for `plan` (made for calls of up to
// plan.head_frames frames, which must be >= options.max_block_frames).
std::unique_ptr<Engine> make_cpu_nonuniform_engine(const FilterBank& bank,
                                                   const EngineOptions& options,
                                                   const PartitionPlan& plan);

// The direct-form or uniformly partitioned engine (by cost), on the calling
// thread only: the in-call head of the non-uniform engine. Like every CPU
// engine it adds no latency at any call size.
std::unique_ptr<Engine> make_cpu_head_engine(const FilterBank& bank, const EngineOptions& options);

// The CPU engine's measured costs (constants in cpu_engine.cpp, measured with
// `cpu_engine_bench --calibrate` on the development machine), per channel.
class CpuPartitionCosts final : public PartitionCostModel {
 public:
  double head_ns(std::size_t block_frames, std::size_t partition_frames,
                 std::size_t count) const override;
  double tail_step_ns(std::size_t partition_frames, std::size_t count) const override;
};

// The cheaper of direct form and the best uniform partition, ns per frame of
// one channel, for calls of `block_frames`.
double cpu_uniform_cost_ns_per_frame(std::size_t block_frames, std::size_t taps);

}  // namespace tapstream

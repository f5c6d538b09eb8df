#pragma once
// The partition plan of non-uniformly partitioned convolution (Gardner 1995,
// Garcia 2002, Wefers 2015): which partition sizes cover which taps of a
// filter, and how much time each tail partition has to be computed. One
// host-side value made by one planner and used by both engines: the CPU engine
// runs its tail segments on lower-priority worker threads, the CUDA engine on
// its low-priority tail stream. A plan is tested alone (every tap covered
// once, every deadline met) apart from either engine.
//
// Timing, in frames of the stream. A segment of partition size P that starts
// at tap `first_tap` consumes the input in aligned blocks of P frames. Input
// block j (frames [jP, (j+1)P)) is complete when the call that delivers frame
// (j+1)P - 1 returns; its first contribution is to output frame jP + first_tap.
// So the segment has slack_frames() = first_tap - P frames of stream time
// between the moment its input is complete and the moment its output is
// first needed. The head segment (P = head size) is computed inside the call;
// a tail segment must be started when its input block completes and finished
// within its slack, which requires slack >= head size (at least one period to
// run in the background).

#include <cstddef>
#include <string>
#include <vector>

namespace tapstream {

struct PartitionSegment {
  std::size_t partition_frames = 0;  // P: a power of two; FFT size 2P
  std::size_t count = 0;             // partitions of this size, back to back
  std::size_t first_tap = 0;         // offset of the first tap covered

  std::size_t end_tap() const { return first_tap + partition_frames * count; }
  // Frames of stream time between an input block completing and its first use.
  long long slack_frames() const {
    return static_cast<long long>(first_tap) - static_cast<long long>(partition_frames);
  }
};

// Measured costs an engine supplies to the planner, in nanoseconds, so that
// each engine gets the plan its own hardware favours.
class PartitionCostModel {
 public:
  virtual ~PartitionCostModel() = default;
  // Work of the in-call head: `count` partitions of `partition_frames` for
  // one call of `block_frames` frames, all channels.
  virtual double head_ns(std::size_t block_frames, std::size_t partition_frames,
                         std::size_t count) const = 0;
  // Work of one tail step: when a block of `partition_frames` input frames
  // completes, transform it and multiply-accumulate `count` partitions.
  virtual double tail_step_ns(std::size_t partition_frames, std::size_t count) const = 0;
  // The least slack (frames between a block of `partition_frames` completing
  // and its first use) a tail segment of that size gets, so that its step can
  // be spread over the calls in between instead of landing on one. Never
  // below one call (head_frames), which is also the default.
  virtual std::size_t min_slack_frames(std::size_t partition_frames,
                                       std::size_t head_frames) const {
    (void)partition_frames;
    return head_frames;
  }
};

struct PartitionPlan {
  std::size_t head_frames = 0;             // the call size the plan was made for
  std::size_t taps = 0;                    // filter length covered
  std::vector<PartitionSegment> segments;  // segments[0] is the head; sizes non-decreasing

  // Throws std::logic_error naming the broken rule: taps covered exactly once
  // in order, sizes powers of two and non-decreasing, every tail segment's
  // slack at least the head size.
  void validate() const;
  // Average cost per frame of stream time under `costs` (head every call,
  // each tail step once per its partition length).
  double cost_ns_per_frame(const PartitionCostModel& costs) const;
  // "64x4 + 256x3 + 1024x15" (for logs and status).
  std::string describe() const;
};

// The cheapest valid plan for filters of `taps` taps under calls of
// `head_frames` frames (a power of two), by `costs`; tail partitions no
// larger than `max_partition_frames`.
PartitionPlan plan_partitions(std::size_t head_frames, std::size_t taps,
                              const PartitionCostModel& costs,
                              std::size_t max_partition_frames = 65536);

}  // namespace tapstream

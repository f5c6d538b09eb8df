#include "dsp/model/partition_plan.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <unordered_map>
#include <stdexcept>
#include <utility>

namespace tapstream {
namespace {

// How many partitions beyond the least a segment may take before the planner
// stops looking: a longer run of one size only pays where the next size's
// transform costs more than many multiply-adds, which this bound still covers.
constexpr std::size_t kExtraCountsSearched = 64;

struct Choice {
  double cost = std::numeric_limits<double>::infinity();
  std::size_t count = 0;
  std::size_t next_size = 0;  // 0: this segment is the last
};

// Cheapest way to cover taps [offset, taps) with tail segments, the first of
// size `size` starting at `offset` (its slack already checked by the caller).
class TailSearch {
 public:
  TailSearch(std::size_t head, std::size_t taps, std::size_t max_size,
             const PartitionCostModel& costs)
      : head_(head), taps_(taps), max_size_(max_size), costs_(costs) {}

  const Choice& best(std::size_t offset, std::size_t size) {
    // Offsets are below 2^58 taps and sizes powers of two: one word a key.
    const std::uint64_t key = (std::uint64_t(offset) << 6) | std::uint64_t(std::countr_zero(size));
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    Choice best;
    const std::size_t covering = (taps_ - offset + size - 1) / size;
    // The least count after which the next (doubled) size has its slack.
    const std::size_t next = size * 2;
    std::size_t least = 1;
    const std::size_t start_next = next + slack(next);
    while (least < covering && offset + least * size < start_next) ++least;
    for (std::size_t count = least; count <= covering && count <= least + kExtraCountsSearched;
         ++count) {
      const double own = costs_.tail_step_ns(size, count) / double(size);
      if (count == covering) {
        if (own < best.cost) best = {own, count, 0};
        break;
      }
      if (next > max_size_) continue;
      const std::size_t end = offset + count * size;
      if (end < start_next) continue;
      const double total = own + this->best(end, next).cost;
      if (total < best.cost) best = {total, count, next};
    }
    // The last segment may always run to the end of the filter.
    if (best.count == 0 || best.count < covering) {
      const double own = costs_.tail_step_ns(size, covering) / double(size);
      if (own < best.cost) best = {own, covering, 0};
    }
    return memo_.emplace(key, best).first->second;
  }

 private:
  // Where a segment of `size` may start: its partition plus its least slack.
  std::size_t slack(std::size_t size) const {
    return std::max(head_, costs_.min_slack_frames(size, head_));
  }

  std::size_t head_, taps_, max_size_;
  const PartitionCostModel& costs_;
  // Hashed, not ordered: a 480,000-tap plan visits about a hundred thousand
  // (offset, size) pairs, and an ordered map's lookups took most of a second.
  std::unordered_map<std::uint64_t, Choice> memo_;
};

bool power_of_two(std::size_t n) {
  return n != 0 && std::has_single_bit(n);
}

}  // namespace

void PartitionPlan::validate() const {
  if (!power_of_two(head_frames))
    throw std::logic_error("partition plan: head size is not a power of two");
  if (segments.empty()) throw std::logic_error("partition plan: no segments");
  if (segments.front().partition_frames != head_frames)
    throw std::logic_error("partition plan: the first segment is not the head");
  std::size_t expected_tap = 0;
  std::size_t previous_size = 0;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const PartitionSegment& s = segments[i];
    const std::string where = "partition plan: segment " + std::to_string(i) + " ";
    if (!power_of_two(s.partition_frames))
      throw std::logic_error(where + "size is not a power of two");
    if (s.count == 0) throw std::logic_error(where + "is empty");
    if (s.partition_frames < previous_size)
      throw std::logic_error(where + "is smaller than the one before");
    if (s.first_tap != expected_tap)
      throw std::logic_error(where + "starts at tap " + std::to_string(s.first_tap) + ", not " +
                             std::to_string(expected_tap) + " (taps skipped or covered twice)");
    if (i > 0 && s.slack_frames() < static_cast<long long>(head_frames))
      throw std::logic_error(where + "has " + std::to_string(s.slack_frames()) +
                             " frames of slack, less than one call of " +
                             std::to_string(head_frames));
    expected_tap = s.end_tap();
    previous_size = s.partition_frames;
  }
  if (expected_tap < taps) throw std::logic_error("partition plan: does not reach the last tap");
  if (expected_tap - taps >= segments.back().partition_frames)
    throw std::logic_error("partition plan: the last segment has a partition past the last tap");
}

double PartitionPlan::cost_ns_per_frame(const PartitionCostModel& costs) const {
  double ns = 0.0;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const PartitionSegment& s = segments[i];
    ns += i == 0 ? costs.head_ns(head_frames, s.partition_frames, s.count) / double(head_frames)
                 : costs.tail_step_ns(s.partition_frames, s.count) / double(s.partition_frames);
  }
  return ns;
}

std::string PartitionPlan::describe() const {
  std::string text;
  for (const PartitionSegment& s : segments) {
    if (!text.empty()) text += " + ";
    text += std::to_string(s.partition_frames) + "x" + std::to_string(s.count);
  }
  return text;
}

PartitionPlan plan_partitions(std::size_t head_frames, std::size_t taps,
                              const PartitionCostModel& costs, std::size_t max_partition_frames) {
  if (!power_of_two(head_frames))
    throw std::invalid_argument("plan_partitions: head size " + std::to_string(head_frames) +
                                " is not a power of two");
  if (taps == 0) throw std::invalid_argument("plan_partitions: no taps");
  if (max_partition_frames < head_frames) max_partition_frames = head_frames;

  TailSearch search(head_frames, taps, max_partition_frames, costs);
  const std::size_t covering = (taps + head_frames - 1) / head_frames;
  // The head needs at least two partitions before a tail of twice its size
  // has a call's worth of slack (first_tap >= 2B + B); any more it takes
  // shortens the tail.
  PartitionPlan best;
  double best_cost = std::numeric_limits<double>::infinity();
  for (std::size_t count = 1; count <= covering; ++count) {
    // Past a few calls' worth, a longer head only pays as the uniform plan.
    if (count > 3 + kExtraCountsSearched && count < covering) count = covering;
    double cost = costs.head_ns(head_frames, head_frames, count) / double(head_frames);
    const std::size_t end = count * head_frames;
    std::size_t next = 0;
    if (count < covering) {
      next = head_frames * 2;
      const std::size_t slack = std::max(head_frames, costs.min_slack_frames(next, head_frames));
      if (next > max_partition_frames || end < next + slack) continue;
      cost += search.best(end, next).cost;
    }
    if (cost < best_cost) {
      best_cost = cost;
      best.segments.assign(1, PartitionSegment{head_frames, count, 0});
      for (std::size_t offset = end, size = next; size != 0;) {
        const Choice& c = search.best(offset, size);
        best.segments.push_back(PartitionSegment{size, c.count, offset});
        offset += size * c.count;
        size = c.next_size;
      }
    }
  }
  best.head_frames = head_frames;
  best.taps = taps;
  best.validate();
  return best;
}

}  // namespace tapstream

#pragma once
// A ring of the most recent fixed-size records (each `Fields` 64-bit values),
// written by one real-time thread and read, whenever asked, by any other: the
// live pipeline's per-period timestamps, so that a burst of late periods can
// be lined up afterwards with what the machine did (docs/load-test.md).
//
// Threads: exactly one writer calls write() (it never locks, allocates, logs
// or waits: a few relaxed stores and two releases); any number of readers call
// snapshot() (it allocates; never on a real-time thread).
//
// Why the orderings suffice: each slot is a seqlock. Record n goes into slot
// n % capacity; the writer stores the slot's sequence 2n+1 (writing), then,
// after a release fence, the values (relaxed atomics, so a racing read is a
// stale value, never undefined behaviour), then 2n+2 with release, then the
// ring's count n+1 with release. A reader takes the count with acquire, and
// for each record it wants loads the sequence with acquire, the values
// relaxed, an acquire fence, and the sequence again: the record is whole
// exactly when both loads gave 2n+2 (the fences order the value loads between
// the two sequence loads against the writer's stores). A record overwritten
// while being read fails that test and is left out, never returned torn.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

namespace tapstream {

template <std::size_t Fields>
class TraceRing {
 public:
  using Record = std::array<std::int64_t, Fields>;

  // `capacity`: a power of two, the records kept.
  explicit TraceRing(std::size_t capacity)
      : capacity_(capacity), slots_(std::make_unique<Slot[]>(capacity)) {
    if (capacity == 0 || (capacity & (capacity - 1)) != 0) {
      throw std::invalid_argument("trace ring: capacity must be a power of two");
    }
  }
  TraceRing(const TraceRing&) = delete;
  TraceRing& operator=(const TraceRing&) = delete;

  std::size_t capacity() const noexcept { return capacity_; }
  // Records written so far (the newest is number written() - 1).
  std::uint64_t written() const noexcept { return count_.load(std::memory_order_acquire); }

  // The writer only.
  void write(const Record& values) noexcept {
    const std::uint64_t n = count_.load(std::memory_order_relaxed);
    Slot& slot = slots_[n & (capacity_ - 1)];
    slot.sequence.store(2 * n + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    for (std::size_t f = 0; f < Fields; ++f)
      slot.values[f].store(values[f], std::memory_order_relaxed);
    slot.sequence.store(2 * n + 2, std::memory_order_release);
    count_.store(n + 1, std::memory_order_release);
  }

  // Any thread: the newest whole records, up to `count`, oldest first.
  std::vector<Record> snapshot(std::size_t count) const {
    const std::uint64_t end = written();
    const std::uint64_t kept = std::min<std::uint64_t>({end, capacity_, count});
    std::vector<Record> records;
    records.reserve(kept);
    for (std::uint64_t n = end - kept; n < end; ++n) {
      const Slot& slot = slots_[n & (capacity_ - 1)];
      if (slot.sequence.load(std::memory_order_acquire) != 2 * n + 2) continue;
      Record record{};
      for (std::size_t f = 0; f < Fields; ++f) {
        record[f] = slot.values[f].load(std::memory_order_relaxed);
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      if (slot.sequence.load(std::memory_order_relaxed) != 2 * n + 2) continue;
      records.push_back(record);
    }
    return records;
  }

 private:
  struct Slot {
    std::atomic<std::uint64_t> sequence{0};
    std::array<std::atomic<std::int64_t>, Fields> values{};
  };
  std::size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<std::uint64_t> count_{0};
};

}  // namespace tapstream

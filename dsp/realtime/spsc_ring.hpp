#pragma once
// A lock-free single-producer single-consumer ring of samples, the only way
// the real-time audio callback and the engine thread exchange audio.
//
// Threads: exactly one producer thread calls write(), exactly one consumer
// thread calls read(); readable(), writable() and capacity() may be called by
// either (they return a snapshot). The ring allocates only in its constructor,
// and write()/read() never block, lock, allocate or wait: they move what fits
// and return how much that was.
//
// Why acquire/release is enough: the producer stores the samples, then
// publishes them by storing write_index_ with release; the consumer loads
// write_index_ with acquire before reading those samples, so it sees them
// written. Symmetrically the consumer frees space by storing read_index_ with
// release after it has copied the samples out, and the producer loads
// read_index_ with acquire before overwriting that space. Each index has a
// single writer, so plain load/store (no read-modify-write) suffices. The
// indices count items since construction (64-bit, never wrap in practice) and
// are reduced modulo the capacity only to address the buffer, so "full" and
// "empty" are never ambiguous. Each index sits on its own cache line, next to
// the other side's cached copy of it, so that producer and consumer do not
// invalidate each other's lines on every call.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <type_traits>

namespace tapstream {

template <typename T>
class SpscRing {
  static_assert(std::is_trivially_copyable_v<T>, "SpscRing copies items with memcpy");
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
                "SpscRing needs lock-free 64-bit atomics");

 public:
  explicit SpscRing(std::size_t capacity)
      : capacity_(capacity), buffer_(std::make_unique<T[]>(capacity)) {
    if (capacity == 0) throw std::invalid_argument("SpscRing: capacity must be at least 1");
  }
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  // Producer only. Copies as many leading items of `items` as fit; returns the count.
  std::size_t write(std::span<const T> items) {
    const std::uint64_t write_index = producer_.index.load(std::memory_order_relaxed);
    std::uint64_t free_items = capacity_ - (write_index - producer_.cached_other);
    if (free_items < items.size()) {
      // Refresh the cached read index only when the stale one says "not enough".
      producer_.cached_other = consumer_.index.load(std::memory_order_acquire);
      free_items = capacity_ - (write_index - producer_.cached_other);
    }
    const std::size_t count = std::min<std::size_t>(items.size(), free_items);
    if (count == 0) return 0;
    const std::size_t start = write_index % capacity_;
    const std::size_t first = std::min(count, capacity_ - start);
    std::memcpy(buffer_.get() + start, items.data(), first * sizeof(T));
    std::memcpy(buffer_.get(), items.data() + first, (count - first) * sizeof(T));
    producer_.index.store(write_index + count, std::memory_order_release);
    return count;
  }

  // Consumer only. Fills as many leading items of `items` as are available; returns the count.
  std::size_t read(std::span<T> items) {
    const std::uint64_t read_index = consumer_.index.load(std::memory_order_relaxed);
    std::uint64_t available = consumer_.cached_other - read_index;
    if (available < items.size()) {
      consumer_.cached_other = producer_.index.load(std::memory_order_acquire);
      available = consumer_.cached_other - read_index;
    }
    const std::size_t count = std::min<std::size_t>(items.size(), available);
    if (count == 0) return 0;
    const std::size_t start = read_index % capacity_;
    const std::size_t first = std::min(count, capacity_ - start);
    std::memcpy(items.data(), buffer_.get() + start, first * sizeof(T));
    std::memcpy(items.data() + first, buffer_.get(), (count - first) * sizeof(T));
    consumer_.index.store(read_index + count, std::memory_order_release);
    return count;
  }

  // Items waiting to be read (exact for the consumer; a lower bound for others).
  std::size_t readable() const {
    const std::uint64_t read_index = consumer_.index.load(std::memory_order_acquire);
    const std::uint64_t write_index = producer_.index.load(std::memory_order_acquire);
    return static_cast<std::size_t>(write_index - read_index);
  }
  // Free space (exact for the producer; a lower bound for others).
  std::size_t writable() const {
    const std::uint64_t write_index = producer_.index.load(std::memory_order_acquire);
    const std::uint64_t read_index = consumer_.index.load(std::memory_order_acquire);
    return capacity_ - static_cast<std::size_t>(write_index - read_index);
  }
  std::size_t capacity() const { return capacity_; }

 private:
  // 64 bytes is the line size of every x86-64 and most ARM64 cores we target;
  // std::hardware_destructive_interference_size warns about ABI instability.
  static constexpr std::size_t cache_line = 64;

  struct alignas(cache_line) Side {
    std::atomic<std::uint64_t> index{0};  // written only by this side's thread
    std::uint64_t cached_other = 0;       // this side's last view of the other index
  };

  const std::size_t capacity_;
  const std::unique_ptr<T[]> buffer_;
  // Note on readable()/writable(): they read both indices, so they are safe
  // from any thread, but the result may be stale by the time it is used.
  Side producer_;
  Side consumer_;
};

}  // namespace tapstream

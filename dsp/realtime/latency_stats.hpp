#pragma once
// Per-block processing times of the engine, recorded by the engine thread and
// summarised as percentiles by the control thread (`tapstream ctl status`).
//
// Threads: exactly one thread (the engine thread) calls record(); any thread
// may call snapshot()/summary(). record() never locks, allocates or waits: it
// bumps one counter of a fixed log-linear histogram (16 buckets per octave,
// so a percentile is exact to within 1/16 of its value, about 6 %) and the
// total, sum and maximum.
//
// Why relaxed ordering is enough: every counter has one writer and only ever
// grows, and readers infer nothing about other memory from it. A reader that
// runs concurrently with record() may see a block counted in its bucket but
// not yet in `sum`, or the reverse; the summary is computed from the bucket
// counts it actually read, so it is always self-consistent up to that one
// block in flight.

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace tapstream {

class LatencyStats {
 public:
  static constexpr int sub_buckets_log2 = 4;  // 16 buckets per power of two
  static constexpr std::size_t sub_buckets = std::size_t{1} << sub_buckets_log2;
  // Values below 2^41 ns (36 minutes) get their own bucket; longer ones share the last.
  static constexpr int max_exponent = 40;
  static constexpr std::size_t bucket_count = (max_exponent - sub_buckets_log2 + 2) * sub_buckets;

  struct Snapshot {
    std::array<std::uint64_t, bucket_count> buckets{};
    std::uint64_t sum_ns = 0;
    std::uint64_t max_ns = 0;
  };

  struct Summary {
    std::uint64_t count = 0;
    double mean_us = 0, p50_us = 0, p90_us = 0, p99_us = 0, p999_us = 0, max_us = 0;
  };

  // Engine thread only.
  void record(std::chrono::nanoseconds elapsed) noexcept {
    const std::uint64_t ns = elapsed.count() > 0 ? static_cast<std::uint64_t>(elapsed.count()) : 0;
    auto& bucket = buckets_[bucket_index(ns)];
    bucket.store(bucket.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    sum_ns_.store(sum_ns_.load(std::memory_order_relaxed) + ns, std::memory_order_relaxed);
    if (ns > max_ns_.load(std::memory_order_relaxed)) max_ns_.store(ns, std::memory_order_relaxed);
  }

  // Any thread.
  Snapshot snapshot() const {
    Snapshot out;
    for (std::size_t i = 0; i < bucket_count; ++i) {
      out.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
    }
    out.sum_ns = sum_ns_.load(std::memory_order_relaxed);
    out.max_ns = max_ns_.load(std::memory_order_relaxed);
    return out;
  }

  // Everything recorded so far.
  Summary summary() const { return summarize(snapshot(), nullptr); }

  // The blocks recorded between `before` and `now` (both from snapshot()),
  // or all of `now` when `before` is null. Within a window the maximum is
  // the upper edge of the highest bucket used (capped by the all-time max).
  static Summary summarize(const Snapshot& now, const Snapshot* before) {
    std::array<std::uint64_t, bucket_count> counts = now.buckets;
    std::uint64_t sum_ns = now.sum_ns;
    if (before != nullptr) {
      for (std::size_t i = 0; i < bucket_count; ++i) counts[i] -= before->buckets[i];
      sum_ns -= before->sum_ns;
    }
    Summary out;
    for (auto count : counts) out.count += count;
    if (out.count == 0) return out;
    out.mean_us = double(sum_ns) / double(out.count) / 1000.0;
    out.p50_us = percentile_ns(counts, out.count, 0.50, now.max_ns) / 1000.0;
    out.p90_us = percentile_ns(counts, out.count, 0.90, now.max_ns) / 1000.0;
    out.p99_us = percentile_ns(counts, out.count, 0.99, now.max_ns) / 1000.0;
    out.p999_us = percentile_ns(counts, out.count, 0.999, now.max_ns) / 1000.0;
    out.max_us = percentile_ns(counts, out.count, 1.0, now.max_ns) / 1000.0;
    return out;
  }

  // The bucket a value falls in: values below 16 ns have one bucket each;
  // above, each power of two [2^e, 2^(e+1)) is split into 16 equal buckets.
  static std::size_t bucket_index(std::uint64_t ns) noexcept {
    if (ns < sub_buckets) return static_cast<std::size_t>(ns);
    const int exponent = std::bit_width(ns) - 1;  // >= sub_buckets_log2
    if (exponent > max_exponent) return bucket_count - 1;
    const std::uint64_t mantissa = (ns >> (exponent - sub_buckets_log2)) & (sub_buckets - 1);
    return static_cast<std::size_t>(exponent - sub_buckets_log2 + 1) * sub_buckets +
           static_cast<std::size_t>(mantissa);
  }
  // The largest value that falls in bucket `index`.
  static std::uint64_t bucket_upper_ns(std::size_t index) noexcept {
    if (index < sub_buckets) return index;
    const int exponent = static_cast<int>(index / sub_buckets) + sub_buckets_log2 - 1;
    const std::uint64_t mantissa = index % sub_buckets;
    const int shift = exponent - sub_buckets_log2;
    return ((sub_buckets + mantissa + 1) << shift) - 1;
  }

 private:
  // The upper edge of the bucket holding the ceil(q * count)-th smallest
  // value, capped by the largest value seen: never below the true percentile.
  static double percentile_ns(const std::array<std::uint64_t, bucket_count>& counts,
                              std::uint64_t count, double q, std::uint64_t max_ns) {
    std::uint64_t rank = static_cast<std::uint64_t>(std::ceil(q * double(count)));
    if (rank == 0) rank = 1;
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < bucket_count; ++i) {
      seen += counts[i];
      if (seen >= rank) {
        const std::uint64_t upper = bucket_upper_ns(i);
        return double(upper < max_ns ? upper : max_ns);
      }
    }
    return double(max_ns);
  }

  std::array<std::atomic<std::uint64_t>, bucket_count> buckets_{};
  std::atomic<std::uint64_t> sum_ns_{0};
  std::atomic<std::uint64_t> max_ns_{0};
};

}  // namespace tapstream

#pragma once
// What the per-channel engines' updates cost, counted (a test hook, not a
// timing): how many channel filters were transformed (a bank's prepare, a
// per-channel update's channels) and how many channels played their old
// filter beside the new one in a crossfade call. Tests read the difference
// over an update to see that it costs its channels, not the bank
// (tests/channel_updates_test.cpp). Relaxed atomics: a count, no ordering;
// incrementing one neither locks nor allocates, so the audio path may.

#include <atomic>
#include <cstdint>

namespace tapstream {

struct ChannelWork {
  std::atomic<std::uint64_t> transformed{0};
  std::atomic<std::uint64_t> faded{0};
};

inline ChannelWork channel_work;

inline void count_transformed(std::uint64_t channels) {
  channel_work.transformed.fetch_add(channels, std::memory_order_relaxed);
}
inline void count_faded(std::uint64_t channels) {
  channel_work.faded.fetch_add(channels, std::memory_order_relaxed);
}

}  // namespace tapstream

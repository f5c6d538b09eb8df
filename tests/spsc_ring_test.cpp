// Tests of SpscRing: single-threaded behaviour against a simple model, and a
// producer/consumer stress test (run it under ThreadSanitizer too).

#include "dsp/realtime/spsc_ring.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

namespace tapstream {
namespace {

TEST(SpscRing, StartsEmptyWithItsWholeCapacityWritable) {
  SpscRing<float> ring(37);
  EXPECT_EQ(ring.capacity(), 37u);
  EXPECT_EQ(ring.readable(), 0u);
  EXPECT_EQ(ring.writable(), 37u);
  std::vector<float> out(5, -1.0f);
  EXPECT_EQ(ring.read(out), 0u);
  EXPECT_EQ(out[0], -1.0f);
}

TEST(SpscRing, RefusesZeroCapacity) {
  EXPECT_THROW(SpscRing<float>(0), std::invalid_argument);
}

TEST(SpscRing, WriteTakesOnlyWhatFitsAndReadOnlyWhatIsThere) {
  SpscRing<float> ring(10);
  std::vector<float> in(25);
  std::iota(in.begin(), in.end(), 1.0f);
  EXPECT_EQ(ring.write(in), 10u);
  EXPECT_EQ(ring.writable(), 0u);
  EXPECT_EQ(ring.write(std::span<const float>(in).subspan(10)), 0u);

  std::vector<float> out(4);
  EXPECT_EQ(ring.read(out), 4u);
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ring.readable(), 6u);
  EXPECT_EQ(ring.writable(), 4u);

  // Wraps around the end of the buffer.
  EXPECT_EQ(ring.write(std::span<const float>(in).subspan(10)), 4u);
  std::vector<float> rest(20);
  EXPECT_EQ(ring.read(rest), 10u);
  EXPECT_EQ(std::vector<float>(rest.begin(), rest.begin() + 10),
            (std::vector<float>{5, 6, 7, 8, 9, 10, 11, 12, 13, 14}));
  EXPECT_EQ(ring.readable(), 0u);
}

TEST(SpscRing, MatchesAQueueModelOverRandomWritesAndReads) {
  const unsigned seed = 20261122;
  std::printf("seed %u\n", seed);
  std::mt19937 random(seed);
  for (std::size_t capacity : {1u, 2u, 7u, 64u, 1000u}) {
    SpscRing<std::uint32_t> ring(capacity);
    std::deque<std::uint32_t> model;
    std::uint32_t next = 0;
    std::uniform_int_distribution<std::size_t> chunk(0, 2 * capacity + 1);
    for (int step = 0; step < 5000; ++step) {
      if (random() % 2 == 0) {
        std::vector<std::uint32_t> in(chunk(random));
        for (auto& value : in) value = next++;
        const std::size_t written = ring.write(in);
        ASSERT_EQ(written, std::min(in.size(), capacity - model.size())) << "capacity " << capacity;
        model.insert(model.end(), in.begin(), in.begin() + written);
        next -= static_cast<std::uint32_t>(in.size() - written);  // unwritten values are reused
      } else {
        std::vector<std::uint32_t> out(chunk(random));
        const std::size_t count = ring.read(out);
        ASSERT_EQ(count, std::min(out.size(), model.size())) << "capacity " << capacity;
        for (std::size_t i = 0; i < count; ++i) {
          ASSERT_EQ(out[i], model.front()) << "capacity " << capacity << " step " << step;
          model.pop_front();
        }
      }
      ASSERT_EQ(ring.readable(), model.size());
      ASSERT_EQ(ring.writable(), capacity - model.size());
    }
  }
}

// One producer and one consumer thread, each moving random chunk sizes (some
// larger than the ring); every value must arrive once, complete and in order.
void stress(std::size_t capacity, std::uint32_t total, unsigned seed) {
  std::printf("capacity %zu, %u items, seed %u\n", capacity, total, seed);
  SpscRing<float> ring(capacity);
  // Floats hold integers exactly up to 2^24.
  ASSERT_LE(total, 1u << 24);

  std::thread producer([&] {
    std::mt19937 random(seed);
    std::uniform_int_distribution<std::size_t> chunk(1, capacity + capacity / 2 + 1);
    std::vector<float> buffer(capacity * 2 + 2);
    std::uint32_t next = 0;
    while (next < total) {
      const std::size_t want = std::min<std::size_t>(chunk(random), total - next);
      for (std::size_t i = 0; i < want; ++i) buffer[i] = static_cast<float>(next + i);
      const std::size_t written = ring.write(std::span<const float>(buffer.data(), want));
      next += static_cast<std::uint32_t>(written);
      if (written == 0) std::this_thread::yield();
    }
  });

  std::mt19937 random(seed + 1);
  std::uniform_int_distribution<std::size_t> chunk(1, capacity + capacity / 2 + 1);
  std::vector<float> buffer(capacity * 2 + 2);
  std::uint32_t expected = 0;
  std::uint32_t mismatches = 0;
  while (expected < total) {
    const std::size_t count = ring.read(std::span<float>(buffer.data(), chunk(random)));
    for (std::size_t i = 0; i < count; ++i) {
      if (buffer[i] != static_cast<float>(expected)) {
        if (mismatches++ < 5) ADD_FAILURE() << "at " << expected << " got " << buffer[i];
      }
      ++expected;
    }
    if (count == 0) std::this_thread::yield();
  }
  producer.join();
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(expected, total);
  EXPECT_EQ(ring.readable(), 0u);
}

TEST(SpscRing, ProducerAndConsumerThreadsDeliverEverySampleInOrder) {
  stress(1000, 2000000, 7);
}

TEST(SpscRing, TinyRingUnderContentionDeliversEverySampleInOrder) {
  stress(3, 200000, 11);
}

TEST(SpscRing, PowerOfTwoRingUnderContentionDeliversEverySampleInOrder) {
  stress(256, 1000000, 13);
}

}  // namespace
}  // namespace tapstream

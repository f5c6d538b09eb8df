// The CUDA FFT convolver (kernels/convolvers/fft_convolver.hpp) against a float64
// reference: random shapes, block sizes that vary within one stream, shared and
// per-channel filters, filter swaps with and without crossfade, and reset.
// Long filters are checked at sampled output positions (the float64 reference
// is O(taps) per output). Skips where there is no CUDA device.
//
// The fused single-partition kernel (kernels/device/fused_overlap_save.hpp) is
// checked for every partition it supports, in streams that mix its runs of
// whole segments with partial segments and crossfades; the multi-partition
// kernels (kernels/device/multi_partition_overlap_save.hpp) likewise for K = 2..32.
//
// DISABLED_PrintsThroughputOfBenchmarkShapes times the benchmark's offline
// shapes with CUDA events and prints them (run it with
// --gtest_also_run_disabled_tests); TAPSTREAM_FFT_TIMING_ONLY=taps:block:partition
// limits it to one shape and one pass (for a profiler).

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kernels/convolvers/fft_convolver.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/cuda_resources.hpp"
#include "tests/reference.hpp"

namespace tapstream {
namespace {

using cuda::DeviceBuffer;
using cuda::FftConvolver;
using cuda::Stream;

constexpr double kTolerance = 1e-5;

bool device_missing(std::string* reason) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    *reason = std::string("no usable CUDA device: ") + cudaGetErrorString(error);
    cudaGetLastError();
    return true;
  }
  if (count == 0) {
    *reason = "no CUDA device";
    return true;
  }
  return false;
}

#define SKIP_WITHOUT_DEVICE()                              \
  do {                                                     \
    std::string reason_;                                   \
    if (device_missing(&reason_)) GTEST_SKIP() << reason_; \
  } while (0)

void parallel_for(std::size_t count, const std::function<void(std::size_t)>& body) {
  const std::size_t workers =
      std::max<std::size_t>(1, std::min<std::size_t>(count, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      for (std::size_t i = w; i < count; i += workers) body(i);
    });
  }
  for (auto& t : threads) t.join();
}

// A planar multi-channel signal: channel c's frames at c * frames.
struct Signal {
  std::size_t channels = 0;
  std::size_t frames = 0;
  std::vector<float> samples;
  std::span<const float> channel(std::size_t c) const {
    return std::span<const float>(samples).subspan(c * frames, frames);
  }
};

Signal random_planar(std::size_t channels, std::size_t frames, std::uint64_t seed) {
  return Signal{channels, frames, testing::random_signal(channels * frames, seed)};
}

// Filters `x` in calls of the given sizes (summing to x.frames) through device
// buffers with a channel stride of max_block; `before_call(k)` runs before call k.
Signal run_stream(FftConvolver& convolver, const Signal& x, const std::vector<std::size_t>& calls,
                  std::size_t max_block,
                  const std::function<void(std::size_t)>& before_call = nullptr) {
  Stream stream;
  DeviceBuffer<float> in(x.channels * max_block);
  DeviceBuffer<float> out(x.channels * max_block);
  Signal y{x.channels, x.frames, std::vector<float>(x.samples.size(), std::nanf(""))};
  std::size_t position = 0;
  for (std::size_t k = 0; k < calls.size(); ++k) {
    if (before_call) before_call(k);
    const std::size_t frames = calls[k];
    TAPSTREAM_CUDA_CHECK(cudaMemcpy2DAsync(
        in.get(), max_block * sizeof(float), x.samples.data() + position, x.frames * sizeof(float),
        frames * sizeof(float), x.channels, cudaMemcpyHostToDevice, stream.get()));
    convolver.process(cuda::planar_block(in.get(), max_block, out.get(), max_block, frames),
                      stream.get());
    TAPSTREAM_CUDA_CHECK(cudaMemcpy2DAsync(
        y.samples.data() + position, y.frames * sizeof(float), out.get(), max_block * sizeof(float),
        frames * sizeof(float), x.channels, cudaMemcpyDeviceToHost, stream.get()));
    stream.synchronize();
    position += frames;
  }
  return y;
}

// Call sizes in 1..max_block summing to `frames`: whole blocks, tiny ones and
// everything between, so that calls start and end anywhere in a partition.
std::vector<std::size_t> random_calls(std::size_t frames, std::size_t max_block,
                                      std::mt19937_64& rng) {
  std::vector<std::size_t> calls;
  std::size_t left = frames;
  while (left > 0) {
    std::size_t size = 0;
    switch (rng() % 4) {
      case 0:
        size = max_block;
        break;
      case 1:
        size = 1 + rng() % std::min<std::size_t>(max_block, 16);
        break;
      default:
        size = 1 + rng() % max_block;
    }
    size = std::min(size, left);
    calls.push_back(size);
    left -= size;
  }
  return calls;
}

std::vector<std::size_t> fixed_calls(std::size_t frames, std::size_t size) {
  std::vector<std::size_t> calls(frames / size, size);
  if (frames % size) calls.push_back(frames % size);
  return calls;
}

double reference_at(std::span<const float> x, std::span<const float> h, std::size_t n) {
  const std::size_t kmax = std::min(h.size() - 1, n);
  double acc = 0.0;
  for (std::size_t k = 0; k <= kmax; ++k) acc += double(h[k]) * double(x[n - k]);
  return acc;
}

// Relative error of y against the float64 convolution of x with `bank`, over
// all outputs of [from, to) when the reference is cheap enough, else over
// `budget`-limited random positions (and the first and last frames) in it.
double error_against_reference(const Signal& x, const FilterBank& bank, const Signal& y,
                               std::size_t from, std::size_t to, std::uint64_t seed,
                               double budget = 4e8) {
  std::vector<double> num(x.channels, 0.0), den(x.channels, 0.0);
  parallel_for(x.channels, [&](std::size_t c) {
    const auto h = bank.taps(c);
    const auto xc = x.channel(c);
    const auto yc = y.channel(c);
    const std::size_t count = to - from;
    const std::size_t wanted = std::size_t(budget / double(x.channels) / double(h.size())) + 64;
    std::vector<std::size_t> positions;
    if (wanted >= count) {
      for (std::size_t n = from; n < to; ++n) positions.push_back(n);
    } else {
      std::mt19937_64 rng(seed + c);
      for (std::size_t i = 0; i < std::min<std::size_t>(16, count); ++i) {
        positions.push_back(from + i);
        positions.push_back(to - 1 - i);
      }
      while (positions.size() < wanted) positions.push_back(from + rng() % count);
    }
    for (const std::size_t n : positions) {
      const double want = reference_at(xc, h, n);
      const double d = double(yc[n]) - want;
      num[c] += d * d;
      den[c] += want * want;
    }
  });
  double n = 0, d = 0;
  for (std::size_t c = 0; c < x.channels; ++c) {
    n += num[c];
    d += den[c];
  }
  return d == 0.0 ? std::sqrt(n) : std::sqrt(n / d);
}

FilterBank random_bank(std::size_t channels, std::size_t taps, bool shared, std::uint64_t seed) {
  if (shared) return FilterBank::shared(testing::random_signal(taps, seed), channels);
  // Per-channel filters of different lengths, the longest `taps`.
  std::mt19937_64 rng(seed);
  std::vector<std::vector<float>> filters;
  for (std::size_t c = 0; c < channels; ++c) {
    const std::size_t length = c == 0 ? taps : 1 + rng() % taps;
    filters.push_back(testing::random_signal(length, seed * 1000 + c));
  }
  return FilterBank::per_channel(std::move(filters));
}

struct Shape {
  std::size_t channels;
  std::size_t taps;
  std::size_t max_block;
  bool shared;
  std::size_t frames;
  std::size_t partition;  // 0: the convolver's choice
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.channels << " ch, " << s.taps << " taps, blocks <= " << s.max_block
      << (s.shared ? ", shared" : ", per-channel") << ", " << s.frames << " frames, partition "
      << s.partition;
}

// How whole segments are filtered.
enum class Path { kSeparateKernels, kCufftCallbacks, kFusedKernel };

std::unique_ptr<FftConvolver> make_convolver(const FilterBank& bank, std::size_t taps,
                                             std::size_t max_block, std::size_t partition,
                                             Path path) {
  return std::make_unique<FftConvolver>(bank, taps, max_block, partition,
                                        path == Path::kCufftCallbacks, path == Path::kFusedKernel);
}

// Each shape through each path for whole segments.
class FftConvolverShapes : public ::testing::TestWithParam<std::tuple<Shape, Path>> {};

TEST_P(FftConvolverShapes, MatchesFloat64ReferenceWithVaryingBlockSizes) {
  SKIP_WITHOUT_DEVICE();
  const auto [s, path] = GetParam();
  const std::uint64_t seed = 1000 + s.channels * 7 + s.taps * 13 + s.max_block;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const FilterBank bank = random_bank(s.channels, s.taps, s.shared, seed);
  const auto made = make_convolver(bank, s.taps, s.max_block, s.partition, path);
  FftConvolver& convolver = *made;
  std::printf("%s\n", convolver.description().c_str());
  const Signal x = random_planar(s.channels, s.frames, seed + 1);
  std::mt19937_64 rng(seed + 2);
  const auto calls = random_calls(s.frames, s.max_block, rng);
  const Signal y = run_stream(convolver, x, calls, s.max_block);
  for (const float v : y.samples) ASSERT_TRUE(std::isfinite(v)) << "an output was not written";
  EXPECT_LE(error_against_reference(x, bank, y, 0, s.frames, seed), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(
    RandomShapes, FftConvolverShapes,
    ::testing::Combine(
        ::testing::Values(
            Shape{1, 1, 1, true, 300, 0}, Shape{3, 100, 37, false, 4000, 0},
            Shape{64, 2048, 256, true, 20000, 0}, Shape{2, 5000, 4096, false, 40000, 64},
            Shape{5, 131072, 1024, false, 330000, 0}, Shape{8, 131072, 65536, true, 400000, 0},
            Shape{64, 16384, 65536, false, 200000, 0}, Shape{17, 777, 3000, false, 50000, 0},
            Shape{1, 65536, 1, true, 2000, 0}, Shape{7, 300, 65536, true, 300000, 0}),
        ::testing::Values(Path::kSeparateKernels, Path::kCufftCallbacks, Path::kFusedKernel)));

// Shapes drawn at random (fixed seeds), within the engine's limits.
TEST(FftConvolver, MatchesFloat64ReferenceForRandomShapes) {
  SKIP_WITHOUT_DEVICE();
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    std::mt19937_64 rng(seed);
    const std::size_t channels = 1 + rng() % 64;
    const std::size_t taps = std::size_t(std::exp2(double(rng() % 1700) / 100.0));  // 1..2^17
    const std::size_t max_block = std::size_t(std::exp2(double(rng() % 1600) / 100.0)) + 1;
    const bool shared = rng() % 2 == 0;
    // Enough frames to cross every partition, few enough calls to stay quick.
    const std::size_t frames =
        std::min<std::size_t>(std::max<std::size_t>(2 * taps + max_block, 5000),
                              std::min<std::size_t>(300 * max_block, 4'000'000 / channels));
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + std::to_string(channels) + " ch, " +
                 std::to_string(taps) + " taps, blocks <= " + std::to_string(max_block) +
                 (shared ? ", shared" : ", per-channel") + ", " + std::to_string(frames) +
                 " frames");
    const FilterBank bank = random_bank(channels, taps, shared, seed);
    FftConvolver convolver(bank, taps, max_block, 0, seed % 3 == 0, seed % 3 == 1);
    const Signal x = random_planar(channels, frames, seed + 1);
    const auto calls = random_calls(frames, max_block, rng);
    const Signal y = run_stream(convolver, x, calls, max_block);
    EXPECT_LE(error_against_reference(x, bank, y, 0, frames, seed), kTolerance);
  }
}

TEST(FftConvolver, FusedCallbackPathIsAvailableOnThisDevice) {
  SKIP_WITHOUT_DEVICE();
  const FilterBank bank = random_bank(2, 1000, true, 3);
  FftConvolver convolver(bank, 1000, 4096, 0, true, false);
  EXPECT_TRUE(convolver.fused()) << convolver.description();
}

TEST(FftConvolver, OutputDoesNotDependOnBlockSize) {
  SKIP_WITHOUT_DEVICE();
  const std::uint64_t seed = 77;
  const FilterBank bank = random_bank(4, 3000, false, seed);
  const Signal x = random_planar(4, 12000, seed + 1);
  std::mt19937_64 rng(seed);
  FftConvolver tiny(bank, 3000, 512);
  FftConvolver whole(bank, 3000, 512);
  const Signal a = run_stream(tiny, x, random_calls(x.frames, 7, rng), 512);
  const Signal b = run_stream(whole, x, fixed_calls(x.frames, 512), 512);
  EXPECT_LE(testing::relative_error(a.samples, b.samples), kTolerance);
  EXPECT_LE(error_against_reference(x, bank, a, 0, x.frames, seed), kTolerance);
}

void verify_swap(const Signal& x, const FilterBank& old_bank, const FilterBank& new_bank,
                 const Signal& y, std::size_t swap_at, std::size_t swap_call_frames, bool crossfade,
                 std::uint64_t seed);

// The first call after set_filters(new, true) fades from the old filters'
// output to the new's (weight (i + 1) / frames on the new at frame i); calls
// before use the old filters, calls after the new, over the whole history.
void check_swap(bool crossfade, std::size_t swap_call_frames, std::size_t partition,
                std::uint64_t seed, bool fused = true, bool fused_kernel = false) {
  SCOPED_TRACE("seed " + std::to_string(seed) + (crossfade ? ", crossfade" : ", no crossfade") +
               ", swap call of " + std::to_string(swap_call_frames) + " frames");
  const std::size_t channels = 3, max_block = 4096, frames = 30000;
  const FilterBank old_bank = random_bank(channels, 1500, true, seed);
  const FilterBank new_bank = random_bank(channels, 2500, false, seed + 1);
  const Signal x = random_planar(channels, frames, seed + 2);
  std::vector<std::size_t> calls = {1000, 333, 4096, 77};  // 5506 frames before the swap
  std::size_t swap_at = 0;
  for (const auto c : calls) swap_at += c;
  const std::size_t swap_call = calls.size();
  calls.push_back(swap_call_frames);
  std::mt19937_64 rng(seed);
  for (const auto c : random_calls(frames - swap_at - swap_call_frames, 1000, rng))
    calls.push_back(c);

  FftConvolver convolver(old_bank, 2500, max_block, partition, fused, fused_kernel);
  const Signal y = run_stream(convolver, x, calls, max_block, [&](std::size_t k) {
    if (k == swap_call) convolver.set_filters(new_bank, crossfade);
  });
  verify_swap(x, old_bank, new_bank, y, swap_at, swap_call_frames, crossfade, seed);
}

// y switched from old_bank to new_bank at frame swap_at, fading over the
// swap_call_frames of that call when crossfade is set.
void verify_swap(const Signal& x, const FilterBank& old_bank, const FilterBank& new_bank,
                 const Signal& y, std::size_t swap_at, std::size_t swap_call_frames, bool crossfade,
                 std::uint64_t seed) {
  const std::size_t channels = x.channels, frames = x.frames;
  EXPECT_LE(error_against_reference(x, old_bank, y, 0, swap_at, seed), kTolerance);
  const std::size_t after = swap_at + swap_call_frames;
  EXPECT_LE(error_against_reference(x, new_bank, y, crossfade ? after : swap_at, frames, seed),
            kTolerance);
  if (crossfade) {
    double num = 0, den = 0;
    for (std::size_t c = 0; c < channels; ++c) {
      for (std::size_t i = 0; i < swap_call_frames; ++i) {
        const std::size_t n = swap_at + i;
        const double w = double(i + 1) / double(swap_call_frames);
        const double want = reference_at(x.channel(c), old_bank.taps(c), n) * (1.0 - w) +
                            reference_at(x.channel(c), new_bank.taps(c), n) * w;
        num += (y.channel(c)[n] - want) * (y.channel(c)[n] - want);
        den += want * want;
      }
    }
    EXPECT_LE(std::sqrt(num / den), kTolerance);
  }
}

TEST(FftConvolver, CrossfadeCallBlendsOldAndNewFilterOutputs) {
  SKIP_WITHOUT_DEVICE();
  check_swap(true, 4096, 0, 5);    // partition 4096: one partial + remainder
  check_swap(true, 3000, 256, 6);  // partial head, whole segments, partial tail
  check_swap(true, 1, 0, 7);       // a one-frame fade ends fully new
  check_swap(true, 100, 256, 8);
  check_swap(true, 3000, 256, 11, false);  // whole segments through separate kernels
}

TEST(FftConvolver, SetFiltersWithoutCrossfadeFiltersTheWholeHistoryWithTheNewFilters) {
  SKIP_WITHOUT_DEVICE();
  check_swap(false, 4096, 0, 9);
  check_swap(false, 2000, 128, 10);
  check_swap(false, 2000, 128, 12, false);
}

TEST(FftConvolver, TwoSwapsBeforeACallFadeFromTheFiltersLastUsed) {
  SKIP_WITHOUT_DEVICE();
  const std::uint64_t seed = 21;
  const FilterBank a = random_bank(2, 700, false, seed);
  const FilterBank b = random_bank(2, 900, true, seed + 1);
  const FilterBank c = random_bank(2, 1000, false, seed + 2);
  const Signal x = random_planar(2, 6000, seed + 3);
  FftConvolver convolver(a, 1000, 2000, 128);
  const Signal y = run_stream(convolver, x, {2000, 2000, 2000}, 2000, [&](std::size_t k) {
    if (k == 1) {
      convolver.set_filters(b, true);
      convolver.set_filters(c, true);
    }
  });
  double num = 0, den = 0;
  for (std::size_t ch = 0; ch < 2; ++ch) {
    for (std::size_t i = 0; i < 2000; ++i) {
      const std::size_t n = 2000 + i;
      const double w = double(i + 1) / 2000.0;
      const double want = reference_at(x.channel(ch), a.taps(ch), n) * (1.0 - w) +
                          reference_at(x.channel(ch), c.taps(ch), n) * w;
      num += (y.channel(ch)[n] - want) * (y.channel(ch)[n] - want);
      den += want * want;
    }
  }
  EXPECT_LE(std::sqrt(num / den), kTolerance);
  EXPECT_LE(error_against_reference(x, c, y, 4000, 6000, seed), kTolerance);
}

TEST(FftConvolver, ResetForgetsTheInputHistory) {
  SKIP_WITHOUT_DEVICE();
  const std::uint64_t seed = 31;
  const FilterBank bank = random_bank(5, 3000, false, seed);
  FftConvolver convolver(bank, 3000, 1024, 256);
  const Signal first = random_planar(5, 7777, seed + 1);
  std::mt19937_64 rng(seed);
  run_stream(convolver, first, random_calls(first.frames, 1024, rng), 1024);
  Stream stream;
  convolver.reset(stream.get());
  stream.synchronize();
  const Signal second = random_planar(5, 9000, seed + 2);
  const Signal y = run_stream(convolver, second, random_calls(second.frames, 1024, rng), 1024);
  EXPECT_LE(error_against_reference(second, bank, y, 0, second.frames, seed), kTolerance);
}

// Every partition the fused kernel supports, shared and per-channel filters,
// 1..64 channels, its runs of whole segments mixed with partial segments (the
// history crossing from one path to the other in both directions), and calls
// of exactly one segment (each window's first half from the saved history).
TEST(FftConvolver, FusedKernelMatchesFloat64ReferenceForEveryPartition) {
  SKIP_WITHOUT_DEVICE();
  for (std::size_t partition = 256; partition <= 16384; partition *= 2) {
    for (const bool shared : {true, false}) {
      const std::uint64_t seed = 5000 + partition + (shared ? 1 : 0);
      std::mt19937_64 rng(seed);
      const std::size_t channels = partition >= 8192 ? 1 + rng() % 4 : 1 + rng() % 64;
      const std::size_t max_block = 3 * partition + 17;
      const std::size_t frames = std::min<std::size_t>(
          14 * partition + 1234, std::max<std::size_t>(4'000'000 / channels, 4 * partition));
      SCOPED_TRACE("seed " + std::to_string(seed) + ": partition " + std::to_string(partition) +
                   ", " + std::to_string(channels) + " ch" +
                   (shared ? ", shared" : ", per-channel"));
      const FilterBank bank = random_bank(channels, partition, shared, seed);
      const Signal x = random_planar(channels, frames, seed + 1);
      for (const bool whole_segments : {false, true}) {
        FftConvolver convolver(bank, partition, max_block, partition, false, true);
        ASSERT_TRUE(convolver.fused_kernel()) << convolver.description();
        ASSERT_EQ(convolver.partitions(), 1u);
        std::vector<std::size_t> calls;
        if (whole_segments) {
          calls = {partition / 2, partition / 2, partition, 2 * partition, 1,
                   partition - 1, 3 * partition};
          std::size_t used = 0;
          for (const auto c : calls) used += c;
          for (const auto c : fixed_calls(frames - used, partition)) calls.push_back(c);
        } else {
          calls = random_calls(frames, max_block, rng);
        }
        const Signal y = run_stream(convolver, x, calls, max_block);
        for (const float v : y.samples)
          ASSERT_TRUE(std::isfinite(v)) << "an output was not written";
        EXPECT_LE(error_against_reference(x, bank, y, 0, frames, seed, 2e8), kTolerance)
            << (whole_segments ? "calls of whole segments" : "random calls");
      }
    }
  }
}

// A crossfade call between runs of whole segments, with filters of old_taps
// then new_taps taps (the old shared when old_shared): with fade_whole the fade
// is 4 whole segments from a boundary, otherwise it starts mid-segment. The
// fade uses both filters, the runs around it only the one in effect, and the
// history carries across. `check` asserts which path the convolver runs.
void check_crossfade_between_runs(std::uint64_t seed, bool fade_whole, bool old_shared,
                                  std::size_t channels, std::size_t partition, std::size_t old_taps,
                                  std::size_t new_taps,
                                  const std::function<void(const FftConvolver&)>& check) {
  const std::size_t max_block = 8192;
  const FilterBank old_bank = random_bank(channels, old_taps, old_shared, seed);
  const FilterBank new_bank = random_bank(channels, new_taps, false, seed + 1);
  std::vector<std::size_t> calls = fade_whole ? std::vector<std::size_t>{3000, 72, 4 * partition}
                                              : std::vector<std::size_t>{5000, 3000};
  const std::size_t swap_call = calls.size() - 1;
  std::size_t swap_at = 0;
  for (std::size_t k = 0; k < swap_call; ++k) swap_at += calls[k];
  for (const std::size_t c :
       {std::size_t(8192), std::size_t(5000), partition, std::size_t(3), std::size_t(8192)})
    calls.push_back(c);
  std::size_t frames = 0;
  for (const auto c : calls) frames += c;
  const Signal x = random_planar(channels, frames, seed + 2);
  FftConvolver convolver(old_bank, new_taps, max_block, partition, false, true);
  ASSERT_NO_FATAL_FAILURE(check(convolver));
  const Signal y = run_stream(convolver, x, calls, max_block, [&](std::size_t k) {
    if (k == swap_call) convolver.set_filters(new_bank, true);
  });
  verify_swap(x, old_bank, new_bank, y, swap_at, calls[swap_call], true, seed);
}

TEST(FftConvolver, CrossfadeBetweenFusedRunsBlendsOldAndNewFilters) {
  SKIP_WITHOUT_DEVICE();
  for (const std::uint64_t seed : {41u, 42u}) {
    check_crossfade_between_runs(seed, seed == 41, seed == 41, 5, 1024, 700, 1000,
                                 [](const FftConvolver& convolver) {
                                   ASSERT_TRUE(convolver.fused_kernel()) << convolver.description();
                                 });
  }
}

TEST(FftConvolver, FusedKernelIsTheDefaultForOnePartitionAndTheCallerTurnsItOff) {
  SKIP_WITHOUT_DEVICE();
  const FilterBank bank = random_bank(2, 2048, true, 3);
  {
    FftConvolver convolver(bank, 2048, 65536);
    EXPECT_TRUE(convolver.fused_kernel()) << convolver.description();
    EXPECT_EQ(convolver.partition_frames(), 2048u);
  }
  // As EngineOptions::cuda.fft_fused = false passes it.
  FftConvolver convolver(bank, 2048, 65536, 0, false, /*use_fused_kernel=*/false);
  EXPECT_FALSE(convolver.fused_kernel()) << convolver.description();
  // Longer filters than one partition holds keep the cuFFT passes.
  FftConvolver longer(random_bank(2, 40000, true, 4), 40000, 65536);
  EXPECT_FALSE(longer.fused_kernel()) << longer.description();
}

// Runs of whole segments through the multi-partition kernels
// (kernels/device/multi_partition_overlap_save.hpp): K = 2, 3, 8, 16 and 32 at
// partitions across the supported range, shared and per-channel filters, in
// one whole-signal call (the spectra before each MAC chunk from the same run),
// in calls of whole segments after a partial start (each run's first spectra
// from the delay line the cuFFT path filled) and in random calls (the delay
// line handed back and forth between the two paths).
TEST(FftConvolver, SegmentKernelsMatchFloat64ReferenceForTwoToThirtyTwoPartitions) {
  SKIP_WITHOUT_DEVICE();
  struct Case {
    std::size_t partitions, partition, channels;
  };
  for (const Case k : {Case{2, 16384, 2}, Case{3, 256, 9}, Case{8, 2048, 3}, Case{16, 1024, 4},
                       Case{32, 512, 2}}) {
    for (const bool shared : {true, false}) {
      const std::uint64_t seed =
          testing::announce("segment kernels", 7000 + k.partitions * 10 + (shared ? 1 : 0));
      const std::size_t P = k.partition, taps = k.partitions * P - P / 3;
      const std::size_t frames = std::max<std::size_t>(2 * k.partitions + 5, 20) * P + 123;
      SCOPED_TRACE("seed " + std::to_string(seed) + ": K " + std::to_string(k.partitions) +
                   ", partition " + std::to_string(P) + ", " + std::to_string(k.channels) + " ch" +
                   (shared ? ", shared" : ", per-channel"));
      const FilterBank bank = random_bank(k.channels, taps, shared, seed);
      const Signal x = random_planar(k.channels, frames, seed + 1);
      std::mt19937_64 rng(seed);
      for (const int pattern : {0, 1, 2}) {
        const std::size_t max_block = pattern == 0 ? frames : 5 * P + 17;
        std::vector<std::size_t> calls;
        if (pattern == 0) {
          calls = {frames};
        } else if (pattern == 1) {
          calls = {P / 2, P / 2 + 3 * P, P - 3, 3, 2 * P, 1, P - 1, 5 * P};
          std::size_t used = 0;
          for (const auto c : calls) used += c;
          for (const auto c : fixed_calls(frames - used, 4 * P)) calls.push_back(c);
        } else {
          calls = random_calls(frames, max_block, rng);
        }
        FftConvolver convolver(bank, taps, max_block, P);
        ASSERT_TRUE(convolver.segment_kernels()) << convolver.description();
        ASSERT_EQ(convolver.partitions(), k.partitions);
        if (pattern == 0) std::printf("%s\n", convolver.description().c_str());
        const Signal y = run_stream(convolver, x, calls, max_block);
        for (const float v : y.samples)
          ASSERT_TRUE(std::isfinite(v)) << "an output was not written";
        EXPECT_LE(error_against_reference(x, bank, y, 0, frames, seed, 2e8), kTolerance)
            << "call pattern " << pattern;
      }
    }
  }
}

// A partition count the MAC is not built for keeps the cuFFT passes, exactly.
TEST(FftConvolver, PartitionCountsWithoutAMacKernelFallBackToTheCufftPasses) {
  SKIP_WITHOUT_DEVICE();
  const std::uint64_t seed = testing::announce("fallback", 7300);
  const std::size_t P = 256, taps = 17 * P, frames = 40 * P + 99;
  const FilterBank bank = random_bank(3, taps, false, seed);
  FftConvolver convolver(bank, taps, frames, P);
  EXPECT_EQ(convolver.partitions(), 17u);
  EXPECT_FALSE(convolver.segment_kernels()) << convolver.description();
  EXPECT_NE(convolver.description().find("separate kernels"), std::string::npos)
      << convolver.description();
  const Signal x = random_planar(3, frames, seed + 1);
  const Signal y = run_stream(convolver, x, {frames}, frames);
  EXPECT_LE(error_against_reference(x, bank, y, 0, frames, seed, 2e8), kTolerance);
}

// Crossfades with K > 1: the fading call goes through the cuFFT passes (both
// filters), the whole-segment runs before and after it through the segment
// kernels, the delay line carried across.
TEST(FftConvolver, CrossfadeBetweenSegmentKernelRunsBlendsOldAndNewFilters) {
  SKIP_WITHOUT_DEVICE();
  check_swap(true, 3000, 256, testing::announce("swap", 7400), false, true);
  check_swap(false, 2000, 512, testing::announce("swap", 7401), false, true);
  for (const std::uint64_t seed : {7410u, 7411u}) {
    testing::announce("crossfade between runs", seed);
    check_crossfade_between_runs(
        seed, seed == 7410, seed == 7410, 4, 512, 1300, 2000, [](const FftConvolver& convolver) {
          ASSERT_TRUE(convolver.segment_kernels()) << convolver.description();
          ASSERT_EQ(convolver.partitions(), 4u);
        });
  }
}

TEST(FftConvolver, ResetForgetsTheHistoryOfSegmentKernelRuns) {
  SKIP_WITHOUT_DEVICE();
  const std::uint64_t seed = testing::announce("reset", 7500);
  const std::size_t P = 512, taps = 6 * P, max_block = 16 * P;
  const FilterBank bank = random_bank(3, taps, false, seed);
  FftConvolver convolver(bank, taps, max_block, P);
  ASSERT_TRUE(convolver.segment_kernels()) << convolver.description();
  const Signal first = random_planar(3, 12 * P + 77, seed + 1);
  run_stream(convolver, first, {5 * P, 7 * P, 77}, max_block);
  Stream stream;
  convolver.reset(stream.get());
  stream.synchronize();
  const Signal second = random_planar(3, 20 * P, seed + 2);
  const Signal y = run_stream(convolver, second, {16 * P, 4 * P}, max_block);
  EXPECT_LE(error_against_reference(second, bank, y, 0, second.frames, seed), kTolerance);
}

// 131072 taps with whole-signal blocks: 32 partitions of 4096 through the
// segment kernels (100000 taps: 13 of 8192, since 25 have no MAC kernel);
// an explicit partition (EngineOptions::cuda.fft_partition) picks another and
// use_fused_kernel = false (cuda.fft_fused) restores the cuFFT passes (4
// partitions of 32768).
TEST(FftConvolver, LongFiltersUseSegmentKernelsAndTheCallerChoosesThePartition) {
  SKIP_WITHOUT_DEVICE();
  const FilterBank bank = random_bank(2, 131072, true, 5);
  {
    FftConvolver convolver(bank, 131072, 1 << 20);
    EXPECT_TRUE(convolver.segment_kernels()) << convolver.description();
    EXPECT_EQ(convolver.partition_frames(), 4096u);
    EXPECT_EQ(convolver.partitions(), 32u);
    EXPECT_NE(convolver.description().find("sliding MAC"), std::string::npos);
  }
  {
    // 25 partitions of 4096 have no MAC kernel; 13 of 8192 do.
    FftConvolver convolver(random_bank(2, 100000, true, 6), 100000, 1 << 20);
    EXPECT_TRUE(convolver.segment_kernels()) << convolver.description();
    EXPECT_EQ(convolver.partition_frames(), 8192u);
  }
  {
    FftConvolver convolver(bank, 131072, 1 << 20, 16384);
    EXPECT_TRUE(convolver.segment_kernels()) << convolver.description();
    EXPECT_EQ(convolver.partition_frames(), 16384u);
    EXPECT_EQ(convolver.partitions(), 8u);
  }
  {
    FftConvolver convolver(bank, 131072, 1 << 20, 0, false, /*use_fused_kernel=*/false);
    EXPECT_FALSE(convolver.segment_kernels()) << convolver.description();
    EXPECT_EQ(convolver.partition_frames(), 32768u);
  }
  EXPECT_THROW(FftConvolver(bank, 131072, 1 << 20, 1000), std::invalid_argument);
}

TEST(FftConvolver, RejectsBadArgumentsWithClearErrors) {
  SKIP_WITHOUT_DEVICE();
  const FilterBank bank = random_bank(2, 100, true, 1);
  EXPECT_THROW(FftConvolver(bank, 50, 64), std::invalid_argument);
  EXPECT_THROW(FftConvolver(bank, 100, 0), std::invalid_argument);
  EXPECT_THROW(FftConvolver(bank, 100, 64, 48), std::invalid_argument);
  FftConvolver convolver(bank, 100, 64);
  EXPECT_THROW(convolver.set_filters(random_bank(3, 100, true, 2), false), std::invalid_argument);
  EXPECT_THROW(convolver.set_filters(random_bank(2, 101, true, 2), false), std::invalid_argument);
  DeviceBuffer<float> buffer(2 * 128);
  EXPECT_THROW(
      convolver.process(cuda::planar_block(buffer.get(), 64, buffer.get() + 128, 64, 0), nullptr),
      std::invalid_argument);
  EXPECT_THROW(
      convolver.process(cuda::planar_block(buffer.get(), 65, buffer.get() + 128, 65, 65), nullptr),
      std::invalid_argument);
  cuda::DeviceBlock interleaved = cuda::planar_block(buffer.get(), 64, buffer.get() + 128, 64, 64);
  interleaved.in = {buffer.get(), 1, 2};
  EXPECT_THROW(convolver.process(interleaved, nullptr), std::invalid_argument);
}

// Offline throughput of the benchmark's shapes: 8 channels x 2^22 frames,
// device-resident input and output, timed with CUDA events (median of passes).
TEST(FftConvolver, DISABLED_PrintsThroughputOfBenchmarkShapes) {
  SKIP_WITHOUT_DEVICE();
  struct TimingShape {
    std::size_t taps, block, partition;
  };
  std::vector<TimingShape> shapes = {
      {2048, 65536, 0},        {2048, 1 << 22, 0},       {2048, 1 << 22, 4096},
      {16384, 65536, 0},       {16384, 65536, 8192},     {16384, 1 << 22, 0},
      {16384, 1 << 22, 8192},  {131072, 65536, 0},       {131072, 65536, 32768},
      {131072, 1 << 22, 0},    {131072, 1 << 22, 16384}, {131072, 1 << 22, 32768},
      {2048, 1 << 22, 2048},   {2048, 1 << 22, 8192},    {16384, 1 << 22, 16384},
      {4096, 1 << 22, 0},      {8192, 1 << 22, 0},       {1024, 1 << 22, 0},
      {131072, 1 << 22, 4096}, {131072, 1 << 22, 8192},  {65536, 1 << 22, 0},
      {65536, 1 << 22, 4096},  {65536, 1 << 22, 8192},   {65536, 1 << 22, 16384},
  };
  int passes = 5;
  if (const char* only = std::getenv("TAPSTREAM_FFT_TIMING_ONLY")) {
    TimingShape s{};
    if (std::sscanf(only, "%zu:%zu:%zu", &s.taps, &s.block, &s.partition) == 3) {
      shapes = {s};
      passes = 1;
    }
  }
  const std::size_t channels = 8, frames = std::size_t(1) << 22;
  const Signal x = random_planar(channels, frames, 4242);
  DeviceBuffer<float> in(channels * frames), out(channels * frames);
  TAPSTREAM_CUDA_CHECK(cudaMemcpy(in.get(), x.samples.data(), in.bytes(), cudaMemcpyHostToDevice));
  Stream stream;
  cuda::Event start(true), stop(true);
  // path: 0 separate kernels, 2 fused overlap-save kernel (the cuFFT callbacks,
  // measured slower before, are left out; TAPSTREAM_FFT_TIMING_CALLBACKS=1 adds them).
  std::vector<Path> paths = {Path::kFusedKernel, Path::kSeparateKernels};
  if (std::getenv("TAPSTREAM_FFT_TIMING_CALLBACKS")) paths.push_back(Path::kCufftCallbacks);
  std::printf("%8s %8s %9s %6s %6s %10s %12s %9s %9s\n", "taps", "block", "partition", "parts",
              "path", "ms", "Msamples/s", "rel.err", "setup_s");
  for (const auto& s : shapes)
    for (const Path path : paths) {
      const FilterBank bank = random_bank(channels, s.taps, true, s.taps);
      const auto setup_start = std::chrono::steady_clock::now();
      const auto made = make_convolver(bank, s.taps, s.block, s.partition, path);
      FftConvolver& convolver = *made;
      const double setup_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - setup_start).count();
      // Where neither fused path applies, the shape would repeat the old path.
      if (path == Path::kFusedKernel && !convolver.fused_kernel() && !convolver.segment_kernels())
        continue;
      auto pass = [&] {
        for (std::size_t at = 0; at < frames; at += s.block) {
          convolver.process(cuda::planar_block(in.get() + at, frames, out.get() + at, frames,
                                               std::min(s.block, frames - at)),
                            stream.get());
        }
      };
      pass();  // warm-up (and module load)
      std::vector<float> ms;
      for (int p = 0; p < passes; ++p) {
        convolver.reset(stream.get());
        start.record(stream.get());
        pass();
        stop.record(stream.get());
        stop.synchronize();
        float elapsed = 0;
        TAPSTREAM_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start.get(), stop.get()));
        ms.push_back(elapsed);
      }
      std::sort(ms.begin(), ms.end());
      const float median = ms[ms.size() / 2];
      Signal y{channels, frames, std::vector<float>(channels * frames)};
      TAPSTREAM_CUDA_CHECK(
          cudaMemcpy(y.samples.data(), out.get(), out.bytes(), cudaMemcpyDeviceToHost));
      const double error = error_against_reference(x, bank, y, 0, frames, 99, 2e8);
      std::printf("%8zu %8zu %9zu %6zu %6s %10.3f %12.1f %9.2e %9.2f\n", s.taps, s.block,
                  convolver.partition_frames(), convolver.partitions(),
                  convolver.fused_kernel()      ? "kernel"
                  : convolver.segment_kernels() ? "kernK"
                  : convolver.fused()           ? "cb"
                                                : "sep",
                  median, double(channels * frames) / (median * 1e3), error, setup_s);
      std::fflush(stdout);
      EXPECT_LE(error, kTolerance);
    }
}

}  // namespace
}  // namespace tapstream

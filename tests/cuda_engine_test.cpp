// Exactness and streaming behaviour of the CUDA engine: every kernel variant
// against a float64 reference of the whole-signal convolution and against the
// CPU engine; block-size invariance; filter swaps with crossfade at a block
// boundary; constant-memory overflow; errors. Tests that need a GPU skip (with
// the reason) where there is none.
//
// References are O(N M) on the CPU, so sizes are chosen per case: dense random
// filters keep channels x frames x taps near 3e8; the longest filters (131072
// taps) use sparse taps (a few non-zero taps spread over the whole length, the
// last one included), whose float64 reference is cheap while the GPU still runs
// every tap, and are also compared with the CPU engine on dense taps.
//
// DISABLED_LatencyAndThroughputProbe prints streaming latency and offline
// throughput (run with --gtest_also_run_disabled_tests on the GPU machine).

#include "kernels/cuda_engine.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsp/cpu/cpu_engine.hpp"
#include "kernels/cuda_resources.hpp"
#include "tests/cuda_test_support.hpp"
#include "tests/reference.hpp"

namespace tapstream {
namespace {

using testing::announce;
using testing::random_block_sizes;
using testing::random_signal;
using testing::random_signals;
using testing::relative_error;
using testing::run_block;
using testing::Signals;
using testing::sparse_reference_convolution;

constexpr double kTolerance = 1e-5;

std::vector<float> sparse_taps(std::size_t taps, std::uint64_t seed) {
  std::vector<float> h(taps, 0.0f);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> pos(0, taps - 1);
  std::uniform_real_distribution<float> val(-1.0f, 1.0f);
  for (int i = 0; i < 12; ++i) h[pos(rng)] = val(rng);
  h[0] = val(rng);
  h[taps - 1] = val(rng);
  return h;
}

// A shared filter of `taps` taps, or per-channel filters of 1..taps taps (one of
// exactly `taps`).
FilterBank bank_for(std::size_t channels, std::size_t taps, bool shared, bool sparse,
                    std::uint64_t seed) {
  auto make = [&](std::size_t n, std::uint64_t s) {
    return sparse ? sparse_taps(n, s) : random_signal(n, s);
  };
  if (shared) return FilterBank::shared(make(taps, seed), channels);
  std::mt19937_64 rng(seed);
  std::vector<std::vector<float>> filters;
  for (std::size_t c = 0; c < channels; ++c) {
    const std::size_t n =
        c == channels / 2 ? taps : std::uniform_int_distribution<std::size_t>(1, taps)(rng);
    filters.push_back(make(n, seed + 7 * c + 1));
  }
  return FilterBank::per_channel(std::move(filters));
}

Signals run(Engine& engine, const Signals& in, const std::vector<std::size_t>& sizes,
            Layout layout) {
  Signals out(in.size(), std::vector<float>(in[0].size()));
  std::vector<float> a, b;
  std::size_t start = 0;
  for (const std::size_t frames : sizes) {
    run_block(engine, in, out, start, frames, layout, a, b);
    start += frames;
  }
  return out;
}

const char* layout_name(Layout layout) {
  return layout == Layout::planar ? "planar" : "interleaved";
}

class CudaEngineTest : public testing::CudaDeviceTest {};

struct StreamCase {
  std::size_t channels, taps, frames, max_block;
  bool shared, sparse;
  std::uint64_t seed;
  std::string describe() const {
    return std::to_string(channels) + " ch, " + std::to_string(taps) + " taps (" +
           (shared ? "shared" : "per-channel") + (sparse ? ", sparse" : "") + "), " +
           std::to_string(frames) + " frames in blocks of 1.." + std::to_string(max_block);
  }
};

// Runs `c` through every listed variant (alternating layouts) and checks each
// channel against the float64 reference and the CPU engine.
void check_stream(const StreamCase& c, const std::vector<std::string>& variants,
                  Algorithm algorithm = Algorithm::direct) {
  announce(c.describe(), c.seed);
  const FilterBank bank = bank_for(c.channels, c.taps, c.shared, c.sparse, c.seed + 1);
  const Signals x = random_signals(c.channels, c.frames, c.seed + 2);
  std::vector<std::vector<double>> want;
  for (std::size_t ch = 0; ch < c.channels; ++ch)
    want.push_back(sparse_reference_convolution(x[ch], bank.taps(ch)));
  // The CPU engine on the same stream, in other blocks: the two engines agree.
  EngineOptions cpu_options;
  cpu_options.max_block_frames = c.max_block;
  const Signals cpu = run(*make_cpu_engine(bank, cpu_options), x,
                          random_block_sizes(c.frames, c.max_block, c.seed + 99), Layout::planar);
  for (std::size_t v = 0; v < variants.size(); ++v) {
    EngineOptions options;
    options.max_block_frames = c.max_block;
    options.kernel = variants[v];
    options.algorithm = algorithm;
    const Layout layout = (v + c.seed) % 2 ? Layout::planar : Layout::interleaved;
    auto engine = make_cuda_device_engine(bank, options);
    const Signals y =
        run(*engine, x, random_block_sizes(c.frames, c.max_block, c.seed + 3 + v), layout);
    for (std::size_t ch = 0; ch < c.channels; ++ch) {
      const double err = relative_error(y[ch], want[ch]);
      ASSERT_LE(err, kTolerance) << c.describe() << ", kernel " << variants[v] << ", "
                                 << layout_name(layout) << ", channel " << ch << " ("
                                 << engine->description() << ")";
      ASSERT_LE(relative_error(y[ch], cpu[ch]), kTolerance)
          << c.describe() << ", kernel " << variants[v] << " vs the CPU engine, channel " << ch;
    }
  }
}

const std::vector<std::string> kVariants = {"naive", "constant", "shared_tile", "cached_tile",
                                            "tuned"};

TEST(CudaEngineOptions, ListsItsVariantsAndRejectsUnknownOnes) {
  const auto names = cuda_kernel_variants();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "auto");
  for (const auto& v : kVariants)
    EXPECT_NE(std::find(names.begin(), names.end(), v), names.end()) << v;
  EngineOptions options;
  options.kernel = "fastest";
  try {
    make_cuda_device_engine(FilterBank::shared({1.0f}, 1), options);
    FAIL() << "an unknown kernel name was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fastest"), std::string::npos) << e.what();
  }
}

TEST(CudaEngineOptions, DeviceQueryNeverThrows) {
  std::string reason;
  const bool available = cuda_device_available(&reason);
  std::printf("cuda_device_available: %s %s\n", available ? "yes" : "no", reason.c_str());
  EXPECT_TRUE(available || !reason.empty());
}

TEST_F(CudaEngineTest, EveryVariantMatchesTheFloat64ReferenceOnRandomStreams) {
  const std::uint64_t seed = announce("random stream cases", 20261122);
  std::mt19937_64 rng(seed);
  const std::size_t channel_choices[] = {1, 2, 3, 5, 8, 13, 32, 64};
  const std::size_t block_choices[] = {1, 7, 64, 256, 1000, 4096, 16384, 65536};
  for (int i = 0; i < 10; ++i) {
    StreamCase c;
    c.channels = channel_choices[rng() % 8];
    c.taps = std::size_t(std::lround(
        std::exp(std::uniform_real_distribution<double>(0.0, std::log(131072.0))(rng))));
    c.taps = std::clamp<std::size_t>(c.taps, 1, 131072);
    c.max_block = block_choices[rng() % 8];
    // ~3e8 reference multiply-adds, at most ~200 calls per stream.
    c.frames = std::size_t(3e8 / double(c.channels * c.taps));
    c.frames =
        std::min({c.frames, std::size_t(150000), 200 * std::max<std::size_t>(1, c.max_block / 2)});
    c.frames = std::max<std::size_t>(c.frames, 50);
    c.shared = rng() % 2;
    c.sparse = false;
    c.seed = seed + 100 * i;
    check_stream(c, kVariants);
  }
  // Large blocks of many channels (the chunked, pipelined copy path) and single
  // frames (the zero-copy path), both layouts through the variant alternation.
  check_stream({64, 17, 140000, 65536, false, false, seed + 5000}, kVariants);
  check_stream({2, 300, 1500, 1, true, false, seed + 5001}, kVariants);
}

TEST_F(CudaEngineTest, LargeBlocksOfManyChannelsMatchTheReference) {
  // Enough outputs for one thread group per block in the tuned kernel: constant
  // taps (shared filter) and taps staged from global memory (per-channel),
  // planar (float4 stores) and interleaved output.
  const std::uint64_t seed = announce("large blocks", 61);
  check_stream({64, 40, 70000, 65536, true, false, seed}, {"tuned"});
  check_stream({16, 300, 70000, 65536, false, false, seed + 1}, {"tuned"});
  check_stream({16, 300, 70000, 65536, false, false, seed + 2}, {"tuned"});
}

TEST_F(CudaEngineTest, LongFiltersMatchTheReference) {
  const std::uint64_t seed = announce("long filters", 7);
  // Sparse 131072-tap and odd-length filters over more than their length.
  check_stream({1, 131072, 131072 + 9000, 16384, true, true, seed}, {"tuned", "shared_tile"});
  check_stream({3, 65537, 70000, 8192, false, true, seed + 1}, {"tuned"});
}

TEST_F(CudaEngineTest, DenseLongFiltersMatchTheCpuEngine) {
  const std::uint64_t seed = announce("dense long filter vs CPU engine", 11);
  const FilterBank bank = bank_for(2, 131072, false, false, seed);
  const Signals x = random_signals(2, 140000, seed + 1);
  const auto sizes = random_block_sizes(x[0].size(), 8192, seed + 2);
  EngineOptions options;
  options.max_block_frames = 8192;
  auto cpu = make_cpu_engine(bank, options);
  const Signals want = run(*cpu, x, sizes, Layout::planar);
  for (Algorithm algorithm : {Algorithm::direct, Algorithm::automatic}) {
    options.algorithm = algorithm;
    auto gpu = make_cuda_device_engine(bank, options);
    const Signals got = run(*gpu, x, sizes, Layout::interleaved);
    for (std::size_t ch = 0; ch < 2; ++ch)
      EXPECT_LE(relative_error(got[ch], want[ch]), kTolerance)
          << "channel " << ch << ": " << gpu->description();
  }
}

TEST_F(CudaEngineTest, OutputDoesNotDependOnBlockSize) {
  const std::uint64_t seed = announce("block size invariance", 99);
  const FilterBank bank = bank_for(5, 3000, false, false, seed);
  const Signals x = random_signals(5, 60000, seed + 1);
  EngineOptions options;
  options.max_block_frames = 20000;
  auto engine = make_cuda_device_engine(bank, options);
  const Signals a = run(*engine, x, std::vector<std::size_t>(60, 1000), Layout::planar);
  engine->reset();
  const Signals b =
      run(*engine, x, random_block_sizes(60000, 20000, seed + 2), Layout::interleaved);
  engine->reset();
  const Signals d = run(*engine, x, {200, 20000, 20000, 19800}, Layout::planar);
  for (std::size_t ch = 0; ch < 5; ++ch) {
    EXPECT_LE(relative_error(b[ch], a[ch]), kTolerance) << "channel " << ch;
    EXPECT_LE(relative_error(d[ch], a[ch]), kTolerance) << "channel " << ch;
  }
}

TEST_F(CudaEngineTest, ProcessDeviceMatchesProcess) {
  const std::uint64_t seed = announce("device-resident processing", 5);
  const std::size_t channels = 4, frames = 50000, block = 7000;
  const FilterBank bank = bank_for(channels, 2500, true, false, seed);
  const Signals x = random_signals(channels, frames, seed + 1);
  EngineOptions options;
  options.max_block_frames = block;
  auto host_engine = make_cuda_device_engine(bank, options);
  const auto sizes = random_block_sizes(frames, block, seed + 2);
  const Signals want = run(*host_engine, x, sizes, Layout::planar);

  auto engine = make_cuda_device_engine(bank, options);
  std::vector<float> planar(channels * frames), out(channels * frames, 0.0f);
  for (std::size_t c = 0; c < channels; ++c)
    std::copy(x[c].begin(), x[c].end(), planar.begin() + c * frames);
  cuda::DeviceBuffer<float> d_in(planar.size()), d_out(planar.size());
  ASSERT_EQ(cudaMemcpy(d_in.get(), planar.data(), d_in.bytes(), cudaMemcpyHostToDevice),
            cudaSuccess);
  std::size_t start = 0;
  for (std::size_t n : sizes) {
    engine->process_device(d_in.get() + start, d_out.get() + start, n, frames);
    start += n;
  }
  engine->synchronize();
  ASSERT_EQ(cudaMemcpy(out.data(), d_out.get(), d_out.bytes(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (std::size_t c = 0; c < channels; ++c)
    EXPECT_LE(relative_error(std::span<const float>(out).subspan(c * frames, frames), want[c]),
              1e-6)
        << "channel " << c;
}

// process_device_after(): the caller's input is written on the caller's own
// stream just before each call (after a long copy that keeps that stream busy),
// so an engine that read it before the caller's work was done would filter
// stale samples. Small calls of the engine's block (staged, one graph each on
// the partitioned path) and calls of any size (unstaged) both match process().
TEST_F(CudaEngineTest, DeviceCallsAfterTheCallersStreamMatchProcess) {
  const std::uint64_t seed = announce("device calls after the caller's stream", 77);
  struct Case {
    const char* kernel;
    std::size_t max_block;
    bool random_sizes;
  };
  for (const Case& k :
       {Case{"partitioned", 64, false}, Case{"auto", 64, false}, Case{"auto", 1500, true}}) {
    const std::size_t channels = 8, frames = 12000;
    const FilterBank bank = bank_for(channels, 9000, false, false, seed);
    const Signals x = random_signals(channels, frames, seed + 1);
    EngineOptions options;
    options.max_block_frames = k.max_block;
    options.kernel = k.kernel;
    const auto sizes = k.random_sizes ? random_block_sizes(frames, k.max_block, seed + 2)
                                      : std::vector<std::size_t>(frames / k.max_block, k.max_block);
    auto host_engine = make_cuda_device_engine(bank, options);
    const Signals want = run(*host_engine, x, sizes, Layout::planar);

    auto engine = make_cuda_device_engine(bank, options);
    cuda::Stream caller;
    cuda::PinnedBuffer<float> planar(channels * frames);
    for (std::size_t c = 0; c < channels; ++c)
      std::copy(x[c].begin(), x[c].end(), planar.get() + c * frames);
    cuda::DeviceBuffer<float> d_in(channels * frames), d_out(channels * frames);
    cuda::DeviceBuffer<char> busy_from(std::size_t(64) << 20), busy_to(std::size_t(64) << 20);
    ASSERT_EQ(cudaMemset(d_in.get(), 0, d_in.bytes()), cudaSuccess);
    std::size_t start = 0;
    for (const std::size_t n : sizes) {
      ASSERT_EQ(cudaMemcpyAsync(busy_to.get(), busy_from.get(), busy_from.bytes(),
                                cudaMemcpyDeviceToDevice, caller.get()),
                cudaSuccess);
      ASSERT_EQ(cudaMemcpy2DAsync(d_in.get() + start, frames * sizeof(float), planar.get() + start,
                                  frames * sizeof(float), n * sizeof(float), channels,
                                  cudaMemcpyHostToDevice, caller.get()),
                cudaSuccess);
      engine->process_device_after(d_in.get() + start, d_out.get() + start, n, frames,
                                   caller.get());
      start += n;
    }
    std::vector<float> out(channels * frames);
    ASSERT_EQ(cudaMemcpy(out.data(), d_out.get(), d_out.bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    for (std::size_t c = 0; c < channels; ++c)
      EXPECT_LE(relative_error(std::span<const float>(out).subspan(c * frames, start),
                               std::span<const float>(want[c]).first(start)),
                1e-6)
          << k.kernel << ", max_block " << k.max_block << ", channel " << c << ": "
          << engine->description();
  }
}

// Short filters over device blocks of a million frames take the streaming
// tile kernel (cp.async double buffering, tiles walked by a grid sized to the
// device): constant taps (shared filter) and, with 160 channels, taps in
// global memory; a first call of 4 frames leaves history for the next, whose
// windows reach into it, and the last call's length is not a multiple of 4.
TEST_F(CudaEngineTest, ShortFiltersOverMillionFrameDeviceBlocksMatchTheReference) {
  const std::uint64_t seed = announce("short filters, long device blocks", 404);
  struct Case {
    std::size_t channels, taps, frames;
    bool shared;
    std::vector<std::size_t> calls;  // starts stay multiples of 4 (aligned quads)
  };
  for (const Case& k : {Case{8, 32, 1000001, true, {4, 600000, 399997}},
                        Case{8, 64, 1000001, false, {4, 600000, 399997}},
                        Case{160, 64, 20004, false, {8, 19996}}}) {
    const FilterBank bank = bank_for(k.channels, k.taps, k.shared, false, seed + k.taps);
    const Signals x = random_signals(k.channels, k.frames, seed + k.channels);
    const std::size_t stride = (k.frames + 3) / 4 * 4;
    std::vector<float> planar(k.channels * stride, 0.0f), out(planar.size(), 0.0f);
    for (std::size_t c = 0; c < k.channels; ++c)
      std::copy(x[c].begin(), x[c].end(), planar.begin() + c * stride);
    cuda::DeviceBuffer<float> d_in(planar.size()), d_out(planar.size());
    ASSERT_EQ(cudaMemcpy(d_in.get(), planar.data(), d_in.bytes(), cudaMemcpyHostToDevice),
              cudaSuccess);
    EngineOptions options;
    options.max_block_frames = k.frames;
    options.algorithm = Algorithm::direct;
    auto engine = make_cuda_device_engine(bank, options);
    std::size_t start = 0;
    for (const std::size_t n : k.calls) {
      engine->process_device(d_in.get() + start, d_out.get() + start, n, stride);
      start += n;
    }
    ASSERT_EQ(start, k.frames);
    engine->synchronize();
    ASSERT_EQ(cudaMemcpy(out.data(), d_out.get(), d_out.bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    for (std::size_t c = 0; c < k.channels; ++c) {
      const auto want = sparse_reference_convolution(x[c], bank.taps(c));
      ASSERT_LE(relative_error(std::span<const float>(out).subspan(c * stride, k.frames), want),
                kTolerance)
          << k.channels << " ch x " << k.taps << " taps, channel " << c << ": "
          << engine->description();
    }
  }
}

// Large blocks from and to the caller's own page-locked memory are copied
// straight from and to it; the output must equal the pageable path's.
TEST_F(CudaEngineTest, CallersPageLockedBuffersGiveTheSameOutputAsPageableOnes) {
  const std::uint64_t seed = announce("caller's page-locked buffers", 6);
  const std::size_t channels = 6, frames = 300000, block = 131072;
  const FilterBank bank = bank_for(channels, 700, false, false, seed);
  const Signals x = random_signals(channels, frames, seed + 1);
  EngineOptions options;
  options.max_block_frames = block;
  const auto sizes = random_block_sizes(frames, block, seed + 2);
  for (const Layout layout : {Layout::planar, Layout::interleaved}) {
    auto pageable_engine = make_cuda_engine(bank, options);
    const Signals want = run(*pageable_engine, x, sizes, layout);

    auto engine = make_cuda_engine(bank, options);
    cuda::PinnedBuffer<float> in(channels * block), out(channels * block);
    Signals got(channels, std::vector<float>(frames));
    std::size_t start = 0;
    for (const std::size_t n : sizes) {
      for (std::size_t c = 0; c < channels; ++c)
        for (std::size_t f = 0; f < n; ++f)
          (layout == Layout::planar ? in.get()[c * n + f] : in.get()[f * channels + c]) =
              x[c][start + f];
      std::fill(out.get(), out.get() + channels * n, std::nanf(""));
      engine->process({in.get(), channels * n}, {out.get(), channels * n}, n, layout);
      for (std::size_t c = 0; c < channels; ++c)
        for (std::size_t f = 0; f < n; ++f)
          got[c][start + f] =
              layout == Layout::planar ? out.get()[c * n + f] : out.get()[f * channels + c];
      start += n;
    }
    for (std::size_t c = 0; c < channels; ++c)
      EXPECT_LE(relative_error(got[c], want[c]), 1e-6) << layout_name(layout) << " channel " << c;
  }
}

struct SwapCase {
  std::size_t channels, old_taps, new_taps;
  bool new_shared, crossfade;
  std::string kernel;
  std::size_t swap_block;  // frames of the block after the swap
  std::uint64_t seed;
  std::string describe() const {
    return std::to_string(channels) + " ch, " + std::to_string(old_taps) + " -> " +
           std::to_string(new_taps) + (new_shared ? " shared" : " per-channel") + " taps, " +
           (crossfade ? "crossfade" : "hard swap") + ", kernel " + kernel + ", swap block " +
           std::to_string(swap_block);
  }
};

// Blocks of 300 frames with the old bank, set_filters, one block of swap_block
// frames (the crossfade block), then blocks of 300 with the new bank.
void check_swap(const SwapCase& c, bool twice = false) {
  announce(c.describe() + (twice ? ", replaced before use" : ""), c.seed);
  const FilterBank old_bank = bank_for(c.channels, c.old_taps, true, false, c.seed + 1);
  const FilterBank new_bank = bank_for(c.channels, c.new_taps, c.new_shared, false, c.seed + 2);
  const std::size_t before = 5 * 300, frames = before + c.swap_block + 3 * 300;
  const Signals x = random_signals(c.channels, frames, c.seed + 3);
  EngineOptions options;
  options.max_block_frames = std::max<std::size_t>(c.swap_block, 300);
  options.max_taps = std::max(c.old_taps, c.new_taps);
  options.kernel = c.kernel;
  options.algorithm = Algorithm::direct;
  auto engine = make_cuda_device_engine(old_bank, options);
  Signals y(c.channels, std::vector<float>(frames));
  std::vector<float> a, b;
  std::size_t start = 0;
  for (int i = 0; i < 5; ++i, start += 300)
    run_block(*engine, x, y, start, 300, Layout::interleaved, a, b);
  if (twice) engine->set_filters(bank_for(c.channels, c.old_taps, true, false, c.seed + 9), true);
  engine->set_filters(new_bank, c.crossfade);
  const std::string during = engine->description();
  run_block(*engine, x, y, start, c.swap_block, Layout::planar, a, b);
  start += c.swap_block;
  for (int i = 0; i < 3; ++i, start += 300)
    run_block(*engine, x, y, start, 300, Layout::interleaved, a, b);

  for (std::size_t ch = 0; ch < c.channels; ++ch) {
    const auto old_y = sparse_reference_convolution(x[ch], old_bank.taps(ch));
    const auto new_y = sparse_reference_convolution(x[ch], new_bank.taps(ch));
    std::vector<double> want(frames);
    for (std::size_t f = 0; f < frames; ++f) {
      if (f < before) {
        want[f] = old_y[f];
      } else if (f < before + c.swap_block && c.crossfade) {
        const double w = double(f - before + 1) / double(c.swap_block);
        want[f] = old_y[f] + w * (new_y[f] - old_y[f]);
      } else {
        want[f] = new_y[f];
      }
    }
    EXPECT_LE(relative_error(y[ch], want), kTolerance)
        << c.describe() << ", channel " << ch << " (" << during << ")";
  }
}

TEST_F(CudaEngineTest, SetFiltersSwapsAtTheBlockBoundaryWithCrossfade) {
  // Constant-memory banks on both sides, small blocks (zero-copy path).
  check_swap({3, 100, 300, false, true, "tuned", 1000, 31});
  check_swap({3, 100, 300, false, false, "tuned", 1000, 32});
  check_swap({3, 100, 300, false, true, "naive", 1000, 33});
  check_swap({3, 100, 300, false, true, "cached_tile", 777, 34});
  // Old bank in constant memory, new one in global memory (2 x 5000 taps do not
  // fit a constant bank), a crossfade block cut into pipelined chunks.
  check_swap({2, 2000, 5000, false, true, "tuned", 40000, 35});
  check_swap({2, 2000, 5000, false, true, "shared_tile", 40000, 36});
  check_swap({2, 2000, 5000, false, false, "constant", 40000, 37});
}

TEST_F(CudaEngineTest, ASwapReplacedBeforeAnyBlockFadesFromTheFiltersInUse) {
  check_swap({2, 200, 200, true, true, "tuned", 512, 41}, /*twice=*/true);
}

TEST_F(CudaEngineTest, SetFiltersRejectsBadBanksAndKeepsFiltering) {
  const std::uint64_t seed = announce("bad banks", 3);
  const FilterBank bank = bank_for(2, 100, true, false, seed);
  EngineOptions options;
  options.max_block_frames = 256;
  auto engine = make_cuda_device_engine(bank, options);
  const Signals x = random_signals(2, 2048, seed + 1);
  Signals y(2, std::vector<float>(2048));
  std::vector<float> a, b;
  run_block(*engine, x, y, 0, 256, Layout::planar, a, b);
  EXPECT_THROW(engine->set_filters(FilterBank::shared(random_signal(101, seed), 2), true),
               std::invalid_argument);
  EXPECT_THROW(engine->set_filters(FilterBank::shared(random_signal(10, seed), 3), false),
               std::invalid_argument);
  for (std::size_t start = 256; start < 2048; start += 256)
    run_block(*engine, x, y, start, 256, Layout::planar, a, b);
  for (std::size_t ch = 0; ch < 2; ++ch)
    EXPECT_LE(relative_error(y[ch], sparse_reference_convolution(x[ch], bank.taps(ch))),
              kTolerance);
}

TEST_F(CudaEngineTest, TapsThatDoNotFitConstantMemoryGoToGlobalMemoryOrFft) {
  const std::uint64_t seed = announce("constant memory overflow", 13);
  EngineOptions options;
  options.max_block_frames = 1024;
  options.algorithm = Algorithm::direct;
  {
    const FilterBank shared = bank_for(64, 8192, true, false, seed);
    auto engine = make_cuda_device_engine(shared, options);
    EXPECT_EQ(engine->taps_memory(), "constant") << engine->description();
  }
  // 4 channels x 4096 taps: global; then a shared bank of 4096 taps: constant.
  const FilterBank per_channel = bank_for(4, 4096, false, false, seed + 1);
  const FilterBank shared = bank_for(4, 4096, true, false, seed + 2);
  auto engine = make_cuda_device_engine(per_channel, options);
  EXPECT_EQ(engine->taps_memory(), "global");
  EXPECT_NE(engine->description().find("global"), std::string::npos) << engine->description();
  const Signals x = random_signals(4, 6000, seed + 3);
  Signals y(4, std::vector<float>(6000));
  std::vector<float> a, b;
  for (std::size_t start = 0; start < 3000; start += 1000)
    run_block(*engine, x, y, start, 1000, Layout::planar, a, b);
  engine->set_filters(shared, false);
  EXPECT_EQ(engine->taps_memory(), "constant") << engine->description();
  for (std::size_t start = 3000; start < 6000; start += 1000)
    run_block(*engine, x, y, start, 1000, Layout::planar, a, b);
  for (std::size_t ch = 0; ch < 4; ++ch) {
    const auto before = sparse_reference_convolution(x[ch], per_channel.taps(ch));
    const auto after = sparse_reference_convolution(x[ch], shared.taps(ch));
    std::vector<double> want(before.begin(), before.begin() + 3000);
    want.insert(want.end(), after.begin() + 3000, after.end());
    EXPECT_LE(relative_error(y[ch], want), kTolerance) << "channel " << ch;
  }
  // Automatic: 8 channels x 131072 per-channel taps cannot be constant.
  options.algorithm = Algorithm::automatic;
  options.max_block_frames = 4096;
  auto automatic = make_cuda_device_engine(bank_for(8, 131072, false, true, seed + 4), options);
  std::printf("automatic choice: %s\n", automatic->description().c_str());
  if (automatic->algorithm() == Algorithm::fft) {
    EXPECT_EQ(automatic->taps_memory(), "fft");
    EXPECT_NE(automatic->description().find("FFT"), std::string::npos);
  } else {
    EXPECT_EQ(automatic->taps_memory(), "global");
  }
}

TEST_F(CudaEngineTest, FftPathMatchesTheReference) {
  const std::uint64_t seed = announce("FFT path", 17);
  const StreamCase c{4, 5000, 30000, 4096, false, false, seed};
  try {
    check_stream(c, {"auto"}, Algorithm::fft);
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).find("not implemented") != std::string::npos)
      GTEST_SKIP() << "FFT convolver not implemented yet: " << e.what();
    throw;
  }
}

TEST_F(CudaEngineTest, ResetStartsTheStreamAgain) {
  const std::uint64_t seed = announce("reset", 19);
  const FilterBank bank = bank_for(3, 700, false, false, seed);
  const Signals x = random_signals(3, 5000, seed + 1);
  const auto sizes = random_block_sizes(5000, 900, seed + 2);
  EngineOptions options;
  options.max_block_frames = 900;
  auto engine = make_cuda_device_engine(bank, options);
  const Signals first = run(*engine, x, sizes, Layout::planar);
  engine->reset();
  const Signals second = run(*engine, x, sizes, Layout::planar);
  for (std::size_t ch = 0; ch < 3; ++ch) EXPECT_LE(relative_error(second[ch], first[ch]), 1e-7);
}

TEST_F(CudaEngineTest, ProcessRejectsBadBlocks) {
  EngineOptions options;
  options.max_block_frames = 64;
  auto engine = make_cuda_device_engine(FilterBank::shared(random_signal(10, 1), 2), options);
  std::vector<float> in(256), out(256);
  EXPECT_THROW(engine->process(in, out, 0, Layout::planar), std::invalid_argument);
  EXPECT_THROW(engine->process(in, out, 65, Layout::planar), std::invalid_argument);
  EXPECT_THROW(engine->process(std::span<const float>(in).first(10), out, 64, Layout::planar),
               std::invalid_argument);
  options.streams = 0;
  EXPECT_THROW(make_cuda_device_engine(FilterBank::shared({1.0f}, 1), options),
               std::invalid_argument);
}

TEST_F(CudaEngineTest, OutOfMemoryIsAnErrorNamingTheCall) {
  EngineOptions options;
  options.algorithm = Algorithm::direct;
  options.max_block_frames = 64;
  options.max_taps = std::size_t(1) << 29;  // 64 channels x 2^29 floats of history: 128 GiB
  try {
    make_cuda_device_engine(FilterBank::shared({1.0f}, 64), options);
    FAIL() << "a 128 GiB history was allocated";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaMalloc"), std::string::npos) << what;
    EXPECT_NE(what.find("memory"), std::string::npos) << what;
  }
  // The device still works afterwards.
  auto engine = make_cuda_device_engine(FilterBank::shared({2.0f}, 1), EngineOptions{});
  std::vector<float> in{1.0f, 2.0f}, out(2);
  engine->process(in, out, 2, Layout::planar);
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], 4.0f);
}

// ---- Measurements (not a test): run on the GPU machine with
// --gtest_also_run_disabled_tests --gtest_filter=*Probe*.

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, std::size_t(p * double(v.size())))];
}

TEST_F(CudaEngineTest, DISABLED_LatencyAndThroughputProbe) {
  struct Latency {
    std::size_t channels, frames, taps;
    const char* kernel = "auto";
  };
  std::printf("\nstreaming round trip per block (engine pinned staging, interleaved), us\n");
  std::printf("%-16s %-10s %8s %8s %8s\n", "config", "path", "p50", "p99", "max");
  for (std::size_t zero_copy : {32768, 0}) {
    // The last three: long filters at small blocks, the partitioned path.
    for (const Latency l :
         {Latency{2, 256, 2048}, Latency{8, 256, 2048}, Latency{2, 64, 512},
          Latency{32, 1024, 4096}, Latency{2, 256, 1}, Latency{8, 64, 65536, "partitioned"},
          Latency{64, 64, 65536, "partitioned"}, Latency{8, 256, 262144, "partitioned"}}) {
      EngineOptions options;
      options.max_block_frames = l.frames;
      options.kernel = l.kernel;
      options.cuda.zero_copy_samples = zero_copy;
      auto engine = make_cuda_device_engine(
          FilterBank::shared(random_signal(l.taps, 1), l.channels), options);
      auto in = engine->pinned_input().first(l.channels * l.frames);
      auto out = engine->pinned_output().first(l.channels * l.frames);
      const auto x = random_signal(in.size(), 2);
      std::copy(x.begin(), x.end(), in.begin());
      std::vector<double> us;
      for (int i = 0; i < 12000; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        engine->process(in, out, l.frames, Layout::interleaved);
        const auto t1 = std::chrono::steady_clock::now();
        if (i >= 2000) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      char config[64];
      std::snprintf(config, sizeof config, "%zux%zux%zu%s", l.channels, l.frames, l.taps,
                    std::string(l.kernel) == "partitioned" ? " (nupc)" : "");
      std::printf("%-16s %-10s %8.1f %8.1f %8.1f\n", config,
                  zero_copy == 0 ? "copies" : "zero-copy", percentile(us, 0.5),
                  percentile(us, 0.99), percentile(us, 1.0));
    }
  }

  const std::size_t channels = 8, frames = std::size_t(1) << 21;
  std::printf(
      "\noffline throughput, process_device, %zu ch x %zu frames (one call, device events), "
      "Gsamples/s\n",
      channels, frames);
  cuda::DeviceBuffer<float> d_in(channels * frames), d_out(channels * frames);
  const auto x = random_signal(channels * frames, 3);
  ASSERT_EQ(cudaMemcpy(d_in.get(), x.data(), d_in.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  struct Run {
    std::size_t taps;
    std::string kernel;
    Algorithm algorithm;
  };
  std::vector<Run> runs;
  for (std::size_t taps : {32, 256, 2048})
    for (const auto& v : kVariants) runs.push_back({taps, v, Algorithm::direct});
  for (std::size_t taps : {32, 256, 2048, 16384, 131072}) {
    if (taps == 16384) runs.push_back({taps, "tuned", Algorithm::direct});
    runs.push_back({taps, "auto", Algorithm::fft});
    runs.push_back({taps, "auto", Algorithm::automatic});
  }
  std::printf("%8s %-12s %-10s %10s %10s  %s\n", "taps", "kernel", "algorithm", "ms", "GS/s",
              "description");
  for (const Run& r : runs) {
    EngineOptions options;
    options.max_block_frames = frames;
    options.kernel = r.kernel;
    options.algorithm = r.algorithm;
    try {
      auto engine =
          make_cuda_device_engine(FilterBank::shared(random_signal(r.taps, 4), channels), options);
      const double macs = double(channels * frames) * double(r.taps);
      if (engine->algorithm() == Algorithm::direct && macs > 5e11) {
        std::printf("%8zu %-12s skipped: direct form too slow (%s)\n", r.taps, r.kernel.c_str(),
                    engine->description().c_str());
        continue;
      }
      const bool slow =
          engine->algorithm() == Algorithm::direct && (macs > 2e10 || r.kernel != "tuned");
      std::vector<double> ms;
      cuda::Event start(true), stop(true);
      for (int rep = 0; rep < (slow ? 2 : 5); ++rep) {
        start.record(engine->stream());
        engine->process_device(d_in.get(), d_out.get(), frames, frames);
        stop.record(engine->stream());
        engine->synchronize();
        float elapsed = 0.0f;
        ASSERT_EQ(cudaEventElapsedTime(&elapsed, start.get(), stop.get()), cudaSuccess);
        if (rep > 0) ms.push_back(elapsed);
      }
      const double m = percentile(ms, 0.5);
      std::printf("%8zu %-12s %-10s %10.3f %10.2f  %s\n", r.taps, r.kernel.c_str(),
                  r.algorithm == Algorithm::fft      ? "fft"
                  : r.algorithm == Algorithm::direct ? "direct"
                                                     : "auto",
                  m, double(channels * frames) / (m * 1e6), engine->description().c_str());
    } catch (const std::exception& e) {
      std::printf("%8zu %-12s failed: %s\n", r.taps, r.kernel.c_str(), e.what());
    }
  }
}

}  // namespace
}  // namespace tapstream

// Exactness of the CUDA engine's non-uniformly partitioned streaming path
// (kernels/convolvers/partitioned_convolver.hpp): against a float64 reference of the whole-stream
// convolution, with calls of varying size (1..max_block_frames), per-channel
// filters, interleaved and planar layouts (the mapped zero-copy path and the
// copy path), filter swaps landing while tail partitions are still in flight
// (with and without crossfade), and reset. The GPU plan itself is checked
// without a GPU. Long filters use sparse taps (a few non-zero taps spread over
// the whole length, the last one included): the reference visits only those,
// while the GPU still runs every partition.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/convolvers/partitioned_convolver.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/cuda_engine.hpp"
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

// Dense taps for the first `dense` taps (the head and the first tail
// partitions), then a few scattered non-zero taps up to the last one.
std::vector<float> filter(std::size_t taps, std::size_t dense, std::uint64_t seed) {
  std::vector<float> h = random_signal(std::min(dense, taps), seed);
  h.resize(taps, 0.0f);
  std::mt19937_64 rng(seed + 1);
  std::uniform_int_distribution<std::size_t> at(0, taps - 1);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (int i = 0; i < 24; ++i) h[at(rng)] = value(rng);
  h[taps - 1] = value(rng);
  return h;
}

FilterBank bank(std::size_t channels, std::size_t taps, std::size_t dense, std::uint64_t seed) {
  std::vector<std::vector<float>> filters;
  for (std::size_t c = 0; c < channels; ++c) filters.push_back(filter(taps, dense, seed + 31 * c));
  return FilterBank::per_channel(std::move(filters));
}

// Streams `in` through `engine` in calls of `sizes`; before the call that
// starts at a frame in `swaps` (frame -> bank), swaps the filters.
struct Swap {
  std::size_t call = 0;
  const FilterBank* bank = nullptr;
  bool crossfade = true;
};
Signals stream(Engine& engine, const Signals& in, const std::vector<std::size_t>& sizes,
               Layout layout, const std::vector<Swap>& swaps = {}) {
  Signals out(in.size(), std::vector<float>(in[0].size()));
  std::vector<float> a, b;
  std::size_t start = 0;
  for (std::size_t call = 0; call < sizes.size(); ++call) {
    for (const Swap& s : swaps)
      if (s.call == call) engine.set_filters(*s.bank, s.crossfade);
    run_block(engine, in, out, start, sizes[call], layout, a, b);
    start += sizes[call];
  }
  return out;
}

std::unique_ptr<Engine> partitioned_engine(const FilterBank& b, std::size_t max_block) {
  EngineOptions options;
  options.max_block_frames = max_block;
  options.kernel = "partitioned";
  auto engine = make_cuda_engine(b, options);
  std::printf("%s\n", engine->description().c_str());
  return engine;
}

// The convolver alone behind the Engine interface (planar only; device copies
// per call), so that a test can hand it any plan: e.g. the plan made for
// thousands of channels (a tail segment of every size up to 8192) run on two.
class ConvolverEngine final : public Engine {
 public:
  ConvolverEngine(const FilterBank& b, std::size_t max_block, PartitionPlan plan)
      : channels_(b.channels()),
        max_block_(max_block),
        taps_(b.max_taps()),
        convolver_(b, b.max_taps(), max_block, std::move(plan)),
        in_(channels_ * max_block),
        out_(channels_ * max_block) {
    std::printf("convolver: %s\n", convolver_.description().c_str());
  }
  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout layout) override {
    if (layout != Layout::planar) throw std::invalid_argument("ConvolverEngine: planar only");
    const std::size_t bytes = channels_ * frames * sizeof(float);
    TAPSTREAM_CUDA_CHECK(
        cudaMemcpyAsync(in_.get(), in.data(), bytes, cudaMemcpyHostToDevice, stream_.get()));
    convolver_.process(cuda::planar_block(in_.get(), frames, out_.get(), frames, frames),
                       stream_.get());
    TAPSTREAM_CUDA_CHECK(
        cudaMemcpyAsync(out.data(), out_.get(), bytes, cudaMemcpyDeviceToHost, stream_.get()));
    stream_.synchronize();
  }
  void set_filters(const FilterBank& b, bool crossfade) override {
    convolver_.set_filters(b, crossfade);
  }
  void reset() override { convolver_.reset(stream_.get()); }
  std::size_t channels() const override { return channels_; }
  std::size_t max_block_frames() const override { return max_block_; }
  std::size_t max_taps() const override { return taps_; }
  std::string name() const override { return "convolver"; }
  std::string description() const override { return convolver_.description(); }

 private:
  std::size_t channels_, max_block_, taps_;
  cuda::PartitionedConvolver convolver_;
  cuda::Stream stream_;
  cuda::DeviceBuffer<float> in_, out_;
};

TEST(CudaPartitionedPlan, GpuPlansAreValidAndHaveATailForLongFilters) {
  for (std::size_t channels : {1, 8, 1024, 4096})
    for (std::size_t block : {32, 64, 128, 256, 1024})
      for (std::size_t taps : {4096, 65536, 262144}) {
        const PartitionPlan plan = cuda::plan_gpu_partitions(channels, block, taps);
        EXPECT_NO_THROW(plan.validate()) << plan.describe();
        EXPECT_GE(plan.head_frames, block);
        if (taps >= 64 * block && channels >= 8) {
          EXPECT_GT(plan.segments.size(), 1u) << channels << " ch, " << block << " frames, " << taps
                                              << " taps: " << plan.describe();
        }
      }
}

TEST(CudaPartitionedPlan, NonPowerOfTwoCallsGetAHeadAtLeastAsLong) {
  const PartitionPlan plan = cuda::plan_gpu_partitions(2, 48, 10000);
  EXPECT_EQ(plan.head_frames, 64u);
  plan.validate();
}

class CudaPartitioned : public testing::CudaDeviceTest {};

TEST_F(CudaPartitioned, OutputMatchesFloat64ReferenceForVaryingCallSizes) {
  const std::uint64_t seed = announce("varying calls", 8101);
  // (largest call, taps, dense taps, layout)
  for (const auto& [max_block, taps, dense, layout] :
       std::vector<std::tuple<std::size_t, std::size_t, std::size_t, Layout>>{
           {64, 65536, 3000, Layout::interleaved},
           {32, 20000, 12000, Layout::planar},
           {256, 262144, 3000, Layout::interleaved},
           {1024, 9000, 9000, Layout::planar}}) {
    const std::size_t channels = 3, frames = std::max<std::size_t>(taps + 5000, 40000);
    const FilterBank b = bank(channels, taps, dense, seed + taps);
    auto engine = partitioned_engine(b, max_block);
    const Signals in = random_signals(channels, frames, seed);
    const Signals out =
        stream(*engine, in, random_block_sizes(frames, max_block, seed + 1), layout);
    for (std::size_t c = 0; c < channels; ++c) {
      const double error = relative_error(out[c], sparse_reference_convolution(in[c], b.taps(c)));
      EXPECT_LE(error, kTolerance)
          << "block " << max_block << ", taps " << taps << ", channel " << c;
    }
  }
}

TEST_F(CudaPartitioned, OutputDoesNotDependOnHowTheStreamIsCut) {
  const std::uint64_t seed = announce("cuts", 8102);
  const std::size_t channels = 4, taps = 30000, frames = 50000, max_block = 128;
  const FilterBank b = bank(channels, taps, 30000, seed);  // dense
  const Signals in = random_signals(channels, frames, seed);
  auto one = partitioned_engine(b, max_block);
  auto other = partitioned_engine(b, max_block);
  const Signals a =
      stream(*one, in, random_block_sizes(frames, max_block, seed + 2), Layout::planar);
  const std::vector<std::size_t> fixed(frames / 100, 100);
  const Signals c = stream(*other, in, fixed, Layout::interleaved);
  for (std::size_t ch = 0; ch < channels; ++ch)
    EXPECT_LE(relative_error(std::span<const float>(c[ch]), std::span<const float>(a[ch])),
              kTolerance)
        << "channel " << ch;
}

// Streams through `make(first)` with three swaps: early (tails of every size
// in flight), then without crossfade and, before the same call, with (the
// second replaces the first); checks every frame against float64.
// With `shared`, the second bank is one filter for every channel (as `ctl
// load all` makes it), on five channels: its row is sent once and copied to
// the others on the device (1, then 2, then the 1 left).
template <typename MakeEngine>
void check_swaps(MakeEngine make, Layout layout, std::uint64_t seed, bool shared = false) {
  const std::size_t channels = shared ? 5 : 2, taps = 65536, frames = 120000, max_block = 64;
  const FilterBank first = bank(channels, taps, 2000, seed);
  const FilterBank second = shared ? FilterBank::shared(filter(taps, 2000, seed + 500), channels)
                                   : bank(channels, taps, 2000, seed + 500);
  const FilterBank third = bank(channels, taps / 2, 2000, seed + 900);
  auto engine = make(first, max_block);
  const Signals in = random_signals(channels, frames, seed);
  const std::vector<std::size_t> sizes = random_block_sizes(frames, max_block, seed + 3);
  const std::size_t s1 = sizes.size() / 3, s2 = 2 * sizes.size() / 3;
  const std::vector<Swap> swaps = {{s1, &second, true}, {s2, &first, false}, {s2, &third, true}};
  const Signals out = stream(*engine, in, sizes, layout, swaps);
  std::vector<std::size_t> starts(sizes.size() + 1, 0);
  for (std::size_t i = 0; i < sizes.size(); ++i) starts[i + 1] = starts[i] + sizes[i];
  for (std::size_t c = 0; c < channels; ++c) {
    auto ref = [&](const FilterBank& b) { return sparse_reference_convolution(in[c], b.taps(c)); };
    const std::vector<double> y1 = ref(first), y2 = ref(second), y3 = ref(third);
    std::vector<double> want(frames);
    for (std::size_t n = 0; n < frames; ++n) {
      if (n < starts[s1]) {
        want[n] = y1[n];
      } else if (n < starts[s1 + 1]) {
        const double w = double(n - starts[s1] + 1) / double(sizes[s1]);
        want[n] = y1[n] * (1.0 - w) + y2[n] * w;
      } else if (n < starts[s2]) {
        want[n] = y2[n];
      } else if (n < starts[s2 + 1]) {
        const double w = double(n - starts[s2] + 1) / double(sizes[s2]);
        want[n] = y2[n] * (1.0 - w) + y3[n] * w;
      } else {
        want[n] = y3[n];
      }
    }
    // Checked piece by piece so that an error near a swap is not averaged away.
    for (std::size_t from :
         {std::size_t(0), starts[s1], starts[s1 + 1], starts[s2], starts[s2 + 1]}) {
      const std::size_t to = std::min(frames, from + 4096);
      const double error = relative_error(std::span<const float>(out[c]).subspan(from, to - from),
                                          std::span<const double>(want).subspan(from, to - from));
      EXPECT_LE(error, kTolerance) << "channel " << c << ", frames " << from << ".." << to;
    }
    EXPECT_LE(relative_error(out[c], want), kTolerance) << "channel " << c << ", whole stream";
  }
}

TEST_F(CudaPartitioned, SwapsWhileTailsAreInFlightCrossfadeOverOneCall) {
  check_swaps(partitioned_engine, Layout::interleaved, announce("swaps", 8103));
}

TEST_F(CudaPartitioned, SwapsCrossfadeWithTailStepsOfEverySizeInFlight) {
  // The plan made for 4096 channels: 64x4 + 128x2 + ... + 4096x2 + 8192x6.
  check_swaps(
      [](const FilterBank& b, std::size_t max_block) {
        return std::make_unique<ConvolverEngine>(
            b, max_block, cuda::plan_gpu_partitions(4096, max_block, b.max_taps()));
      },
      Layout::planar, announce("swaps, every tail size", 8106));
}

TEST_F(CudaPartitioned, ASharedBankSwappedInReachesEveryChannelExactly) {
  check_swaps(partitioned_engine, Layout::interleaved, announce("shared-bank swaps", 8107), true);
}

TEST_F(CudaPartitioned, ResetStartsTheStreamAgain) {
  const std::uint64_t seed = announce("reset", 8104);
  const std::size_t channels = 2, taps = 16384, frames = 30000, max_block = 64;
  const FilterBank b = bank(channels, taps, 4000, seed);
  auto engine = partitioned_engine(b, max_block);
  const Signals noise = random_signals(channels, 7777, seed + 5);
  stream(*engine, noise, random_block_sizes(7777, max_block, seed + 6), Layout::planar);
  engine->reset();
  const Signals in = random_signals(channels, frames, seed);
  const Signals out =
      stream(*engine, in, random_block_sizes(frames, max_block, seed + 7), Layout::planar);
  for (std::size_t c = 0; c < channels; ++c)
    EXPECT_LE(relative_error(out[c], sparse_reference_convolution(in[c], b.taps(c))), kTolerance);
}

// What a user gets with default options for the live shape (8 ch x
// 64-frame calls x 65536 taps): the cost model picks the partitioned path
// (several times faster per call than the direct form it picked before:
// docs/performance.md, "Cost models"), and its output is the reference's.
TEST_F(CudaPartitioned, TheDefaultEngineTakesThePartitionedPathWhereTheCostModelSaysSo) {
  const std::uint64_t seed = announce("default engine, 8 x 64 x 65536", 8107);
  const std::size_t channels = 8, taps = 65536, max_block = 64, frames = 70000;
  const FilterBank b = bank(channels, taps, 1500, seed);
  EngineOptions options;  // everything default but the call size
  options.max_block_frames = max_block;
  auto engine = make_cuda_engine(b, options);
  EXPECT_NE(engine->description().find("non-uniformly partitioned"), std::string::npos)
      << engine->description();
  const Signals in = random_signals(channels, frames, seed + 1);
  const Signals out = stream(*engine, in, std::vector<std::size_t>(frames / max_block, max_block),
                             Layout::interleaved);
  const std::size_t checked = frames / max_block * max_block;
  for (std::size_t c = 0; c < channels; ++c) {
    const std::vector<double> want = sparse_reference_convolution(in[c], b.taps(c));
    EXPECT_LE(relative_error(std::span<const float>(out[c]).first(checked),
                             std::span<const double>(want).first(checked)),
              kTolerance)
        << "channel " << c;
  }
}

// A device's calls (the largest size, through the engine's mapped staging)
// are each one graph with the steps due; any other call, a swap's crossfade
// and a reset go the launched way, and the stream moves between the two
// without a wrong frame: each stretch is checked against float64.
TEST_F(CudaPartitioned, ACallAndItsDueStepsAreOneGraphAndTheStreamStaysExactAroundOtherCalls) {
  const std::uint64_t seed = announce("calls as one graph", 8108);
  const std::size_t channels = 8, taps = 65536, max_block = 64, frames = 90000;
  const FilterBank first = bank(channels, taps, 1500, seed);
  const FilterBank second = bank(channels, taps, 1500, seed + 600);
  auto engine = partitioned_engine(first, max_block);
  ASSERT_NE(engine->description().find("one graph"), std::string::npos) << engine->description();
  const Signals in = random_signals(channels, frames, seed + 1);
  // Device-sized calls, with odd ones (a launch each) now and then, a swap.
  std::vector<std::size_t> sizes;
  std::mt19937_64 rng(seed + 2);
  for (std::size_t done = 0; done < frames;) {
    std::size_t n = rng() % 9 == 0 ? 1 + rng() % (max_block - 1) : max_block;
    n = std::min(n, frames - done);
    sizes.push_back(n);
    done += n;
  }
  const std::size_t swap_call = sizes.size() / 2;
  const Signals out = stream(*engine, in, sizes, Layout::interleaved, {{swap_call, &second, true}});
  std::size_t swap_start = 0;
  for (std::size_t i = 0; i < swap_call; ++i) swap_start += sizes[i];
  const std::size_t swap_end = swap_start + sizes[swap_call];
  for (std::size_t c = 0; c < channels; ++c) {
    const std::vector<double> y1 = sparse_reference_convolution(in[c], first.taps(c));
    const std::vector<double> y2 = sparse_reference_convolution(in[c], second.taps(c));
    std::vector<double> want(frames);
    for (std::size_t n = 0; n < frames; ++n) {
      if (n < swap_start) {
        want[n] = y1[n];
      } else if (n < swap_end) {
        const double w = double(n - swap_start + 1) / double(swap_end - swap_start);
        want[n] = y1[n] * (1.0 - w) + y2[n] * w;
      } else {
        want[n] = y2[n];
      }
    }
    for (std::size_t from = 0; from < frames; from += 8192) {
      const std::size_t to = std::min(frames, from + 8192);
      EXPECT_LE(relative_error(std::span<const float>(out[c]).subspan(from, to - from),
                               std::span<const double>(want).subspan(from, to - from)),
                kTolerance)
          << "channel " << c << ", frames " << from << ".." << to;
    }
  }
  // After a reset the graphs' position starts again with the host's.
  engine->reset();
  const Signals again = random_signals(channels, 20000, seed + 3);
  const Signals out2 = stream(
      *engine, again, std::vector<std::size_t>(20000 / max_block, max_block), Layout::interleaved);
  const std::size_t checked = 20000 / max_block * max_block;
  for (std::size_t c = 0; c < channels; ++c) {
    const std::vector<double> want = sparse_reference_convolution(again[c], second.taps(c));
    EXPECT_LE(relative_error(std::span<const float>(out2[c]).first(checked),
                             std::span<const double>(want).first(checked)),
              kTolerance)
        << "after reset, channel " << c;
  }
}

TEST_F(CudaPartitioned, KernelOptionForcesItAndOfflineBlocksKeepTheUniformPath) {
  const FilterBank b = bank(8, 65536, 64, 8105);
  EngineOptions options;
  options.max_block_frames = 64;
  options.kernel = "partitioned";
  auto engine = make_cuda_engine(b, options);
  EXPECT_NE(engine->description().find("non-uniformly partitioned"), std::string::npos)
      << engine->description();
  options.kernel = "auto";
  options.max_block_frames = 8192;  // offline-sized blocks: the uniform FFT path
  auto offline = make_cuda_engine(b, options);
  EXPECT_EQ(offline->description().find("non-uniformly partitioned"), std::string::npos)
      << offline->description();
}

}  // namespace
}  // namespace tapstream

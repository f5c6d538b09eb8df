// Small streaming calls of the CUDA engine (zero-copy, direct form) in each of
// its ways to reach the device (EngineOptions::cuda.small_calls): the persistent
// kernel that serves call after call without a launch (kernels/convolvers/persistent_direct),
// a launch with a spin wait, a launch with an event wait. Each must give the
// float64 reference for calls of varying size in both layouts; the persistent
// kernel also across its idle timeout (it returns and is relaunched), filter
// swaps with crossfade, reset, device-memory calls in between, and engine
// destruction, none of which may hang.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

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
using testing::reference_convolution;
using testing::relative_error;
using testing::run_block;
using testing::Signals;

constexpr double kTolerance = 1e-5;

FilterBank bank_for(std::size_t channels, std::size_t taps, std::uint64_t seed) {
  std::vector<std::vector<float>> filters;
  for (std::size_t c = 0; c < channels; ++c)
    filters.push_back(random_signal(c == 0 ? taps : taps / 2 + 1, seed + 17 * c));
  return FilterBank::per_channel(std::move(filters));
}

std::vector<double> reference(const Signals& in, const FilterBank& bank, std::size_t c) {
  return reference_convolution(in[c], bank.taps(c));
}

// The engine option's enum, named apart from the fixture below.
using SmallCallsMode = ::tapstream::CudaSmallCalls;

class CudaSmallCalls : public testing::CudaDeviceTest {};

struct Case {
  std::size_t channels, taps, max_block;
};

TEST_F(CudaSmallCalls, EveryWayMatchesTheFloat64ReferenceForVaryingCallsInBothLayouts) {
  const std::uint64_t seed = announce("small calls", 20261123);
  struct Mode {
    const char* name;
    SmallCallsMode value;
  };
  for (const Mode mode :
       {Mode{"persistent", SmallCallsMode::persistent}, Mode{"spin", SmallCallsMode::spin},
        Mode{"event", SmallCallsMode::event}}) {
    for (const Case& k : {Case{2, 2048, 256}, Case{1, 600, 512}, Case{3, 100, 64}, Case{2, 1, 256},
                          Case{8, 1000, 128}}) {
      const FilterBank bank = bank_for(k.channels, k.taps, seed + k.taps);
      const std::size_t frames = 12000;
      const Signals in = random_signals(k.channels, frames, seed + 1);
      EngineOptions options;
      options.max_block_frames = k.max_block;
      options.cuda.small_calls = mode.value;
      auto engine = make_cuda_engine(bank, options);
      Signals out(k.channels, std::vector<float>(frames));
      std::size_t start = 0, call = 0;
      for (const std::size_t n : random_block_sizes(frames, k.max_block, seed + 2)) {
        run_block(*engine, in, out, start, n,
                  call++ % 3 == 0 ? Layout::planar : Layout::interleaved);
        start += n;
      }
      const std::string description = engine->description();
      std::printf("%s, %zu ch x %zu taps, calls of 1..%zu: %s\n", mode.name, k.channels, k.taps,
                  k.max_block, description.c_str());
      if (mode.value == SmallCallsMode::persistent) {
        EXPECT_NE(description.find("small calls: persistent kernel,"), std::string::npos)
            << description;
      }
      for (std::size_t c = 0; c < k.channels; ++c)
        EXPECT_LE(relative_error(out[c], reference(in, bank, c)), kTolerance)
            << mode.name << ", " << k.channels << " ch x " << k.taps << " taps, channel " << c;
    }
  }
}

// Answer timeouts far below a call's time make every call take the recovery
// paths: a fresh launch serves the unanswered call again (writing the same
// outputs and history), and after three misses the engine falls back to a
// launch per call. The output must stay exact through all of them.
TEST_F(CudaSmallCalls, UnansweredCallsAreServedAgainOrByALaunchWithExactOutput) {
  const std::uint64_t seed = announce("persistent kernel recovery", 31);
  for (const long long answer_us : {12, 1}) {
    const std::size_t channels = 2, taps = 2048, block = 256, frames = 20000;
    const FilterBank bank = bank_for(channels, taps, seed);
    const Signals in = random_signals(channels, frames, seed + 1);
    EngineOptions options;
    options.max_block_frames = block;
    options.cuda.small_calls = SmallCallsMode::persistent;
    options.cuda.persistent_answer = std::chrono::microseconds(answer_us);
    auto engine = make_cuda_engine(bank, options);
    Signals out(channels, std::vector<float>(frames));
    std::size_t start = 0, call = 0;
    for (const std::size_t n : random_block_sizes(frames, block, seed + 2)) {
      run_block(*engine, in, out, start, n, call++ % 2 ? Layout::planar : Layout::interleaved);
      start += n;
    }
    std::printf("answer timeout %lld us: %s\n", answer_us, engine->description().c_str());
    for (std::size_t c = 0; c < channels; ++c)
      EXPECT_LE(relative_error(out[c], reference(in, bank, c)), kTolerance)
          << "answer timeout " << answer_us << " us, channel " << c;
  }
}

TEST_F(CudaSmallCalls, PersistentKernelIsTheDefaultForTheStreamingTargetShape) {
  const FilterBank bank = bank_for(2, 2048, 5);
  EngineOptions options;
  options.max_block_frames = 256;
  auto engine = make_cuda_engine(bank, options);
  const Signals in = random_signals(2, 256, 6);
  Signals out(2, std::vector<float>(256));
  run_block(*engine, in, out, 0, 256, Layout::interleaved);
  EXPECT_NE(engine->description().find("small calls: persistent kernel, 8 blocks"),
            std::string::npos)
      << engine->description();
}

// Calls with pauses past the idle timeout (the kernel returns and the next
// call relaunches it), a swap with crossfade and one without, a reset, and
// device-memory calls between host calls: the output stays the reference's.
TEST_F(CudaSmallCalls, PersistentKernelSurvivesIdleTimeoutsSwapsResetsAndDeviceCalls) {
  const std::uint64_t seed = announce("persistent kernel life cycle", 77);
  const std::size_t channels = 2, taps = 1500, block = 256, calls = 40;
  const std::size_t frames = calls * block;
  const FilterBank first = bank_for(channels, taps, seed);
  const FilterBank second = bank_for(channels, taps, seed + 1);
  const Signals in = random_signals(channels, frames, seed + 2);
  EngineOptions options;
  options.max_block_frames = block;
  options.cuda.small_calls = SmallCallsMode::persistent;
  options.cuda.persistent_idle = std::chrono::milliseconds(2);
  auto engine = make_cuda_device_engine(first, options);
  Signals out(channels, std::vector<float>(frames));
  const std::size_t fade_call = 15, hard_call = 25;
  for (std::size_t i = 0; i < calls; ++i) {
    if (i == fade_call) engine->set_filters(second, true);
    if (i == hard_call) engine->set_filters(first, false);
    // The stimulus, not a wait: a pause past the 2 ms idle timeout, so the
    // kernel returns and the next call relaunches it.
    if (i % 7 == 3) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    run_block(*engine, in, out, i * block, block, i % 2 ? Layout::planar : Layout::interleaved);
  }
  for (std::size_t c = 0; c < channels; ++c) {
    const auto y1 = reference(in, first, c), y2 = reference(in, second, c);
    std::vector<double> want(frames);
    for (std::size_t n = 0; n < frames; ++n) {
      const std::size_t call = n / block;
      if (call < fade_call || call >= hard_call) {
        want[n] = y1[n];
      } else if (call == fade_call) {
        const double w = double(n - fade_call * block + 1) / double(block);
        want[n] = y1[n] * (1.0 - w) + y2[n] * w;
      } else {
        want[n] = y2[n];
      }
    }
    EXPECT_LE(relative_error(out[c], want), kTolerance) << "channel " << c;
  }

  // Device-memory calls between host calls share the history with them.
  engine->reset();
  cuda::DeviceBuffer<float> d_in(channels * block), d_out(channels * block);
  std::vector<float> planar(channels * block);
  Signals again(channels, std::vector<float>(frames));
  for (std::size_t i = 0; i < 8; ++i) {
    if (i % 2 == 0) {
      run_block(*engine, in, again, i * block, block, Layout::interleaved);
      continue;
    }
    for (std::size_t c = 0; c < channels; ++c)
      std::copy(in[c].begin() + long(i * block), in[c].begin() + long((i + 1) * block),
                planar.begin() + long(c * block));
    ASSERT_EQ(cudaMemcpy(d_in.get(), planar.data(), d_in.bytes(), cudaMemcpyHostToDevice),
              cudaSuccess);
    engine->process_device(d_in.get(), d_out.get(), block, block);
    engine->synchronize();
    ASSERT_EQ(cudaMemcpy(planar.data(), d_out.get(), d_out.bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    for (std::size_t c = 0; c < channels; ++c)
      std::copy(planar.begin() + long(c * block), planar.begin() + long((c + 1) * block),
                again[c].begin() + long(i * block));
  }
  for (std::size_t c = 0; c < channels; ++c) {
    const auto want = reference(in, first, c);
    EXPECT_LE(relative_error(std::span<const float>(again[c]).first(8 * block),
                             std::span<const double>(want).first(8 * block)),
              kTolerance)
        << "after reset, channel " << c;
  }
}

TEST_F(CudaSmallCalls, EnginesWithARunningPersistentKernelCloseAndSynchronizePromptly) {
  // An idle timeout far longer than the bound below: neither synchronize()
  // nor the destructor may wait for the kernel to give up by itself. The
  // bound (5 s) is what a loaded machine keeps; how promptly they return is
  // bench/ work (cuda_engine_bench).
  const FilterBank bank = bank_for(2, 512, 9);
  const Signals in = random_signals(2, 64, 10);
  Signals out(2, std::vector<float>(64));
  for (int i = 0; i < 5; ++i) {
    EngineOptions options;
    options.max_block_frames = 64;
    options.cuda.small_calls = SmallCallsMode::persistent;
    options.cuda.persistent_idle = std::chrono::milliseconds(30000);
    auto engine = make_cuda_device_engine(bank, options);
    run_block(*engine, in, out, 0, 64, Layout::interleaved);
    ASSERT_NE(engine->description().find("small calls: persistent kernel,"), std::string::npos)
        << engine->description();
    const auto t0 = std::chrono::steady_clock::now();
    engine->synchronize();
    engine.reset();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(seconds, 5.0) << "engine " << i;
  }
}

}  // namespace
}  // namespace tapstream

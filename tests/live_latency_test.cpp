// The engine's processing time per block for live configurations, over
// thousands of blocks, against the block period it must beat. p50, p99 and
// max are printed for wall-clock time and for the thread's CPU time.
//
// What is asserted, and why: on a loaded 2-core CI machine the wall-clock
// tail mostly measures the scheduler (other processes preempt the test), so
// the hard bound is on CPU time, which preemption does not inflate: p99
// under half the block period. Of the wall clock only the median is
// asserted, and only under the whole period (a machine where it is not could
// not run the daemon at all; a loaded machine keeps that margin, as the
// block's CPU time is a few percent of the period). The tight wall-clock
// figures (p50 / p99 / p99.9 against half the period, one call per period)
// are the capacity benchmark's: `tapstream bench capacity` (bench/capacity_bench),
// results in docs/performance.md, "Live capacity".

#include <gtest/gtest.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "daemon/engine_factory.hpp"
#include "dsp/cpu/cpu_engine.hpp"
#include "tests/reference.hpp"
#ifdef TAPSTREAM_HAVE_CUDA
#include "kernels/cuda_engine.hpp"
#endif

namespace tapstream {
namespace {

struct LiveCase {
  std::size_t channels;
  std::size_t block_frames;
  std::size_t taps;
  std::size_t blocks;
};

struct Percentiles {
  double p50, p99, max;
};

Percentiles percentiles(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<std::size_t>(q * double(v.size())))];
  };
  return {at(0.50), at(0.99), v.back()};
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// The engine the daemon runs for a filter per channel: the factory's, for a diagonal matrix.
using EngineMaker = std::unique_ptr<MatrixEngine> (*)(const FilterBank&, const EngineOptions&);

std::unique_ptr<MatrixEngine> make_cpu(const FilterBank& bank, const EngineOptions& options) {
  return make_engine(Backend::cpu, RoutingMatrix::diagonal(bank), options);
}

void measure(const char* backend, EngineMaker make, const LiveCase& c, bool assert_cpu_time) {
  const int rate = 48000;
  const std::uint64_t seed = 1000 + c.channels * 7 + c.taps;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const auto bank = FilterBank::shared(testing::random_signal(c.taps, seed), c.channels);
  EngineOptions options;
  options.max_block_frames = c.block_frames;
  auto engine = make(bank, options);
  const std::size_t samples = c.channels * c.block_frames;
  // A few seconds of signal, cycled: the engine sees fresh-looking blocks.
  const auto signal = testing::random_signal(samples * 64, seed + 1);
  std::vector<float> out(samples);
  for (int i = 0; i < 32; ++i) {  // warm-up, not measured
    engine->process(std::span<const float>(signal).first(samples), out, c.block_frames,
                    Layout::interleaved);
  }
  std::vector<double> wall_us, cpu_us;
  wall_us.reserve(c.blocks);
  cpu_us.reserve(c.blocks);
  for (std::size_t b = 0; b < c.blocks; ++b) {
    const auto in = std::span<const float>(signal).subspan((b % 64) * samples, samples);
    const double cpu0 = thread_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    engine->process(in, out, c.block_frames, Layout::interleaved);
    const auto t1 = std::chrono::steady_clock::now();
    const double cpu1 = thread_cpu_seconds();
    wall_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    cpu_us.push_back(1e6 * (cpu1 - cpu0));
  }
  const double period_us = 1e6 * double(c.block_frames) / rate;
  const auto wall = percentiles(wall_us);
  const auto cpu = percentiles(cpu_us);
  std::printf(
      "%s %zu ch, %zu frames @ %d Hz, %zu taps, %zu blocks (%s); period %.1f us\n"
      "  wall us: p50 %.1f  p99 %.1f  max %.1f\n"
      "  cpu  us: p50 %.1f  p99 %.1f  max %.1f\n",
      backend, c.channels, c.block_frames, rate, c.taps, c.blocks, engine->description().c_str(),
      period_us, wall.p50, wall.p99, wall.max, cpu.p50, cpu.p99, cpu.max);
  EXPECT_LT(wall.p50, period_us) << "median wall time per block";
  if (assert_cpu_time) {
    EXPECT_LT(cpu.p99, 0.5 * period_us) << "p99 CPU time per block";
  } else {
    // A GPU engine's CPU time is mostly waiting: the wall clock is all there
    // is, its median under half the period (the tail is the benchmark's).
    EXPECT_LT(wall.p50, 0.5 * period_us) << "median wall time per block";
  }
}

const LiveCase stereo_256{2, 256, 4096, 4000};
const LiveCase eight_64{8, 64, 1024, 8000};

TEST(CpuEngineLatency, TwoChannels256Frames4096TapsStaysWellUnderTheBlockPeriod) {
  measure("cpu", &make_cpu, stereo_256, true);
}

TEST(CpuEngineLatency, EightChannels64Frames1024TapsStaysWellUnderTheBlockPeriod) {
  measure("cpu", &make_cpu, eight_64, true);
}

#ifdef TAPSTREAM_HAVE_CUDA
bool cuda_ready(std::string* reason) {
  return cuda_device_available(reason);
}
#else
bool cuda_ready(std::string* reason) {
  *reason = "this build has no CUDA engine (TAPSTREAM_CUDA=OFF)";
  return false;
}
#endif

std::unique_ptr<MatrixEngine> make_cuda(const FilterBank& bank, const EngineOptions& options) {
  return make_engine(Backend::cuda, RoutingMatrix::diagonal(bank), options);
}

TEST(CudaEngineLatency, TwoChannels256Frames4096TapsStaysWellUnderTheBlockPeriod) {
  std::string reason;
  if (!cuda_ready(&reason)) GTEST_SKIP() << "no CUDA engine: " << reason;
  measure("cuda", &make_cuda, stereo_256, false);
}

TEST(CudaEngineLatency, EightChannels64Frames1024TapsStaysWellUnderTheBlockPeriod) {
  std::string reason;
  if (!cuda_ready(&reason)) GTEST_SKIP() << "no CUDA engine: " << reason;
  measure("cuda", &make_cuda, eight_64, false);
}

}  // namespace
}  // namespace tapstream

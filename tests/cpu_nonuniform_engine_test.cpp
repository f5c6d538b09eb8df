// The CPU engine's non-uniformly partitioned path (head in the call, tails on
// worker threads): exact against a float64 reference whatever the call sizes,
// swaps that crossfade once and lose no sample even with tails in flight, and
// the choice between it and the uniform engine.

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dsp/cpu/cpu_cost_model.hpp"
#include "dsp/cpu/cpu_engine.hpp"
#include "dsp/realtime/deadline_counter.hpp"
#include "tests/reference.hpp"
#include "tests/wait_for.hpp"

namespace tapstream {
namespace {

using testing::random_signal;
using testing::reference_convolution;
using testing::relative_error;

std::unique_ptr<Engine> nonuniform(const FilterBank& bank, std::size_t block, std::size_t taps) {
  EngineOptions options;
  options.max_block_frames = block;
  options.max_taps = taps;
  const CpuPartitionCosts costs;
  return make_cpu_nonuniform_engine(bank, options,
                                    plan_partitions(std::bit_ceil(block), taps, costs));
}

// Waits until `engine`'s preparer holds no bank; fails if `limit` passed first.
::testing::AssertionResult prepared_within(Engine& engine, std::chrono::seconds limit) {
  const RealtimeEngine* rt = engine.realtime();
  if (rt == nullptr) return ::testing::AssertionFailure() << "not a real-time engine";
  return testing::wait_until(
      limit, [&] { return !rt->preparing_filters(); }, "the posted bank prepared",
      std::chrono::milliseconds(1));
}

// For its lifetime, this thread and the threads it starts (an engine's
// workers) share the one CPU it runs on, and this thread runs at SCHED_FIFO
// above them (the engine puts its workers below a real-time caller): while it
// calls without waiting, no worker runs. `realtime` is false where the
// privilege is missing (affinity alone then).
class PinnedRealtimeCaller {
 public:
  PinnedRealtimeCaller() {
    sched_getaffinity(0, sizeof(all_), &all_);
    cpu_set_t one{};
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    pinned = sched_setaffinity(0, sizeof(one), &one) == 0;
    sched_param fifo{};
    fifo.sched_priority = 10;
    realtime = pinned && sched_setscheduler(0, SCHED_FIFO, &fifo) == 0;
    if (!realtime) std::printf("SCHED_FIFO refused: the workers may keep up\n");
  }
  ~PinnedRealtimeCaller() {
    sched_param normal{};
    sched_setscheduler(0, SCHED_OTHER, &normal);
    sched_setaffinity(0, sizeof(all_), &all_);
  }
  PinnedRealtimeCaller(const PinnedRealtimeCaller&) = delete;
  PinnedRealtimeCaller& operator=(const PinnedRealtimeCaller&) = delete;

  bool pinned = false;
  bool realtime = false;

 private:
  cpu_set_t all_{};
};

// Runs `x` (planar, `channels` x n) through `engine` in calls of random sizes
// 1..max_call, interleaved; returns planar output.
std::vector<float> run_random_calls(Engine& engine, const std::vector<std::vector<float>>& x,
                                    std::size_t max_call, std::uint64_t seed) {
  const std::size_t channels = x.size(), n = x[0].size();
  std::vector<float> in(channels * max_call), out(channels * max_call);
  std::vector<float> y(channels * n);
  std::mt19937_64 rng(seed);
  for (std::size_t done = 0; done < n;) {
    const std::size_t frames = std::min(n - done, std::size_t(rng() % max_call) + 1);
    for (std::size_t f = 0; f < frames; ++f)
      for (std::size_t c = 0; c < channels; ++c) in[f * channels + c] = x[c][done + f];
    engine.process(in, out, frames, Layout::interleaved);
    for (std::size_t f = 0; f < frames; ++f)
      for (std::size_t c = 0; c < channels; ++c) y[c * n + done + f] = out[f * channels + c];
    done += frames;
  }
  return y;
}

TEST(CpuNonUniformEngine, MatchesFloat64AtAnyCallSizeWithTailsOnWorkers) {
  for (const std::size_t block : {std::size_t(64), std::size_t(256)}) {
    const std::size_t taps = 6000, n = 24000, channels = 3;
    const std::uint64_t seed = 1000 + block;
    std::printf("block %zu, seed %llu\n", block, static_cast<unsigned long long>(seed));
    std::vector<std::vector<float>> filters, x;
    for (std::size_t c = 0; c < channels; ++c) {
      // Different lengths: one shorter than the first tail segment's start.
      filters.push_back(random_signal(c == 2 ? 100 : taps - 7 * c, seed + c));
      x.push_back(random_signal(n, seed + 10 + c));
    }
    const FilterBank bank = FilterBank::per_channel(filters);
    auto engine = nonuniform(bank, block, taps);
    EXPECT_NE(engine->description().find("non-uniform"), std::string::npos)
        << engine->description();
    const std::vector<float> y = run_random_calls(*engine, x, block, seed);
    for (std::size_t c = 0; c < channels; ++c) {
      const auto want = reference_convolution(x[c], filters[c]);
      EXPECT_LE(relative_error(std::span<const float>(y.data() + c * n, n), want), 1e-5)
          << "channel " << c;
    }
  }
}

TEST(CpuNonUniformEngine, ResetStartsTheStreamAgain) {
  const std::size_t taps = 3000, n = 8000;
  const auto h = random_signal(taps, 7);
  const auto x = random_signal(n, 8);
  auto engine = nonuniform(FilterBank::shared(h, 1), 64, taps);
  const std::vector<std::vector<float>> xs{x};
  run_random_calls(*engine, xs, 64, 9);
  engine->reset();
  const auto y = run_random_calls(*engine, xs, 64, 10);
  EXPECT_LE(relative_error(y, reference_convolution(x, h)), 1e-5);
}

// Every call after a swap is the old filters' output, then one call blends
// (w = (i + 1) / frames) to the new, then the new filters' output; no sample
// lost or repeated. Swaps come while tail jobs are queued, some superseding
// one not yet played.
TEST(CpuNonUniformEngine, SwapsCrossfadeOnceAndLoseNoSampleWithTailsInFlight) {
  const std::size_t taps = 5000, n = 60000, block = 64;
  const std::uint64_t seed = 42;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const auto x = random_signal(n, seed);
  std::vector<std::vector<float>> filters;
  for (int i = 0; i < 4; ++i) filters.push_back(random_signal(taps - 100 * i, seed + 1 + i));
  std::vector<std::vector<double>> refs;
  for (const auto& h : filters) refs.push_back(reference_convolution(x, h));

  auto engine = nonuniform(FilterBank::shared(filters[0], 1), block, taps);
  std::mt19937_64 rng(seed);
  std::vector<float> y(block);
  std::size_t playing = 0;    // bank whose output the calls match
  std::size_t requested = 0;  // newest bank given to set_filters
  std::size_t fades = 0, swaps = 0, done = 0;
  double rms = 0.0;
  for (double v : refs[0]) rms += v * v;
  rms = std::sqrt(rms / double(n));
  auto matches = [&](std::size_t frames, auto expected) {
    for (std::size_t f = 0; f < frames; ++f) {
      if (std::abs(double(y[f]) - expected(f)) > 1e-4 * rms) return false;
    }
    return true;
  };
  std::size_t next_swap = 3000;
  while (done < n) {
    if (done >= next_swap) {
      next_swap += 12000;
      ++swaps;
      requested = (requested + 1) % filters.size();
      engine->set_filters(FilterBank::shared(filters[requested], 1), true);
      if (next_swap % 24000 == 15000) {  // supersede at once: the one before never plays
        requested = (requested + 1) % filters.size();
        engine->set_filters(FilterBank::shared(filters[requested], 1), true);
      }
      // The preparer's time is not the stream's: wait until the bank is
      // ready (a fixed sleep flaked on a loaded machine), so that the swap
      // must take effect within max_taps frames, long before the next one.
      ASSERT_TRUE(prepared_within(*engine, std::chrono::seconds(60)));
    }
    const std::size_t frames = std::min(n - done, std::size_t(rng() % block) + 1);
    engine->process(std::span<const float>(x.data() + done, frames), y, frames, Layout::planar);
    const auto& old = refs[playing];
    if (!matches(frames, [&](std::size_t f) { return old[done + f]; })) {
      ASSERT_NE(playing, requested) << "output left the playing bank at frame " << done;
      const auto& now = refs[requested];
      const bool blend = matches(frames, [&](std::size_t f) {
        const double w = double(f + 1) / double(frames);
        return old[done + f] + w * (now[done + f] - old[done + f]);
      });
      ASSERT_TRUE(blend) << "call at frame " << done << " is neither bank " << playing
                         << " nor a crossfade to bank " << requested;
      playing = requested;
      ++fades;
    }
    done += frames;
  }
  EXPECT_EQ(playing, requested);
  EXPECT_EQ(fades, swaps);
  EXPECT_EQ(swaps, 5u);
}

TEST(CpuNonUniformEngine, ChosenForLiveBlocksOfLongFiltersOnly) {
  const auto h = random_signal(65536, 3);
  EngineOptions live;
  live.max_block_frames = 64;
  auto a = make_cpu_engine(FilterBank::shared(h, 2), live);
  EXPECT_NE(a->description().find("non-uniform"), std::string::npos) << a->description();
  EngineOptions offline;
  offline.max_block_frames = 8192;
  auto b = make_cpu_engine(FilterBank::shared(h, 2), offline);
  EXPECT_EQ(b->description().find("non-uniform"), std::string::npos) << b->description();
  auto c = make_cpu_engine(FilterBank::shared(random_signal(16, 4), 2), live);
  EXPECT_EQ(c->description().find("non-uniform"), std::string::npos) << c->description();
  std::printf("64-frame calls, 65536 taps: %s\n", a->description().c_str());
}

TEST(CpuNonUniformEngine, RejectsABankItCannotHold) {
  auto engine = nonuniform(FilterBank::shared(random_signal(1000, 5), 2), 64, 1000);
  EXPECT_THROW(engine->set_filters(FilterBank::shared(random_signal(1001, 6), 2), true),
               std::invalid_argument);
  EXPECT_THROW(engine->set_filters(FilterBank::shared(random_signal(10, 6), 3), true),
               std::invalid_argument);
  std::vector<float> buffer(2 * 65);
  EXPECT_THROW(engine->process(buffer, buffer, 65, Layout::interleaved), std::invalid_argument);
}

// The engine with its in-call head spread over `threads` threads
// (EngineOptions::cpu.threads; 0: the default).
std::unique_ptr<Engine> nonuniform_on_threads(const FilterBank& bank, std::size_t block,
                                              std::size_t taps, std::size_t threads) {
  EngineOptions options;
  options.max_block_frames = block;
  options.max_taps = taps;
  options.cpu.threads = threads;
  const CpuPartitionCosts costs;  // as nonuniform(): tails from a few thousand taps on
  return make_cpu_nonuniform_engine(bank, options,
                                    plan_partitions(std::bit_ceil(block), taps, costs));
}

TEST(CpuNonUniformEngine, HeadThreadsDoNotChangeTheOutput) {
  // Many channels, an odd count (tasks and channel groups of unequal sizes),
  // filters of different lengths, calls of random sizes and a crossfading
  // swap mid-stream: the head spread over 2 or 3 threads, and the tail
  // segments over channel groups with it, give the same output, bit for
  // bit, as the head on the caller and one thread per tail segment (each
  // channel's arithmetic is the same whichever thread runs it), and that
  // output is the convolution.
  const std::size_t channels = 77, taps = 20000, n = 9000, block = 64;
  const std::uint64_t seed = 90;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::vector<std::vector<float>> filters, next_filters, x;
  for (std::size_t c = 0; c < channels; ++c) {
    filters.push_back(random_signal(taps - 13 * (c % 7), seed + c));
    next_filters.push_back(random_signal(taps - 29 * (c % 5), seed + 500 + c));
    x.push_back(random_signal(n, seed + 1000 + c));
  }
  const std::size_t cut = n / 2;
  std::vector<std::vector<float>> first(channels), second(channels);
  for (std::size_t c = 0; c < channels; ++c) {
    first[c].assign(x[c].begin(), x[c].begin() + std::ptrdiff_t(cut));
    second[c].assign(x[c].begin() + std::ptrdiff_t(cut), x[c].end());
  }
  std::vector<std::vector<float>> outputs;
  std::size_t tail_threads_alone = 0;
  for (const std::size_t threads : {1, 2, 3}) {
    auto engine = nonuniform_on_threads(FilterBank::per_channel(filters), block, taps, threads);
    const std::string description = engine->description();
    std::printf("[ engine   ] %s\n", description.c_str());
    const auto tails_at = description.find("tails on ");
    ASSERT_NE(tails_at, std::string::npos) << description;
    const std::size_t tail_threads = std::stoul(description.substr(tails_at + 9));
    if (threads == 1) {
      tail_threads_alone = tail_threads;
    } else {
      EXPECT_NE(description.find("on " + std::to_string(threads) + " threads"), std::string::npos)
          << description;
      EXPECT_GT(tail_threads, tail_threads_alone)
          << "tail segments in channel groups: " << description;
    }
    std::vector<float> y = run_random_calls(*engine, first, block, seed);
    engine->set_filters(FilterBank::per_channel(next_filters), true);
    // The swap lands at the same frame in every run: the bank is ready
    // before the next call.
    ASSERT_TRUE(prepared_within(*engine, std::chrono::seconds(60)));
    const std::vector<float> rest = run_random_calls(*engine, second, block, seed + 1);
    std::vector<float> whole(channels * n);
    for (std::size_t c = 0; c < channels; ++c) {
      std::copy_n(y.begin() + std::ptrdiff_t(c * cut), cut, whole.begin() + std::ptrdiff_t(c * n));
      std::copy_n(rest.begin() + std::ptrdiff_t(c * (n - cut)), n - cut,
                  whole.begin() + std::ptrdiff_t(c * n + cut));
    }
    outputs.push_back(std::move(whole));
  }
  for (const std::size_t c : {std::size_t(0), channels / 2, channels - 1}) {
    const auto want = reference_convolution(first[c], filters[c]);
    EXPECT_LE(relative_error(std::span<const float>(outputs[0].data() + c * n, cut), want), 1e-5)
        << "channel " << c;
  }
  EXPECT_EQ(outputs[0], outputs[1]) << "2 head threads";
  EXPECT_EQ(outputs[0], outputs[2]) << "3 head threads";
}

TEST(CpuNonUniformEngine, AFewChannelsKeepTheHeadOnTheCaller) {
  // Waking threads for a few channels' head costs more than it saves: by
  // default, and even where threads are allowed, the head stays on the
  // caller (the description names no head threads).
  const auto few =
      nonuniform_on_threads(FilterBank::shared(random_signal(65536, 3), 8), 64, 65536, 0);
  EXPECT_EQ(few->description().find(" threads, tails"), std::string::npos) << few->description();
  const auto forced =
      nonuniform_on_threads(FilterBank::shared(random_signal(65536, 3), 8), 64, 65536, 2);
  EXPECT_EQ(forced->description().find(" threads, tails"), std::string::npos)
      << "8 channels are too few to split even when threads are allowed: " << forced->description();
}

}  // namespace
}  // namespace tapstream

namespace tapstream {
namespace {

// process_by() with the deadline given by `deadline_for(call, late calls so far)`, calls of
// random sizes 1..block, planar: each call's output must be the reference's
// (true) or silence (false: late); returns the late calls and checks that the
// last `exact_tail` frames were on time and exact.
struct DeadlineRun {
  std::size_t late_calls = 0;
  std::size_t calls = 0;
  std::size_t longest_late_run = 0;  // consecutive late calls (an overload makes long ones)
};

template <typename DeadlineFor>
DeadlineRun run_with_deadlines(Engine& engine, const std::vector<std::vector<float>>& x,
                               const std::vector<std::vector<double>>& want, std::size_t block,
                               std::uint64_t seed, DeadlineFor deadline_for, std::size_t exact_tail,
                               std::size_t min_call = 1) {
  RealtimeEngine* rt = engine.realtime();
  EXPECT_NE(rt, nullptr);
  DeadlineRun result;
  if (rt == nullptr) return result;
  const std::size_t channels = x.size(), n = x[0].size();
  std::vector<float> in(channels * block), out(channels * block);
  std::mt19937_64 rng(seed);
  std::size_t late_run = 0;
  for (std::size_t done = 0; done < n;) {
    const std::size_t frames =
        std::min(n - done, min_call + std::size_t(rng() % (block - min_call + 1)));
    for (std::size_t c = 0; c < channels; ++c)
      std::copy_n(x[c].begin() + std::ptrdiff_t(done), frames,
                  in.begin() + std::ptrdiff_t(c * frames));
    const bool on_time = rt->process_by(in, out, frames, Layout::planar,
                                        deadline_for(result.calls, result.late_calls));
    ++result.calls;
    late_run = on_time ? 0 : late_run + 1;
    result.longest_late_run = std::max(result.longest_late_run, late_run);
    if (!on_time) ++result.late_calls;
    for (std::size_t c = 0; c < channels; ++c) {
      for (std::size_t f = 0; f < frames; ++f) {
        const float y = out[c * frames + f];
        if (on_time) {
          if (std::abs(double(y) - want[c][done + f]) > 1e-3) {
            ADD_FAILURE() << "call at frame " << done << " on time but wrong, channel " << c;
            return result;
          }
        } else if (y != 0.0f) {
          ADD_FAILURE() << "late call at frame " << done << " is not silence";
          return result;
        }
      }
    }
    if (done + frames > n - exact_tail && !on_time) {
      ADD_FAILURE() << "call at frame " << done << " late in the last " << exact_tail << " frames";
      return result;
    }
    done += frames;
  }
  return result;
}

TEST(CpuNonUniformEngine, ProcessByInTimeMatchesFloat64) {
  const std::size_t taps = 6000, n = 24000, channels = 2, block = 64;
  const std::uint64_t seed = 77;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::vector<std::vector<float>> filters, x;
  std::vector<std::vector<double>> want;
  for (std::size_t c = 0; c < channels; ++c) {
    filters.push_back(random_signal(taps - 11 * c, seed + c));
    x.push_back(random_signal(n, seed + 10 + c));
    want.push_back(reference_convolution(x[c], filters[c]));
  }
  auto engine = nonuniform(FilterBank::per_channel(filters), block, taps);
  const DeadlineRun run = run_with_deadlines(
      *engine, x, want, block, seed,
      [](std::size_t, std::size_t) { return monotonic_after(std::chrono::seconds(30)); }, n);
  EXPECT_EQ(run.late_calls, 0u);
}

TEST(CpuNonUniformEngine, LateCallsPlaySilenceAndLaterCallsStayExact) {
  // Deadlines already past for the first 300 calls: a call whose tail job is
  // not done when it needs it is late (silence); the job still finishes,
  // and the calls after (generous deadlines) are exact. A call is late for
  // sure: the caller runs pinned beside the workers at a real-time priority
  // above theirs and calls back to back, so no worker runs, and the first
  // call that needs a tail job finds it not done. From then on the caller
  // idles between calls, as a device's callback does, so the workers catch
  // up: late calls, not an overload (that is the next test).
  const std::size_t taps = 6000, n = 72000, channels = 4, block = 64;
  const std::uint64_t seed = 78;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::vector<std::vector<float>> x;
  std::vector<std::vector<double>> want;
  const auto h = random_signal(taps, seed);
  for (std::size_t c = 0; c < channels; ++c) {
    x.push_back(random_signal(n, seed + 10 + c));
    want.push_back(reference_convolution(x[c], h));
  }
  std::unique_ptr<Engine> engine;
  DeadlineRun run;
  bool realtime = false;
  {
    const PinnedRealtimeCaller caller;
    ASSERT_TRUE(caller.pinned);
    realtime = caller.realtime;
    engine = nonuniform(FilterBank::shared(h, channels), block, taps);  // workers inherit
    run = run_with_deadlines(
        *engine, x, want, block, seed,
        [](std::size_t call, std::size_t late) {
          if (call >= 300) return monotonic_after(std::chrono::seconds(30));
          // Not a wait for a condition: once a call was late, a device's
          // pace, the caller idling between periods so that the workers run.
          if (late > 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
          return monotonic_after(std::chrono::nanoseconds(0));
        },
        8000);
    engine.reset();  // its workers first
  }
  std::printf("%zu of %zu calls late, longest run %zu\n", run.late_calls, run.calls,
              run.longest_late_run);
  if (!realtime) {
    GTEST_SKIP() << "no SCHED_FIFO: no call is sure to be late (silence and exactness were "
                    "checked for the calls that were)";
  }
  EXPECT_GT(run.late_calls, 0u) << "no call was late";
  // An overload's silence lasts its recovery, over 200 calls here.
  EXPECT_LT(run.longest_late_run, 50u) << "late calls, not an overload";
}

TEST(CpuNonUniformEngine, AnOverloadPlaysSilenceUntilTheTailsAreWholeThenExact) {
  // 65536 taps called back to back with deadlines already past, caller and
  // workers on one core, the caller at SCHED_FIFO above them (the engine puts
  // its workers below a real-time caller): the caller never waits, so the
  // workers do not run and their buffers would overflow; the engine then
  // stops feeding them and plays silence. From call 300 on, the calls come at
  // a device's pace with generous deadlines: the workers drain, the engine
  // resumes, plays silence until its state holds only new input, and is
  // exact from then on. A sparse filter keeps the float64 reference cheap
  // (the engine's work does not depend on sparsity).
#if defined(__SANITIZE_THREAD__)
  const std::size_t channels = 1;  // ten times slower: keep the pace feasible
#else
  const std::size_t channels = 8;
#endif
  const std::size_t taps = 65536, block = 64, n = 2800 * block;
  const std::uint64_t seed = 80;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::vector<float> h(taps, 0.0f);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 24; ++i) h[rng() % taps] = float(int(rng() % 2001) - 1000) / 1000.0f;
  h[0] = 1.0f;
  h[taps - 1] = 0.5f;
  std::vector<std::vector<float>> x;
  std::vector<std::vector<double>> want;
  for (std::size_t c = 0; c < channels; ++c) {
    x.push_back(random_signal(n, seed + 10 + c));
    std::vector<double> y(n, 0.0);
    for (std::size_t t = 0; t < taps; ++t) {
      if (h[t] == 0.0f) continue;
      for (std::size_t f = t; f < n; ++f) y[f] += double(h[t]) * double(x[c][f - t]);
    }
    want.push_back(std::move(y));
  }
  std::unique_ptr<Engine> engine;
  DeadlineRun run;
  bool realtime = false;
  {
    const PinnedRealtimeCaller caller;
    ASSERT_TRUE(caller.pinned);
    realtime = caller.realtime;
    engine = nonuniform(FilterBank::shared(h, channels), block, taps);  // workers inherit
    run = run_with_deadlines(
        *engine, x, want, block, seed,
        [&](std::size_t call, std::size_t) {
          if (call < 300) return monotonic_after(std::chrono::nanoseconds(0));
          // Not a wait for a condition: a device's pace, the caller idling
          // between periods (on this one core, a caller that never idled
          // would starve the workers).
          std::this_thread::sleep_for(std::chrono::microseconds(300));
          return monotonic_after(std::chrono::seconds(30));
        },
        16 * block, block);
    engine.reset();  // its workers first
  }
  std::printf("%zu of %zu calls late, longest run %zu\n", run.late_calls, run.calls,
              run.longest_late_run);
  // An overload is silence from its start to the end of its recovery, more
  // than the filter's length (1024 calls of 64 frames).
  if (realtime) {
    EXPECT_GE(run.longest_late_run, 1024u) << "no overload happened";
  }
}

TEST(CpuNonUniformEngine, BanksPostedFromAnotherThreadCrossfadeWhileCallsRun) {
  // The swap thread of the live pipeline: post_filters() on one thread while
  // process_by() runs on another; every call is the playing bank, or the
  // crossfade to the posted one, and each posted bank takes over once.
  const std::size_t taps = 5000, n = 60000, block = 64;
  const std::uint64_t seed = 79;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const auto x = random_signal(n, seed);
  std::vector<std::vector<float>> filters;
  for (int i = 0; i < 3; ++i) filters.push_back(random_signal(taps - 100 * i, seed + 1 + i));
  std::vector<std::vector<double>> refs;
  for (const auto& h : filters) refs.push_back(reference_convolution(x, h));
  auto engine = nonuniform(FilterBank::shared(filters[0], 1), block, taps);
  RealtimeEngine* rt = engine->realtime();
  ASSERT_NE(rt, nullptr);

  std::atomic<int> request{-1};  // bank index for the poster, -1: none
  std::atomic<bool> posted{false}, stop{false};
  std::thread poster([&] {
    while (!stop.load()) {
      const int wanted = request.exchange(-1);
      if (wanted < 0) {
        // Polling for a request (the swap thread's own wait, not the test's).
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      rt->post_filters(FilterBank::shared(filters[std::size_t(wanted)], 1), true);
      posted.store(true);
    }
  });
  std::vector<float> y(block);
  std::size_t playing = 0, requested = 0, fades = 0, swaps = 0;
  std::size_t next_swap = 3000;
  bool waiting_for_fade = false;
  for (std::size_t done = 0; done < n;) {
    if (!waiting_for_fade && done >= next_swap && done + 2 * taps < n) {
      requested = (requested + 1) % filters.size();
      posted.store(false);
      request.store(int(requested));
      ++swaps;
      waiting_for_fade = true;
    }
    // Calls run while the bank is posted and prepared; past 512 frames of
    // them, wait for the preparer, so that the swap lands in this run.
    if (waiting_for_fade && done >= next_swap + 512) {
      ASSERT_TRUE(testing::wait_until(
          std::chrono::seconds(60), [&] { return posted.load(); }, "the bank posted",
          std::chrono::microseconds(100)));
      ASSERT_TRUE(prepared_within(*engine, std::chrono::seconds(60)));
    }
    const std::size_t frames = std::min(n - done, std::size_t(64));
    const timespec deadline = monotonic_after(std::chrono::seconds(30));
    ASSERT_TRUE(rt->process_by(std::span<const float>(x.data() + done, frames), y, frames,
                               Layout::planar, deadline));
    const auto& old = refs[playing];
    const auto near = [&](std::size_t f, double v) { return std::abs(double(y[f]) - v) <= 1e-3; };
    bool same = true;
    for (std::size_t f = 0; f < frames; ++f) same = same && near(f, old[done + f]);
    if (!same) {
      ASSERT_TRUE(waiting_for_fade) << "output left bank " << playing << " at frame " << done;
      const auto& now = refs[requested];
      for (std::size_t f = 0; f < frames; ++f) {
        const double w = double(f + 1) / double(frames);
        ASSERT_TRUE(near(f, old[done + f] + w * (now[done + f] - old[done + f])))
            << "call at frame " << done << " is neither bank " << playing
            << " nor a crossfade to bank " << requested;
      }
      playing = requested;
      ++fades;
      waiting_for_fade = false;
      next_swap = done + 9000;
    }
    ASSERT_LT(done, next_swap + 512 + 3 * taps) << "the swap did not take effect";
    done += frames;
  }
  stop.store(true);
  poster.join();
  EXPECT_EQ(fades, swaps);
  EXPECT_GE(swaps, 4u);
}

// Threads started while it lives run on one CPU (B), where a real-time hog
// takes the CPU for 3 ms of every 4 until stop(): a thread there is stopped
// for milliseconds wherever it is, in the middle of its work too. The test's
// own thread moves to another CPU (A) once the threads are started.
class StarvedThreadsCpu {
 public:
  StarvedThreadsCpu() {
    sched_getaffinity(0, sizeof(all_), &all_);
    int found = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && found < 2; ++cpu) {
      if (CPU_ISSET(cpu, &all_)) (found++ == 0 ? cpu_a_ : cpu_b_) = cpu;
    }
    usable = found == 2 && pin(cpu_b_);
  }
  ~StarvedThreadsCpu() {
    stop();
    sched_setaffinity(0, sizeof(all_), &all_);
  }
  StarvedThreadsCpu(const StarvedThreadsCpu&) = delete;
  StarvedThreadsCpu& operator=(const StarvedThreadsCpu&) = delete;

  // After the threads to starve were started: the caller to CPU A, the hog on B.
  void start() {
    pin(cpu_a_);
    std::atomic<int> fifo{-1};
    hog_ = std::thread([this, &fifo] {
      pin(cpu_b_);
      sched_param param{};
      param.sched_priority = 50;
      fifo.store(sched_setscheduler(0, SCHED_FIFO, &param) == 0 ? 1 : 0);
      while (!stop_.load()) {
        // The load pattern, not a wait: busy 3 ms, then 1 ms for the
        // starved threads to run (and be caught mid-work when it comes back).
        const auto busy_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(3);
        while (std::chrono::steady_clock::now() < busy_until && !stop_.load()) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    while (fifo.load() < 0) std::this_thread::yield();
    realtime = fifo.load() == 1;
    if (!realtime) std::printf("SCHED_FIFO refused: the hog only shares CPU B\n");
  }
  void stop() {
    stop_.store(true);
    if (hog_.joinable()) hog_.join();
  }

  bool usable = false;    // two CPUs, and this thread could move
  bool realtime = false;  // the hog preempts the threads on B

 private:
  static bool pin(int cpu) {
    cpu_set_t one{};
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return sched_setaffinity(0, sizeof(one), &one) == 0;
  }

  cpu_set_t all_{};
  int cpu_a_ = 0, cpu_b_ = 0;
  std::atomic<bool> stop_{false};
  std::thread hog_;
};

TEST(CpuNonUniformEngine, HeadThreadsLateAtTheDeadlinePlaySilenceAndLaterCallsStayExact) {
  // The head spread over 3 threads, all the engine's threads on a CPU that a
  // real-time hog takes for 3 ms of every 4 (so a head thread is stopped in
  // the middle of its channels, for longer than a call), deadlines already
  // past for the first 200 calls, called back to back: the caller gives up
  // on a head thread still in its channels when its own share is done (the
  // call is late, the job stays in flight), and a call that finds it still
  // busy cannot feed the head (an overload). Every call must be exact or
  // silence, and once the hog stops and calls come at a device's pace with
  // generous deadlines, the engine recovers and is exact. Large calls make
  // long tasks; a sparse filter keeps the float64 reference cheap.
  const std::size_t channels = 31, taps = 16384, block = 1024, n = 200000;
  const std::uint64_t seed = 91;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::vector<float> h(taps, 0.0f);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 24; ++i) h[rng() % taps] = float(int(rng() % 2001) - 1000) / 1000.0f;
  h[0] = 1.0f;
  h[taps - 1] = 0.5f;
  std::vector<std::vector<float>> x;
  std::vector<std::vector<double>> want;
  for (std::size_t c = 0; c < channels; ++c) {
    x.push_back(random_signal(n, seed + 10 + c));
    std::vector<double> y(n, 0.0);
    for (std::size_t t = 0; t < taps; ++t) {
      if (h[t] == 0.0f) continue;
      for (std::size_t f = t; f < n; ++f) y[f] += double(h[t]) * double(x[c][f - t]);
    }
    want.push_back(std::move(y));
  }
  // A run in which the hog starved nothing (another suite's real-time
  // threads beside it on a loaded machine can take its CPU time) tests
  // nothing late: it is run again, on a fresh engine, up to three times.
  bool realtime = false;
  DeadlineRun run;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    StarvedThreadsCpu cpu;
    if (!cpu.usable) GTEST_SKIP() << "needs two CPUs it may move threads between";
    auto engine = nonuniform_on_threads(FilterBank::shared(h, channels), block, taps, 3);
    ASSERT_NE(engine->description().find("on 3 threads"), std::string::npos)
        << engine->description();
    cpu.start();
    run = run_with_deadlines(
        *engine, x, want, block, seed,
        [&](std::size_t call, std::size_t) {
          if (call < 200) return monotonic_after(std::chrono::nanoseconds(0));
          cpu.stop();
          // Not a wait for a condition: a device's pace, the caller idling
          // between periods.
          std::this_thread::sleep_for(std::chrono::microseconds(500));
          return monotonic_after(std::chrono::seconds(30));
        },
        8192);
    realtime = cpu.realtime;
    std::printf("attempt %d: %zu of %zu calls late, longest run %zu\n", attempt, run.late_calls,
                run.calls, run.longest_late_run);
    if (!realtime || run.late_calls > 0 || HasFailure()) break;
  }
  if (realtime) {
    EXPECT_GT(run.late_calls, 0u) << "no call was late in three runs";
  }
}

}  // namespace
}  // namespace tapstream

// Exactness and streaming behaviour of the CPU engine against a float64
// reference of the whole-signal convolution (tests/reference.hpp).
//
// The shared reference is O(N M) with a serial sum; long filters (65536 taps)
// would take minutes with it, so those cases use fast_reference below, the
// same float64 sum reordered so that it vectorises, which is itself checked
// against the shared reference first (FastReferenceEqualsTheSharedReference).

#include "dsp/cpu/cpu_engine.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dsp/cpu/cpu_simd.hpp"
#include "dsp/cpu/cpu_worker_pool.hpp"
#include "dsp/cpu/fftw_plan.hpp"
#include "dsp/realtime/deadline_counter.hpp"
#include "tests/reference.hpp"
#include "tests/wait_for.hpp"

namespace tapstream {
namespace {

using testing::random_signal;
using testing::reference_convolution;
using testing::relative_error;

constexpr double kTolerance = 1e-5;

// Same values as reference_convolution (float64), summed tap-major so that the
// inner loop runs across outputs and vectorises; blocks of outputs stay in L1.
// No clones under ThreadSanitizer: their ifunc resolver runs before its runtime.
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define TAPSTREAM_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TAPSTREAM_VECTOR_CLONES
#endif
TAPSTREAM_VECTOR_CLONES std::vector<double> fast_reference(std::span<const float> x,
                                                           std::span<const float> h) {
  const std::size_t n = x.size(), m = h.size();
  std::vector<double> xd(x.begin(), x.end()), y(n, 0.0);
  constexpr std::size_t kBlock = 2048;
  for (std::size_t b = 0; b < n; b += kBlock) {
    const std::size_t e = std::min(n, b + kBlock);
    double* yb = y.data();
    for (std::size_t k = 0; k < m && k < e; ++k) {
      const double hk = h[k];
      const double* xk = xd.data() - k;
      for (std::size_t i = std::max(b, k); i < e; ++i) yb[i] += hk * xk[i];
    }
  }
  return y;
}

std::uint64_t announce(const char* what, std::uint64_t seed) {
  std::printf("[ seed     ] %s: %llu\n", what, static_cast<unsigned long long>(seed));
  return seed;
}

// Block sizes for a stream of `frames` frames: all max_block, or random in
// 1..max_block (varying within the stream).
std::vector<std::size_t> block_sizes(std::size_t frames, std::size_t max_block, bool vary,
                                     std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> dist(1, max_block);
  std::vector<std::size_t> sizes;
  for (std::size_t done = 0; done < frames;) {
    const std::size_t n = std::min(frames - done, vary ? dist(rng) : max_block);
    sizes.push_back(n);
    done += n;
  }
  return sizes;
}

// Runs `signals` (one per channel) through the engine in the given blocks and
// layout; returns one output per channel.
std::vector<std::vector<float>> run(Engine& engine, const std::vector<std::vector<float>>& signals,
                                    const std::vector<std::size_t>& sizes, Layout layout) {
  const std::size_t channels = signals.size();
  std::vector<std::vector<float>> outputs(channels, std::vector<float>(signals[0].size()));
  std::vector<float> in, out;
  std::size_t start = 0;
  for (const std::size_t frames : sizes) {
    in.assign(frames * channels, 0.0f);
    out.assign(frames * channels, 0.0f);
    for (std::size_t c = 0; c < channels; ++c) {
      for (std::size_t f = 0; f < frames; ++f) {
        const float v = signals[c][start + f];
        if (layout == Layout::planar) {
          in[c * frames + f] = v;
        } else {
          in[f * channels + c] = v;
        }
      }
    }
    engine.process(in, out, frames, layout);
    for (std::size_t c = 0; c < channels; ++c) {
      for (std::size_t f = 0; f < frames; ++f) {
        outputs[c][start + f] =
            layout == Layout::planar ? out[c * frames + f] : out[f * channels + c];
      }
    }
    start += frames;
  }
  return outputs;
}

std::vector<std::vector<float>> signals_for(std::size_t channels, std::size_t frames,
                                            std::uint64_t seed) {
  std::vector<std::vector<float>> s;
  for (std::size_t c = 0; c < channels; ++c) s.push_back(random_signal(frames, seed + 1000 * c));
  return s;
}

struct Case {
  std::size_t channels = 2;
  std::vector<std::size_t> taps;  // one entry: shared filter; else one per channel
  std::size_t max_block = 256;
  bool vary = true;
  Algorithm algorithm = Algorithm::automatic;
  Layout layout = Layout::planar;
  std::size_t frames = 0;  // 0: three times the longest filter plus a few blocks
  std::uint64_t seed = 1;
};

std::string describe(const Case& c) {
  std::string taps;
  for (auto t : c.taps) taps += std::to_string(t) + " ";
  const char* alg = c.algorithm == Algorithm::direct ? "direct"
                    : c.algorithm == Algorithm::fft  ? "fft"
                                                     : "auto";
  return "channels " + std::to_string(c.channels) + ", taps " + taps + "max_block " +
         std::to_string(c.max_block) + (c.vary ? " (varying)" : " (fixed)") + ", " + alg +
         (c.layout == Layout::planar ? ", planar" : ", interleaved") + ", seed " +
         std::to_string(c.seed);
}

FilterBank bank_for(const Case& c, std::uint64_t seed) {
  if (c.taps.size() == 1) {
    return FilterBank::shared(random_signal(c.taps[0], seed), c.channels);
  }
  std::vector<std::vector<float>> filters;
  for (std::size_t i = 0; i < c.taps.size(); ++i) {
    filters.push_back(random_signal(c.taps[i], seed + 7 * i + 1));
  }
  return FilterBank::per_channel(std::move(filters));
}

// Checks one case against the float64 reference; returns the worst error.
double check_case(const Case& c) {
  announce(describe(c).c_str(), c.seed);
  const FilterBank bank = bank_for(c, c.seed + 500);
  const std::size_t frames = c.frames ? c.frames : 3 * bank.max_taps() + 2 * c.max_block + 17;
  const auto signals = signals_for(c.channels, frames, c.seed);
  EngineOptions options;
  options.max_block_frames = c.max_block;
  options.algorithm = c.algorithm;
  auto engine = make_cpu_engine(bank, options);
  const auto outputs =
      run(*engine, signals, block_sizes(frames, c.max_block, c.vary, c.seed + 3), c.layout);
  double worst = 0.0;
  for (std::size_t ch = 0; ch < c.channels; ++ch) {
    const auto want = fast_reference(signals[ch], bank.taps(ch));
    const double err = relative_error(outputs[ch], want);
    EXPECT_LE(err, kTolerance) << describe(c) << ", channel " << ch << ", "
                               << engine->description();
    worst = std::max(worst, err);
  }
  return worst;
}

TEST(CpuEngine, FastReferenceEqualsTheSharedReference) {
  for (std::size_t taps : {1, 2, 31, 200, 1500}) {
    const auto seed = announce("fast reference", 40 + taps);
    const auto x = random_signal(3000, seed);
    const auto h = random_signal(taps, seed + 1);
    const auto slow = reference_convolution(x, h);
    const auto fast = fast_reference(x, h);
    double num = 0.0, den = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      num += (slow[i] - fast[i]) * (slow[i] - fast[i]);
      den += slow[i] * slow[i];
    }
    EXPECT_LE(std::sqrt(num / den), 1e-12) << taps << " taps";
  }
}

TEST(CpuEngine, DirectFormMatchesReferenceForShortFilters) {
  std::uint64_t seed = 100;
  for (std::size_t taps : {1, 2, 3, 16, 63, 64, 65, 200}) {
    for (std::size_t max_block : {1, 7, 64, 1000}) {
      Case c;
      c.taps = {taps};
      c.max_block = max_block;
      c.algorithm = Algorithm::direct;
      c.seed = ++seed;
      check_case(c);
    }
  }
}

TEST(CpuEngine, FftMatchesReferenceForAnyFilterAndBlockSize) {
  std::uint64_t seed = 200;
  for (std::size_t taps : {1, 5, 100, 1024, 1025, 5000}) {
    for (std::size_t max_block : {1, 13, 256, 3000, 65536}) {
      Case c;
      c.taps = {taps};
      c.max_block = max_block;
      c.algorithm = Algorithm::fft;
      c.seed = ++seed;
      c.frames = std::min<std::size_t>(3 * taps + 2 * max_block + 17, 20000);
      if (max_block == 1) c.frames = std::min<std::size_t>(c.frames, 6000);
      check_case(c);
    }
  }
}

TEST(CpuEngine, LongestFiltersMatchReference) {
  // 65536 taps over a signal 1.3 times as long (every partition of the delay
  // line in use), one reference shared by several block patterns: whole
  // blocks, varying blocks up to 65536, and small varying calls.
  const auto seed = announce("65536 taps", 300);
  const std::size_t taps = 65536, frames = taps + 20000;
  const auto signals = signals_for(1, frames, seed);
  const FilterBank bank = FilterBank::shared(random_signal(taps, seed + 1), 1);
  const auto want = fast_reference(signals[0], bank.taps(0));
  struct Pattern {
    std::size_t max_block;
    bool vary;
    Algorithm algorithm;
  };
  for (const Pattern& p :
       {Pattern{65536, false, Algorithm::automatic}, Pattern{65536, true, Algorithm::fft},
        Pattern{4096, true, Algorithm::automatic}, Pattern{100, true, Algorithm::automatic}}) {
    EngineOptions options;
    options.max_block_frames = p.max_block;
    options.algorithm = p.algorithm;
    auto engine = make_cpu_engine(bank, options);
    const auto out =
        run(*engine, signals, block_sizes(frames, p.max_block, p.vary, seed + 2), Layout::planar);
    EXPECT_LE(relative_error(out[0], want), kTolerance)
        << engine->description() << ", max_block " << p.max_block
        << (p.vary ? " varying" : " fixed");
  }
}

TEST(CpuEngine, PerChannelFiltersAndLayoutsMatchReference) {
  std::uint64_t seed = 400;
  for (Algorithm algorithm : {Algorithm::direct, Algorithm::fft, Algorithm::automatic}) {
    for (Layout layout : {Layout::planar, Layout::interleaved}) {
      Case c;
      c.channels = 3;
      c.taps = algorithm == Algorithm::direct ? std::vector<std::size_t>{5, 130, 1}
                                              : std::vector<std::size_t>{700, 3, 2100};
      c.max_block = 500;
      c.algorithm = algorithm;
      c.layout = layout;
      c.seed = ++seed;
      check_case(c);
    }
  }
}

TEST(CpuEngine, AutomaticChoiceMatchesReference) {
  // One signal and reference per filter length, shared by the block sizes.
  std::uint64_t seed = 500;
  for (std::size_t taps : {8, 64, 256, 1024, 16384}) {
    announce(("automatic choice, " + std::to_string(taps) + " taps").c_str(), ++seed);
    const std::size_t frames = std::min<std::size_t>(3 * taps + 2 * 16384, 40000);
    const auto signals = signals_for(2, frames, seed);
    const FilterBank bank = FilterBank::shared(random_signal(taps, seed + 1), 2);
    const auto want = fast_reference(signals[1], bank.taps(1));
    for (std::size_t max_block : {32, 1024, 16384}) {
      EngineOptions options;
      options.max_block_frames = max_block;
      auto engine = make_cpu_engine(bank, options);
      const auto out = run(*engine, signals, block_sizes(frames, max_block, true, seed + max_block),
                           Layout::interleaved);
      EXPECT_LE(relative_error(out[1], want), kTolerance)
          << engine->description() << ", max_block " << max_block;
    }
  }
}

TEST(CpuEngine, OutputDoesNotDependOnBlockSize) {
  const auto seed = announce("block-size independence", 600);
  const std::size_t frames = 12000;
  const auto signals = signals_for(2, frames, seed);
  const FilterBank bank =
      FilterBank::per_channel({random_signal(3000, seed + 1), random_signal(2500, seed + 2)});
  std::vector<std::vector<std::vector<float>>> results;
  std::vector<std::string> labels;
  for (Algorithm algorithm : {Algorithm::direct, Algorithm::fft}) {
    for (std::size_t max_block : {1, 10, 333, 4096, 65536}) {
      for (bool vary : {false, true}) {
        if (algorithm == Algorithm::direct && max_block == 1 && vary) continue;
        EngineOptions options;
        options.max_block_frames = max_block;
        options.algorithm = algorithm;
        auto engine = make_cpu_engine(bank, options);
        results.push_back(run(*engine, signals,
                              block_sizes(frames, max_block, vary, seed + max_block),
                              Layout::interleaved));
        labels.push_back(engine->description() + ", max_block " + std::to_string(max_block) +
                         (vary ? " varying" : " fixed"));
      }
    }
  }
  for (std::size_t i = 1; i < results.size(); ++i) {
    for (std::size_t ch = 0; ch < 2; ++ch) {
      EXPECT_LE(relative_error(results[i][ch], results[0][ch]), kTolerance)
          << labels[i] << " vs " << labels[0] << ", channel " << ch;
    }
  }
}

// Runs a stream, swapping filters before block `swap_block`, and checks the
// crossfade block against the blend of the two references and every later
// block against the new filter over the whole history.
void check_swap(Algorithm algorithm, std::size_t old_taps, std::size_t new_taps, bool crossfade,
                bool new_per_channel, std::uint64_t seed) {
  announce(("swap " + std::to_string(old_taps) + " -> " + std::to_string(new_taps) +
            (crossfade ? " crossfade" : " cut"))
               .c_str(),
           seed);
  const std::size_t channels = 2, frames = 3 * std::max(old_taps, new_taps) + 3000;
  const auto signals = signals_for(channels, frames, seed);
  const FilterBank old_bank = FilterBank::shared(random_signal(old_taps, seed + 1), channels);
  const FilterBank new_bank =
      new_per_channel ? FilterBank::per_channel({random_signal(new_taps, seed + 2),
                                                 random_signal(new_taps / 2 + 1, seed + 3)})
                      : FilterBank::shared(random_signal(new_taps, seed + 2), channels);
  EngineOptions options;
  options.max_block_frames = 700;
  options.max_taps = std::max(old_taps, new_taps);
  options.algorithm = algorithm;
  auto engine = make_cpu_engine(old_bank, options);
  auto sizes = block_sizes(frames, options.max_block_frames, true, seed + 4);
  const std::size_t swap_block = sizes.size() / 2;
  std::size_t swap_start = 0;
  for (std::size_t b = 0; b < swap_block; ++b) swap_start += sizes[b];
  const std::size_t fade = sizes[swap_block];

  const std::vector<std::size_t> before(sizes.begin(), sizes.begin() + swap_block);
  const std::vector<std::size_t> after(sizes.begin() + swap_block, sizes.end());
  std::vector<std::vector<float>> head(channels), tail(channels);
  for (std::size_t c = 0; c < channels; ++c) {
    head[c].assign(signals[c].begin(), signals[c].begin() + swap_start);
    tail[c].assign(signals[c].begin() + swap_start, signals[c].end());
  }
  run(*engine, head, before, Layout::planar);
  engine->set_filters(new_bank, crossfade);
  const auto out = run(*engine, tail, after, Layout::planar);

  for (std::size_t c = 0; c < channels; ++c) {
    const auto want_old = fast_reference(signals[c], old_bank.taps(c));
    const auto want_new = fast_reference(signals[c], new_bank.taps(c));
    std::vector<double> want_fade(fade);
    for (std::size_t i = 0; i < fade; ++i) {
      const double w = crossfade ? double(i + 1) / double(fade) : 1.0;
      const double o = want_old[swap_start + i], n = want_new[swap_start + i];
      want_fade[i] = o + w * (n - o);
    }
    EXPECT_LE(relative_error(std::span<const float>(out[c]).first(fade), want_fade), kTolerance)
        << "crossfade block of " << fade << " frames, channel " << c;
    EXPECT_LE(relative_error(std::span<const float>(out[c]).subspan(fade),
                             std::span<const double>(want_new).subspan(swap_start + fade)),
              kTolerance)
        << "blocks after the swap, channel " << c;
  }
}

TEST(CpuEngine, SetFiltersCrossfadesFromOldToNewOutput) {
  std::uint64_t seed = 700;
  for (Algorithm algorithm : {Algorithm::direct, Algorithm::fft}) {
    const std::size_t big = algorithm == Algorithm::direct ? 150 : 3000;
    check_swap(algorithm, big, big / 3, true, false, ++seed);
    check_swap(algorithm, big / 3, big, true, true, ++seed);
    check_swap(algorithm, big, big, false, true, ++seed);
  }
}

TEST(CpuEngine, SetFiltersRejectsBadBanksAndKeepsFiltering) {
  const auto seed = announce("bad banks", 800);
  const FilterBank bank = FilterBank::shared(random_signal(100, seed), 2);
  for (Algorithm algorithm : {Algorithm::direct, Algorithm::fft}) {
    EngineOptions options;
    options.max_block_frames = 64;
    options.algorithm = algorithm;
    auto engine = make_cpu_engine(bank, options);
    try {
      engine->set_filters(FilterBank::shared(random_signal(101, seed), 2), true);
      ADD_FAILURE() << "a longer filter was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("101 taps"), std::string::npos) << e.what();
    }
    try {
      engine->set_filters(FilterBank::shared(random_signal(10, seed), 3), false);
      ADD_FAILURE() << "a bank with the wrong channel count was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("3 channels"), std::string::npos) << e.what();
    }
    // The rejected banks changed nothing: the stream still matches the old filter.
    const auto signals = signals_for(2, 1000, seed);
    const auto out = run(*engine, signals, block_sizes(1000, 64, true, seed), Layout::planar);
    EXPECT_LE(relative_error(out[0], fast_reference(signals[0], bank.taps(0))), kTolerance);
  }
  EngineOptions options;
  options.max_taps = 50;
  EXPECT_THROW(make_cpu_engine(bank, options), std::invalid_argument);
  options.max_taps = 0;
  options.max_block_frames = 0;
  EXPECT_THROW(make_cpu_engine(bank, options), std::invalid_argument);
}

TEST(CpuEngine, ProcessRejectsBadBlocks) {
  const FilterBank bank = FilterBank::shared(random_signal(10, 1), 2);
  EngineOptions options;
  options.max_block_frames = 16;
  auto engine = make_cpu_engine(bank, options);
  std::vector<float> in(64), out(64);
  EXPECT_THROW(engine->process(in, out, 0, Layout::planar), std::invalid_argument);
  EXPECT_THROW(engine->process(in, out, 17, Layout::planar), std::invalid_argument);
  EXPECT_THROW(engine->process(std::span<const float>(in).first(10), out, 8, Layout::planar),
               std::invalid_argument);
}

TEST(CpuEngine, ResetStartsTheStreamAgain) {
  const auto seed = announce("reset", 900);
  for (Algorithm algorithm : {Algorithm::direct, Algorithm::fft}) {
    const FilterBank bank = FilterBank::shared(random_signal(300, seed), 2);
    EngineOptions options;
    options.max_block_frames = 128;
    options.algorithm = algorithm;
    auto engine = make_cpu_engine(bank, options);
    const auto first = signals_for(2, 777, seed + 1);
    run(*engine, first, block_sizes(777, 128, true, seed), Layout::interleaved);
    engine->reset();
    const auto second = signals_for(2, 2000, seed + 2);
    const auto out =
        run(*engine, second, block_sizes(2000, 128, true, seed + 3), Layout::interleaved);
    for (std::size_t c = 0; c < 2; ++c) {
      EXPECT_LE(relative_error(out[c], fast_reference(second[c], bank.taps(c))), kTolerance)
          << engine->description();
    }
  }
}

TEST(CpuEngine, MeasuredFftPlansMatchEstimatedOnes) {
  // A measured plan is run on arrays other than those it was planned on (as the
  // engine does), which FFTW allows only for arrays aligned like the planned ones.
  // Test executables estimate their plans (tests/estimated_fft_plans.cpp).
  const fftw::PlannerOptions estimating = fftw::planner_options();
  ASSERT_FALSE(estimating.measure);
  const auto wisdom = std::filesystem::temp_directory_path() /
                      ("cpu_engine_test_wisdom." + std::to_string(::getpid()));
  const auto seed = announce("measured plans", 1000);
  for (std::size_t n : {64, 2048}) {
    fftw::set_planner_options({.measure = true, .wisdom_file = wisdom});
    const fftw::RealFftPair measured(n);
    fftw::set_planner_options(estimating);
    const fftw::RealFftPair estimated(n);
    const std::size_t bins = fftw::padded_bins(n);
    fftw::AlignedFloats x(n), a(2 * bins), b(2 * bins), back(n);
    const auto signal = random_signal(n, seed + n);
    std::copy(signal.begin(), signal.end(), x.data());
    measured.forward(x.data(), a.data());
    estimated.forward(x.data(), b.data());
    EXPECT_LE(relative_error(std::span<const float>(a.data(), 2 * bins),
                             std::span<const float>(b.data(), 2 * bins)),
              1e-6)
        << n << "-point forward";
    measured.inverse(a.data(), back.data());
    for (std::size_t i = 0; i < n; ++i) back.data()[i] /= float(n);
    EXPECT_LE(relative_error(std::span<const float>(back.data(), n), signal), 1e-6)
        << n << "-point round trip";
  }
  EXPECT_TRUE(std::filesystem::exists(wisdom)) << "measured plans are kept as wisdom";
  std::filesystem::remove(wisdom);
}

TEST(CpuEngine, ThreadsDoNotChangeTheOutput) {
  // Large blocks are split by channel over threads; each channel's arithmetic is
  // the same, so the output must be identical to a single-threaded run.
  const auto seed = announce("threads", 1100);
  const std::size_t frames = 60000, channels = 3;
  const auto signals = signals_for(channels, frames, seed);
  const FilterBank bank =
      FilterBank::per_channel({random_signal(9000, seed + 1), random_signal(4000, seed + 2),
                               random_signal(9000, seed + 3)});
  const FilterBank next = FilterBank::shared(random_signal(5000, seed + 4), channels);
  std::vector<std::vector<std::vector<float>>> results;
  for (std::size_t threads : {1, 3}) {
    for (Algorithm algorithm : {Algorithm::fft, Algorithm::direct}) {
      EngineOptions options;
      options.max_block_frames = 16384;
      options.algorithm = algorithm;
      options.cpu.threads = threads;
      auto engine = make_cpu_engine(bank, options);
      std::printf("[ engine   ] %s\n", engine->description().c_str());
      if (threads == 3) {
        EXPECT_NE(engine->description().find("3 threads"), std::string::npos);
      }
      const std::size_t cut = frames / 2;
      const auto sizes = block_sizes(frames, 16384, true, seed + 5);
      std::vector<std::vector<float>> head(channels), tail(channels);
      std::vector<std::size_t> before, after;
      std::size_t done = 0;
      for (auto n : sizes) (done < cut ? before : after).push_back(n), done += n;
      std::size_t split = 0;
      for (auto n : before) split += n;
      for (std::size_t c = 0; c < channels; ++c) {
        head[c].assign(signals[c].begin(), signals[c].begin() + split);
        tail[c].assign(signals[c].begin() + split, signals[c].end());
      }
      auto out = run(*engine, head, before, Layout::interleaved);
      engine->set_filters(next, true);  // a crossfade on threads too
      const auto rest = run(*engine, tail, after, Layout::interleaved);
      for (std::size_t c = 0; c < channels; ++c) {
        out[c].insert(out[c].end(), rest[c].begin(), rest[c].end());
      }
      results.push_back(out);
    }
  }
  EXPECT_EQ(results[0], results[2]) << "fft";
  EXPECT_EQ(results[1], results[3]) << "direct";
}

TEST(WorkerPool, RunsEveryTaskOnceAndPublishesItsWrites) {
  // Plain (non-atomic) writes by the tasks must be visible to the caller when
  // run() returns, every task must run exactly once per job, on a valid thread
  // index, and jobs must not overlap: a task of job n never runs in job n + 1.
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
  for (std::size_t workers : {0, 1, 3}) {
    WorkerPool pool(workers);
    ASSERT_EQ(pool.threads(), workers + 1);
    for (std::size_t tasks : {1, 2, 5, 64}) {
      std::vector<std::uint64_t> seen(tasks, 0), runs(tasks, 0);
      std::vector<std::size_t> thread_of(tasks, 0);
      std::uint64_t job_number = 0;
      // More threads than cores is slow (spinning threads wait for each other's
      // time slices), though correct: fewer jobs there.
      const std::uint64_t jobs = workers + 1 <= cores ? 2000 : 50;
      for (std::uint64_t n = 1; n <= jobs; ++n) {
        job_number = n;
        auto job = [&](std::size_t task, std::size_t thread) {
          seen[task] = job_number;
          ++runs[task];
          thread_of[task] = thread;
        };
        pool.run(job, tasks);
        for (std::size_t t = 0; t < tasks; ++t) {
          ASSERT_EQ(seen[t], n) << workers << " workers, task " << t;
          ASSERT_EQ(runs[t], n) << workers << " workers, task " << t;
          ASSERT_LT(thread_of[t], pool.threads());
        }
      }
    }
  }
}

TEST(WorkerPool, FinishesJobsWhileWorkersAreStarvedOfCpu) {
  // Workers that get no CPU time (more busy threads than cores) must not hold
  // a job up: the caller claims their tasks. Busy threads stand in for a
  // loaded machine.
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (std::size_t i = 0; i < cores; ++i) {
    busy.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  WorkerPool pool(1);
  std::vector<int> out(8, 0);
  const auto start = std::chrono::steady_clock::now();
  for (int n = 1; n <= 300; ++n) {
    auto job = [&](std::size_t task, std::size_t) { out[task] = n; };
    pool.run(job, out.size());
    for (int v : out) ASSERT_EQ(v, n);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stop.store(true);
  for (auto& t : busy) t.join();
  // 300 tiny jobs: a caller that waited for a descheduled worker on each would
  // take a scheduler time slice (milliseconds) per job.
  EXPECT_LT(seconds, 0.5) << "300 jobs took " << seconds << " s";
}

TEST(WorkerPool, RunByGivesUpAtItsDeadlineOnASlowWorkerAndTheJobFinishesLater) {
  // The audio callback's use (the non-uniform engine's head): a worker that
  // has claimed a task and not finished it by the deadline makes run_by()
  // return false then, not when the worker is done; the job stays in flight
  // until idle_by() sees it done, with the worker's writes visible. The
  // caller's task waits until the worker holds the other, so that a worker
  // surely has one.
  WorkerPool pool(1);
  std::atomic<bool> worker_holds_a_task{false}, release{false};
  std::vector<int> written(2, 0);
  auto job = [&](std::size_t task, std::size_t thread) {
    if (thread == 0) {
      ASSERT_TRUE(testing::wait_until(
          std::chrono::seconds(30), [&] { return worker_holds_a_task.load(); },
          "a worker holding a task", std::chrono::microseconds(50)));
    } else {
      worker_holds_a_task.store(true);
      // The slow worker: done when the test says (bounded, so that a broken
      // pool cannot hang the test).
      EXPECT_TRUE(testing::wait_until(
          std::chrono::seconds(30), [&] { return release.load(); }, "released",
          std::chrono::microseconds(50)));
    }
    written[task] = 7;
  };
  const auto start = std::chrono::steady_clock::now();
  const timespec deadline = monotonic_after(std::chrono::milliseconds(20));
  EXPECT_FALSE(pool.run_by(job, 2, &deadline)) << "a worker still holds a task";
  const double waited_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited_ms, 19.0) << "gave up before the deadline";
  EXPECT_LT(waited_ms, 2000.0) << "waited far past the deadline";
  const timespec past = monotonic_after(std::chrono::nanoseconds(0));
  EXPECT_FALSE(pool.idle_by(&past)) << "the slow task is not done yet";
  release.store(true);
  const timespec far = monotonic_after(std::chrono::seconds(30));
  ASSERT_TRUE(pool.idle_by(&far));
  EXPECT_EQ(written, std::vector<int>(2, 7));
  // The pool takes the next job as usual.
  std::vector<int> next(16, 0);
  auto fill = [&](std::size_t task, std::size_t) { next[task] = 1; };
  EXPECT_TRUE(pool.run_by(fill, next.size(), &far));
  EXPECT_EQ(next, std::vector<int>(16, 1));
}

// Samples that a scaled copy could get wrong: signed zeros, subnormals (and
// products that become one), the largest floats, infinities, NaNs, then
// seeded random values of every magnitude.
std::vector<float> awkward_samples(std::size_t n, std::uint64_t seed) {
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::min(),
                            -1.5f * std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            1.0f,
                            -1.0f};
  std::mt19937 rng(static_cast<std::uint32_t>(seed));
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-140, 127);
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = i < std::size(specials) ? specials[i] : std::ldexp(mantissa(rng), exponent(rng));
  }
  std::shuffle(x.begin(), x.end(), rng);
  return x;
}

// process() of the same stream through two engines, call by call, bit for bit.
void expect_same_bits(Engine& a, Engine& b, std::size_t channels,
                      std::span<const std::size_t> calls, Layout layout, std::uint64_t seed) {
  for (std::size_t frames : calls) {
    const std::vector<float> in = awkward_samples(frames * channels, seed++);
    std::vector<float> out_a(in.size(), 7.0f), out_b(in.size(), 7.0f);
    a.process(in, out_a, frames, layout);
    b.process(in, out_b, frames, layout);
    ASSERT_EQ(std::memcmp(out_a.data(), out_b.data(), in.size() * sizeof(float)), 0)
        << frames << " frames x " << channels << " channels";
  }
}

TEST(CpuEngine, AGainSharedByEveryChannelIsTheGeneralPathBitForBit) {
  const auto seed = announce("1-tap scaled copy", 700);
  // Odd call sizes: runs of 64 samples and the rest, whatever the channels.
  const std::size_t calls[] = {1, 7, 63, 64, 65, 1000, 4097, 8192, 3};
  for (const float gain : {1.0f, -1.0f, 0.5f, 0.70710678f, 1e-3f, 3.25f, 1e30f, 0.0f}) {
    for (const std::size_t channels : {1, 2, 3, 32}) {
      for (const Layout layout : {Layout::interleaved, Layout::planar}) {
        EngineOptions options;
        options.max_block_frames = 8192;
        // Shared: the scaled copy. The same gain per channel: the general path.
        const auto fast = make_cpu_engine(FilterBank::shared({gain}, channels), options);
        const auto general = make_cpu_engine(
            FilterBank::per_channel(std::vector<std::vector<float>>(channels, {gain})), options);
        ASSERT_NE(fast->description().find("scaled copy"), std::string::npos)
            << fast->description();
        SCOPED_TRACE(::testing::Message() << "gain " << gain << ", " << channels << " channels, "
                                          << (layout == Layout::planar ? "planar" : "interleaved"));
        expect_same_bits(*fast, *general, channels, calls, layout, seed);
        // A crossfade to another gain (the general path for one call), then
        // the scaled copy with the new gain.
        fast->set_filters(FilterBank::shared({-gain / 3.0f}, channels), true);
        general->set_filters(
            FilterBank::per_channel(std::vector<std::vector<float>>(channels, {-gain / 3.0f})),
            true);
        expect_same_bits(*fast, *general, channels, calls, layout, seed + 100);
      }
    }
  }
}

TEST(CpuEngine, DescriptionNamesTheAlgorithm) {
  const FilterBank short_bank = FilterBank::shared(random_signal(16, 1), 2);
  const FilterBank long_bank = FilterBank::shared(random_signal(65536, 2), 2);
  EngineOptions options;
  options.max_block_frames = 1024;
  EXPECT_NE(make_cpu_engine(short_bank, options)->description().find("direct"), std::string::npos);
  const auto engine = make_cpu_engine(long_bank, options);
  EXPECT_NE(engine->description().find("partitioned FFT"), std::string::npos);
  EXPECT_EQ(engine->name(), "cpu");
  EXPECT_EQ(engine->max_taps(), 65536u);
  EXPECT_EQ(engine->channels(), 2u);
}

TEST(CpuSimd, ComplexProductsSumEveryTermOfEveryBinWithinFloatRounding) {
  // The CPU matrix engine's spectral sums (interleaved re, im): every bin
  // count from 1 to 70, so that each vector width's remainder is reached,
  // and the bins of FFTs of 32 to 16384 points; 0 to 5 terms, with and
  // without a starting spectrum, from bin 0 and from a later bin; floats
  // outside the range asked stay untouched.
  const std::uint64_t seed = 77;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::vector<std::size_t> counts;
  for (std::size_t bins = 1; bins <= 70; ++bins) counts.push_back(bins);
  for (std::size_t n = 32; n <= 16384; n *= 2) counts.push_back(n / 2 + 1);
  for (const std::size_t bins : counts) {
    for (const std::size_t terms : {0, 1, 2, 5}) {
      for (const std::size_t first : {std::size_t(0), bins / 3}) {
        const std::uint64_t s = seed + 100 * bins + 10 * terms + first;
        std::vector<std::vector<float>> x, h;
        std::vector<const float*> xs, hs;
        for (std::size_t t = 0; t < terms; ++t) {
          x.push_back(random_signal(2 * bins, s + 2 * t));
          h.push_back(random_signal(2 * bins, s + 2 * t + 1));
        }
        for (std::size_t t = 0; t < terms; ++t) {
          xs.push_back(x[t].data());
          hs.push_back(h[t].data());
        }
        const auto init = random_signal(2 * bins, s + 99);
        for (const bool with_init : {false, true}) {
          auto out = random_signal(2 * bins + 8, s + 98);
          const std::vector<float> before = out;
          const std::size_t count = bins - first;
          simd::complex_products(out.data(), with_init ? init.data() : nullptr, xs.data(),
                                 hs.data(), terms, first, count);
          for (std::size_t k = 0; k < out.size(); ++k) {
            if (k < 2 * first || k >= 2 * bins) {
              ASSERT_EQ(out[k], before[k])
                  << bins << " bins from " << first << ": float " << k << " outside the range";
              continue;
            }
            const std::size_t b = k - k % 2;
            double want = with_init ? init[k] : 0.0, magnitude = std::abs(want);
            for (std::size_t t = 0; t < terms; ++t) {
              const double xr = x[t][b], xi = x[t][b + 1], hr = h[t][b], hi = h[t][b + 1];
              want += k % 2 == 0 ? xr * hr - xi * hi : xr * hi + xi * hr;
              magnitude += (std::abs(xr) + std::abs(xi)) * (std::abs(hr) + std::abs(hi));
            }
            // Two roundings a term and one for the start, each at most 2^-24 of the sum's size.
            const double bound = (2.0 * double(terms) + 2.0) * 0x1p-24 * magnitude;
            ASSERT_NEAR(out[k], want, bound)
                << bins << " bins, " << terms << " terms, from " << first << ", bin " << k / 2
                << (k % 2 == 0 ? " (re)" : " (im)") << (with_init ? ", with a start" : "");
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tapstream

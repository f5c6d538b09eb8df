// Routing matrices: validation naming the path, matrix files (sparse and
// dense), and the matrix filter's output against a float64 reference of each
// output as the sum of its paths (gain, delay and polarity applied in float64).

#include "dsp/model/routing_matrix.hpp"

#include <gtest/gtest.h>
#include <sndfile.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/config/matrix_config.hpp"
#include "dsp/cpu/cpu_engine.hpp"
#include "dsp/cpu/cpu_matrix_engine.hpp"
#include "dsp/model/matrix_filter.hpp"
#include "matrix_support.hpp"
#include "process_support.hpp"
#include "reference.hpp"

namespace tapstream {
namespace {

using testing::make_path;
using testing::random_signal;
using testing::reference_convolution;
using testing::reference_output;
using testing::relative_error;
using testing::run_stream;
using testing::TempDir;

// Both ways to run a matrix on the CPU: the native matrix engine, and any
// engine with one channel per path.
enum class Kind { native, per_path };
const char* name_of(Kind kind) {
  return kind == Kind::native ? "native cpu matrix" : "cpu engine, one channel per path";
}

std::unique_ptr<MatrixEngine> make_matrix_engine(Kind kind, const RoutingMatrix& matrix,
                                                 std::size_t max_block) {
  EngineOptions options;
  options.max_block_frames = max_block;
  if (kind == Kind::native) return make_cpu_matrix_engine(matrix, options);
  return std::make_unique<MatrixFilter>(matrix, make_cpu_engine(matrix.path_bank(), options));
}

TEST(RoutingMatrix, MixedLengthMatrixMatchesTheFloat64SumOfItsPathsAtAnyBlockSize) {
  const std::uint64_t seed = 20261123;
  std::cout << "seed " << seed << "\n";
  std::mt19937_64 rng(seed);
  const RoutingMatrix matrix = testing::mixed_length_matrix(seed);
  std::vector<std::vector<float>> inputs;
  for (std::size_t c = 0; c < 3; ++c) inputs.push_back(random_signal(80000, seed + 10 + c));

  std::vector<std::vector<double>> want;
  for (std::size_t o = 0; o < 5; ++o) want.push_back(reference_output(matrix, inputs, o));
  for (const Kind kind : {Kind::native, Kind::per_path}) {
    for (const std::size_t max_block : {std::size_t(1) << 16, std::size_t(257), std::size_t(1)}) {
      for (const Layout layout : {Layout::interleaved, Layout::planar}) {
        if (max_block == 1 && layout == Layout::planar) continue;  // one frame: layouts agree
        SCOPED_TRACE(std::string(name_of(kind)) + ", blocks <= " + std::to_string(max_block) +
                     (layout == Layout::planar ? ", planar" : ", interleaved"));
        const auto filter = make_matrix_engine(kind, matrix, max_block);
        const auto got = run_stream(*filter, inputs, rng, layout);
        for (std::size_t o = 0; o < 4; ++o) {
          EXPECT_LE(relative_error(got[o], want[o]), 1e-5) << "output " << o;
        }
        for (float v : got[4]) ASSERT_EQ(v, 0.0f) << "output 4 is reached by no path";
      }
    }
  }
}

TEST(RoutingMatrix, APathWithoutItsTapsKeepsEveryOtherField) {
  MatrixPath path;
  path.input = 3;
  path.output = 5;
  path.taps = {0.5f, -0.25f, 0.125f};
  path.gain_db = -4.5;
  path.delay_frames = 77;
  path.invert = true;
  path.source = "woofer.txt";
  path.file = "/etc/tapstream/woofer.txt";
  const MatrixPath geometry = path.without_taps();
  EXPECT_TRUE(geometry.taps.empty());
  // Every field but the taps, whatever fields PathGeometry gains.
  EXPECT_EQ(geometry.input, path.input);
  EXPECT_EQ(geometry.output, path.output);
  EXPECT_EQ(geometry.gain_db, path.gain_db);
  EXPECT_EQ(geometry.delay_frames, path.delay_frames);
  EXPECT_EQ(geometry.invert, path.invert);
  EXPECT_EQ(geometry.source, path.source);
  EXPECT_EQ(geometry.file, path.file);
  MatrixPath with_taps = geometry;
  with_taps.taps = path.taps;
  EXPECT_EQ(with_taps.effective_taps(), path.effective_taps());
}

TEST(RoutingMatrix, DiagonalMatrixFiltersLikeTheEngineItself) {
  const FilterBank bank = FilterBank::per_channel({random_signal(100, 1), random_signal(33, 2)});
  const RoutingMatrix matrix = RoutingMatrix::diagonal(bank);
  EXPECT_TRUE(matrix.is_diagonal());
  EngineOptions options;
  options.max_block_frames = 64;
  auto engine = make_cpu_engine(bank, options);
  const auto filter = make_matrix_engine(Kind::per_path, matrix, 64);
  const auto native = make_matrix_engine(Kind::native, matrix, 64);
  const std::vector<float> in = random_signal(2 * 64, 3);
  std::vector<float> direct(in.size()), routed(in.size()), natively(in.size());
  engine->process(in, direct, 64, Layout::interleaved);
  filter->process(in, routed, 64, Layout::interleaved);
  native->process(in, natively, 64, Layout::interleaved);
  EXPECT_EQ(direct, routed);
  EXPECT_LE(relative_error(natively, direct), 1e-6);
}

TEST(RoutingMatrix, BadPathsAreRefusedNamingThePathAndTheReason) {
  const auto refused = [](std::size_t inputs, std::size_t outputs, std::vector<MatrixPath> paths,
                          const std::string& expected, std::size_t max_taps = 1 << 20) {
    try {
      RoutingMatrix::make(inputs, outputs, std::move(paths), max_taps);
      ADD_FAILURE() << "accepted; expected: " << expected;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  refused(2, 2, {make_path(0, 0, {1}), make_path(2, 1, {1})}, "path 1 (input 2 -> output 1)");
  refused(2, 2, {make_path(0, 5, {1})}, "output 5 is out of range");
  refused(2, 2, {make_path(0, 1, {1}), make_path(0, 1, {0.5f})}, "is given twice");
  refused(2, 2, {make_path(0, 1, {})}, "no taps");
  refused(1, 1, {make_path(0, 0, std::vector<float>(13, 1.0f))}, "13 taps exceed the maximum of 12",
          12);
  refused(1, 1, {make_path(0, 0, {1}, 0, RoutingMatrix::kMaxDelayFrames + 1)},
          "a delay of 4194305 frames exceeds the maximum");
  refused(1, 1, {make_path(0, 0, {NAN})}, "not a finite number");
}

// Banks of thousands of long filters hold billions of taps: the check for
// NaN and infinity runs over blocks at once, and still names the first culprit.
TEST(RoutingMatrix, NonFiniteTapsAreFoundWhereverTheyAreAndNamedByPosition) {
  std::vector<float> taps(10000, 0.25f);
  taps[17] = std::numeric_limits<float>::max();
  taps[18] = std::numeric_limits<float>::denorm_min();
  taps[19] = -0.0f;
  EXPECT_EQ(first_non_finite(taps), taps.size());
  EXPECT_EQ(first_non_finite({}), 0u);
  for (const std::size_t at :
       {std::size_t(0), std::size_t(4095), std::size_t(4096), std::size_t(4097), std::size_t(9999)})
    for (const float bad : {NAN, INFINITY, -INFINITY}) {
      std::vector<float> t = taps;
      t[at] = bad;
      EXPECT_EQ(first_non_finite(t), at) << bad << " at " << at;
      t[9999] = NAN;  // a later one is not the first
      EXPECT_EQ(first_non_finite(t), at);
      try {
        FilterBank::per_channel({taps, t});
        ADD_FAILURE() << "accepted a bank with " << bad << " at tap " << at;
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("filter 1: tap " + std::to_string(at) + " is not"),
                  std::string::npos)
            << e.what();
      }
      try {
        RoutingMatrix::make(1, 1, {make_path(0, 0, t)});
        ADD_FAILURE() << "accepted a path with " << bad << " at tap " << at;
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("tap " + std::to_string(at) + " of"),
                  std::string::npos)
            << e.what();
      }
    }
}

// A diagonal matrix made from a bank moved into it keeps that bank (gigabytes
// at thousands of long filters), where it used to copy it.
TEST(RoutingMatrix, ADiagonalMatrixKeepsABankMovedIntoItWithoutCopying) {
  FilterBank bank = FilterBank::per_channel({{1.0f, 0.5f}, {0.25f, 0.0f, 2.0f}});
  const float* first = bank.taps(0).data();
  const float* second = bank.taps(1).data();
  const RoutingMatrix matrix = RoutingMatrix::diagonal(std::move(bank));
  EXPECT_EQ(matrix.diagonal_bank()->taps(0).data(), first);
  EXPECT_EQ(matrix.diagonal_bank()->taps(1).data(), second);
  ASSERT_EQ(matrix.paths().size(), 2u);
  EXPECT_EQ(matrix.paths()[1].taps, (std::vector<float>{0.25f, 0.0f, 2.0f}));
}

TEST(RoutingMatrix, SwapsKeepTheRoutingAndRefuseARerouteKeepingTheRunningMatrix) {
  const RoutingMatrix a = RoutingMatrix::make(2, 1, {make_path(0, 0, {1}), make_path(1, 0, {1})});
  const RoutingMatrix louder =
      RoutingMatrix::make(2, 1, {make_path(0, 0, {2}), make_path(1, 0, {1}, 0, 0, true)});
  const RoutingMatrix rerouted = RoutingMatrix::make(2, 1, {make_path(0, 0, {1})});
  for (const Kind kind : {Kind::native, Kind::per_path}) {
    SCOPED_TRACE(name_of(kind));
    const auto filter = make_matrix_engine(kind, a, 16);
    filter->set_matrix(louder, /*crossfade=*/false);
    const std::vector<float> in = {1, 1, 1, 1};  // 2 frames x 2 inputs, interleaved
    std::vector<float> out(2);
    filter->process(in, out, 2, Layout::interleaved);
    EXPECT_NEAR(out[0], 1.0f, 1e-6);  // 2 x 1 - 1 x 1
    EXPECT_THROW(filter->set_matrix(rerouted, true), std::invalid_argument);
    filter->process(in, out, 2, Layout::interleaved);
    EXPECT_NEAR(out[1], 1.0f, 1e-6);
  }
}

// A crossfaded swap, mid-segment, between matrices of long paths: the block
// after the swap is old + w (new - old) with w = (i + 1) / frames, and every
// block after it is the new matrix's output of the whole stream.
TEST(RoutingMatrix, CrossfadedSwapBlendsOneBlockAndThenFiltersWithTheNewMatrix) {
  const std::uint64_t seed = 77;
  std::cout << "seed " << seed << "\n";
  const auto [before, after] = testing::swap_pair(seed);
  std::vector<std::vector<float>> inputs = {random_signal(9000, seed + 6),
                                            random_signal(9000, seed + 7)};
  const std::size_t swap_at = 5003, fade = 500, frames = 9000;
  for (const Kind kind : {Kind::native, Kind::per_path}) {
    SCOPED_TRACE(name_of(kind));
    const auto engine = make_matrix_engine(kind, before, 1024);
    std::vector<float> out(2 * frames);
    std::vector<float> in(2 * frames);
    for (std::size_t f = 0; f < frames; ++f)
      for (std::size_t c = 0; c < 2; ++c) in[f * 2 + c] = inputs[c][f];
    std::size_t start = 0;
    const auto run = [&](std::size_t n) {
      engine->process(std::span<const float>(in).subspan(start * 2, n * 2),
                      std::span<float>(out).subspan(start * 2, n * 2), n, Layout::interleaved);
      start += n;
    };
    while (start < swap_at) run(std::min<std::size_t>(333, swap_at - start));
    engine->set_matrix(after, /*crossfade=*/true);
    run(fade);
    while (start < frames) run(std::min<std::size_t>(1000, frames - start));
    for (std::size_t o = 0; o < 2; ++o) {
      const auto old_out = reference_output(before, inputs, o);
      const auto new_out = reference_output(after, inputs, o);
      std::vector<double> want(frames);
      for (std::size_t f = 0; f < frames; ++f) {
        double w = f < swap_at ? 0.0 : f < swap_at + fade ? double(f - swap_at + 1) / fade : 1.0;
        want[f] = old_out[f] + w * (new_out[f] - old_out[f]);
      }
      std::vector<float> got(frames);
      for (std::size_t f = 0; f < frames; ++f) got[f] = out[f * 2 + o];
      EXPECT_LE(relative_error(got, want), 1e-5) << "output " << o;
    }
  }
}

TEST(RoutingMatrix, DelayIsNotFilterLengthAndDoesNotCountAgainstMaxTaps) {
  const RoutingMatrix matrix =
      RoutingMatrix::make(1, 2, {make_path(0, 0, {1, 2, 3}, 0, 10), make_path(0, 1, {1}, 0, 24000)},
                          /*max_taps=*/12);
  EXPECT_EQ(matrix.max_filter_taps(), 3u);
  EXPECT_EQ(matrix.max_delay_frames(), 24000u);
  EXPECT_EQ(matrix.max_taps(), 24001u) << "the longest response, for tails";
  EngineOptions options;
  options.max_block_frames = 256;
  const auto engine = make_cpu_matrix_engine(matrix, options);
  EXPECT_EQ(engine->max_taps(), 3u) << "the native engine runs no delay as taps";
  EXPECT_GE(engine->max_delay_frames(), 24000u);
}

// Delays from none to a second, on segment boundaries and off them, on paths
// of 1 to 3000 taps; two paths share an input and a delay.
RoutingMatrix delayed_matrix(std::uint64_t seed) {
  return RoutingMatrix::make(2, 4,
                             {make_path(0, 0, random_signal(3000, seed + 1), 0.0, 0),
                              make_path(1, 0, random_signal(1, seed + 2), -6.0, 24000, true),
                              make_path(0, 1, random_signal(700, seed + 3), 0.0, 4096),
                              make_path(1, 1, random_signal(65, seed + 4), 3.0, 48007),
                              make_path(0, 2, random_signal(512, seed + 5), 0.0, 511),
                              make_path(1, 2, random_signal(512, seed + 6), 0.0, 511),
                              make_path(0, 3, random_signal(2048, seed + 7), 0.0, 24000),
                              make_path(1, 3, random_signal(33, seed + 8), 0.0, 1)});
}

TEST(RoutingMatrix, LongDelaysMatchTheFloat64ReferenceOfTheDelayedSignalAtAnyBlockSize) {
  const std::uint64_t seed = 20261126;
  std::cout << "seed " << seed << "\n";
  std::mt19937_64 rng(seed);
  const RoutingMatrix matrix = delayed_matrix(seed);
  const std::vector<std::vector<float>> inputs = {random_signal(70000, seed + 20),
                                                  random_signal(70000, seed + 21)};
  std::vector<std::vector<double>> want;
  for (std::size_t o = 0; o < 4; ++o) want.push_back(reference_output(matrix, inputs, o));
  for (const Kind kind : {Kind::native, Kind::per_path}) {
    for (const std::size_t max_block : {std::size_t(8192), std::size_t(97), std::size_t(1)}) {
      SCOPED_TRACE(std::string(name_of(kind)) + ", blocks <= " + std::to_string(max_block));
      const auto filter = make_matrix_engine(kind, matrix, max_block);
      const auto got = run_stream(*filter, inputs, rng, Layout::interleaved);
      for (std::size_t o = 0; o < 4; ++o)
        EXPECT_LE(relative_error(got[o], want[o]), 1e-5) << "output " << o;
    }
  }
}

TEST(RoutingMatrix, WholeSegmentsFilteredTogetherMatchOneSegmentAtATime) {
  // A call that spans whole segments from a segment's start has them
  // filtered together (each filter spectrum read once for all): the output
  // is the float64 reference, and the stream cut into calls shorter than a
  // segment to within float rounding, through long delays and a swap
  // without crossfade in the middle of the stream.
  const std::uint64_t seed = 20261127;
  std::cout << "seed " << seed << "\n";
  const RoutingMatrix matrix = delayed_matrix(seed);
  const RoutingMatrix swapped = delayed_matrix(seed + 100);
  const std::vector<std::vector<float>> inputs = {random_signal(90000, seed + 20),
                                                  random_signal(90000, seed + 21)};
  const std::size_t swap_at =
      45056;  // a multiple of each partition: the swap call starts a segment
  const auto run = [&](std::size_t P, std::size_t max_block,
                       const std::vector<std::size_t>& calls) {
    EngineOptions options;
    options.max_block_frames = max_block;
    options.cpu.matrix_partition = P;
    const auto engine = make_cpu_matrix_engine(matrix, options);
    std::vector<std::vector<float>> out(4, std::vector<float>(inputs[0].size()));
    std::vector<float> in_block, out_block;
    std::size_t call = 0;
    for (std::size_t start = 0; start < inputs[0].size(); ++call) {
      if (start == swap_at) engine->set_matrix(swapped, /*crossfade=*/false);
      std::size_t n = std::min({calls[call % calls.size()], max_block, inputs[0].size() - start});
      if (start < swap_at) n = std::min(n, swap_at - start);
      in_block.assign(2 * n, 0.0f);
      out_block.assign(4 * n, 0.0f);
      for (std::size_t c = 0; c < 2; ++c)
        std::copy_n(inputs[c].begin() + std::ptrdiff_t(start), n, in_block.begin() + c * n);
      engine->process(in_block, out_block, n, Layout::planar);
      for (std::size_t o = 0; o < 4; ++o)
        std::copy_n(out_block.begin() + o * n, n, out[o].begin() + std::ptrdiff_t(start));
      start += n;
    }
    return out;
  };
  // The smallest partition the engine takes and a larger one.
  for (const std::size_t P : {std::size_t(16), std::size_t(512)}) {
    SCOPED_TRACE("partition " + std::to_string(P));
    // Whole batches of 2 to 8 segments from a segment's start, and calls
    // that leave the stream in the middle of a segment before a batch.
    const auto together = run(P, 8 * P + 100, {2 * P, 8 * P + 100, 3 * P, 1000, 5 * P + 7, 8 * P});
    const auto one_at_a_time = run(P, P - 1, {P - 1, 100, P / 2});
    for (std::size_t o = 0; o < 4; ++o) {
      // Before the swap the first matrix's output, after it the second's
      // over the whole input (no crossfade: the new filters take over at once).
      const std::vector<double> first = reference_output(matrix, inputs, o);
      const std::vector<double> second = reference_output(swapped, inputs, o);
      std::vector<double> want(first.begin(), first.begin() + std::ptrdiff_t(swap_at));
      want.insert(want.end(), second.begin() + std::ptrdiff_t(swap_at), second.end());
      EXPECT_LE(relative_error(together[o], want), 1e-5) << "output " << o;
      EXPECT_LE(relative_error(together[o], one_at_a_time[o]), 1e-6) << "output " << o;
    }
  }
}

TEST(RoutingMatrix, SwapThatMovesDelaysCrossfadesOneBlockAndIsExactAfter) {
  const std::uint64_t seed = 91;
  std::cout << "seed " << seed << "\n";
  const RoutingMatrix before =
      RoutingMatrix::make(2, 2,
                          {make_path(0, 0, random_signal(300, seed), 0.0, 0),
                           make_path(1, 0, random_signal(50, seed + 1), 0.0, 30000),
                           make_path(1, 1, random_signal(700, seed + 2), -3.0, 5)});
  const RoutingMatrix after =
      RoutingMatrix::make(2, 2,
                          {make_path(0, 0, random_signal(300, seed + 3), 0.0, 20000),
                           make_path(1, 0, random_signal(50, seed + 4), 0.0, 3),
                           make_path(1, 1, random_signal(1200, seed + 5), 2.0, 60001)});
  const std::size_t frames = 100000, swap_at = 70001, fade = 700;
  const std::vector<std::vector<float>> inputs = {random_signal(frames, seed + 6),
                                                  random_signal(frames, seed + 7)};
  EngineOptions options;
  options.max_block_frames = 1024;
  options.max_taps = 1200;
  options.max_delay_frames = 60001;  // the swap's longest delay, more than `before`'s
  const auto engine = make_cpu_matrix_engine(before, options);
  std::vector<float> in(2 * frames), out(2 * frames);
  for (std::size_t f = 0; f < frames; ++f)
    for (std::size_t c = 0; c < 2; ++c) in[f * 2 + c] = inputs[c][f];
  std::size_t start = 0;
  const auto run = [&](std::size_t n) {
    engine->process(std::span<const float>(in).subspan(start * 2, n * 2),
                    std::span<float>(out).subspan(start * 2, n * 2), n, Layout::interleaved);
    start += n;
  };
  while (start < swap_at) run(std::min<std::size_t>(333, swap_at - start));
  engine->set_matrix(after, /*crossfade=*/true);
  run(fade);
  while (start < frames) run(std::min<std::size_t>(1000, frames - start));
  for (std::size_t o = 0; o < 2; ++o) {
    const auto old_out = reference_output(before, inputs, o);
    const auto new_out = reference_output(after, inputs, o);
    std::vector<double> want(frames);
    for (std::size_t f = 0; f < frames; ++f) {
      const double w = f < swap_at          ? 0.0
                       : f < swap_at + fade ? double(f - swap_at + 1) / fade
                                            : 1.0;
      want[f] = old_out[f] + w * (new_out[f] - old_out[f]);
    }
    std::vector<float> got(frames);
    for (std::size_t f = 0; f < frames; ++f) got[f] = out[f * 2 + o];
    EXPECT_LE(relative_error(got, want), 1e-5) << "output " << o;
  }
}

TEST(RoutingMatrix, SwapBeyondTheDelayLineIsRefusedNamingThePathAndKeepsTheRunningMatrix) {
  const RoutingMatrix running = RoutingMatrix::make(1, 1, {make_path(0, 0, {1}, 0, 100)});
  EngineOptions options;
  options.max_block_frames = 64;
  options.max_delay_frames = 70000;
  const auto engine = make_cpu_matrix_engine(running, options);
  const std::size_t reach = engine->max_delay_frames();
  EXPECT_GE(reach, 70000u);
  try {
    engine->set_matrix(RoutingMatrix::make(1, 1, {make_path(0, 0, {1}, 0, reach + 1)}), false);
    ADD_FAILURE() << "a delay beyond the delay line was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("path 0 (input 0 -> output 0): a delay of " +
                                         std::to_string(reach + 1)),
              std::string::npos)
        << e.what();
  }
  const std::vector<float> in(64, 1.0f);
  std::vector<float> out(64);
  for (int i = 0; i < 2; ++i) engine->process(in, out, 64, Layout::planar);
  EXPECT_NEAR(out[100 - 64 - 1], 0.0f, 1e-6);
  EXPECT_NEAR(out[100 - 64], 1.0f, 1e-6) << "the running matrix (delay 100) still runs";
}

TEST(RoutingMatrix, TheCpuDelayLineReachesOnlyWhatTheMatrixAndTheOptionsAsk) {
  // Each call writes a segment of every input into the delay line, so a
  // reserve nobody asked for is memory the callback walks through: 64 inputs
  // with a 65536-frame reserve were 35 MB of cold pages (docs/performance.md).
  std::vector<MatrixPath> paths;
  for (std::size_t i = 0; i < 64; ++i) {
    for (std::size_t o = 0; o < 2; ++o)
      paths.push_back(make_path(i, o, random_signal(512, i), 0, 0));
  }
  const RoutingMatrix sources = RoutingMatrix::make(64, 2, std::move(paths));
  EngineOptions options;
  options.max_block_frames = 64;
  options.realtime_calls = true;
  const auto engine = make_cpu_matrix_engine(sources, options);
  const std::size_t reach = engine->max_delay_frames();
  EXPECT_GT(reach, 0u) << "0 would mean an engine that folds delays into taps";
  EXPECT_LT(reach, 512u) << "no segment of delay beyond a partition: " << engine->description();
  try {
    std::vector<MatrixPath> delayed = sources.paths();
    delayed[3].delay_frames = 4800;
    engine->set_matrix(RoutingMatrix::make(64, 2, std::move(delayed)), false);
    ADD_FAILURE() << "a delay beyond the delay line was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("a delay of 4800"), std::string::npos) << e.what();
  }

  options.max_delay_frames = 4800;  // what [filter] max_delay_frames asks for
  const auto reserved = make_cpu_matrix_engine(sources, options);
  EXPECT_GE(reserved->max_delay_frames(), 4800u);
  EXPECT_LT(reserved->max_delay_frames(), 65536u);
  std::vector<MatrixPath> delayed = sources.paths();
  delayed[3].delay_frames = 4800;
  EXPECT_NO_THROW(reserved->set_matrix(RoutingMatrix::make(64, 2, std::move(delayed)), false));
}

void write_text(const std::filesystem::path& file, const std::string& text) {
  std::ofstream(file) << text;
}

void write_wav(const std::filesystem::path& file, int channels, int rate,
               const std::vector<float>& interleaved) {
  SF_INFO info{};
  info.channels = channels;
  info.samplerate = rate;
  info.format = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
  SNDFILE* f = sf_open(file.c_str(), SFM_WRITE, &info);
  ASSERT_NE(f, nullptr);
  sf_writef_float(f, interleaved.data(), sf_count_t(interleaved.size() / channels));
  sf_close(f);
}

TEST(MatrixFile, SparseFileReadsEveryKeyRelativeToItsDirectory) {
  TempDir dir;
  write_text(dir / "woofer.txt", "0.5\n0.25\n");
  write_wav(dir / "ir.wav", 2, 48000, {1, 10, 2, 20, 3, 30});
  write_text(dir / "m.toml", R"(inputs = 2
outputs = 3
[[path]]
input = 0
output = 0
file = "woofer.txt"
gain_db = -6.0
delay_frames = 2
invert = true
[[path]]
input = 1
output = 2
file = "ir.wav"
channel = 1
)");
  MatrixFileOptions options;
  options.sample_rate = 48000;
  const RoutingMatrix m = load_matrix_file(dir / "m.toml", options);
  ASSERT_EQ(m.paths().size(), 2u);
  EXPECT_EQ(m.inputs(), 2u);
  EXPECT_EQ(m.outputs(), 3u);
  EXPECT_EQ(m.paths()[0].delay_frames, 2u);
  EXPECT_TRUE(m.paths()[0].invert);
  EXPECT_DOUBLE_EQ(m.paths()[0].gain_db, -6.0);
  EXPECT_EQ(m.paths()[1].taps, (std::vector<float>{10, 20, 30}));
  EXPECT_EQ(m.max_taps(), 4u);
}

TEST(MatrixFile, DenseFileMapsChannelKToInputKModInputsAndOutputKDivInputs) {
  TempDir dir;
  // 2 -> 2: channels (in0,out0) (in1,out0) (in0,out1) (in1,out1); (in1,out0) all zero.
  write_wav(dir / "dense.wav", 4, 48000, {1, 0, 3, 4, 1, 0, 3, 4});
  write_text(dir / "m.toml", "inputs = 2\noutputs = 2\n[dense]\nfile = \"dense.wav\"\n");
  const RoutingMatrix m = load_matrix_file(dir / "m.toml", {});
  ASSERT_EQ(m.paths().size(), 3u);
  EXPECT_EQ(m.paths()[0].input, 0u);
  EXPECT_EQ(m.paths()[0].output, 0u);
  EXPECT_EQ(m.paths()[1].input, 0u);
  EXPECT_EQ(m.paths()[1].output, 1u);
  EXPECT_EQ(m.paths()[1].taps, (std::vector<float>{3, 3}));
  EXPECT_EQ(m.paths()[2].input, 1u);
  EXPECT_EQ(m.paths()[2].output, 1u);
}

TEST(MatrixFile, EveryBadFileIsRefusedNamingThePathAndTheReason) {
  TempDir dir;
  write_text(dir / "a.txt", "1\n");
  write_wav(dir / "ir44.wav", 1, 44100, {1, 0});
  write_wav(dir / "two.wav", 2, 48000, {1, 0});
  const auto refused = [&](const std::string& body, const std::string& expected) {
    write_text(dir / "bad.toml", body);
    MatrixFileOptions options;
    options.sample_rate = 48000;
    try {
      load_matrix_file(dir / "bad.toml", options);
      ADD_FAILURE() << "accepted:\n" << body;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
          << "got: " << e.what() << "\nwanted: " << expected;
      EXPECT_NE(std::string(e.what()).find("bad.toml"), std::string::npos) << e.what();
    }
  };
  const std::string head = "inputs = 2\noutputs = 2\n";
  refused(head + "[[path]]\ninput = 0\noutput = 0\nfile = \"missing.txt\"\n", "no such file");
  refused(head + "[[path]]\ninput = 0\noutput = 0\nfile = \"two.wav\"\nchannel = 2\n",
          "path 0 (input 0 -> output 0): channel 2 is out of range");
  refused(head + "[[path]]\ninput = 1\noutput = 0\nfile = \"ir44.wav\"\n",
          "path 0 (input 1 -> output 0): ");
  refused(head + "[[path]]\ninput = 1\noutput = 0\nfile = \"ir44.wav\"\n", "44100");
  refused(head +
              "[[path]]\ninput = 0\noutput = 1\nfile = \"a.txt\"\n"
              "[[path]]\ninput = 0\noutput = 1\nfile = \"a.txt\"\n",
          "path 1 (input 0 -> output 1): input 0 -> output 1 is given twice");
  refused(head + "[[path]]\ninput = 3\noutput = 0\nfile = \"a.txt\"\n",
          "path[0].input = 3: must be between 0 and 1");
  refused(head + "[[path]]\ninput = 0\noutput = 0\nfile = \"a.txt\"\ngain = 3\n",
          "unknown key 'gain'");
  refused(head + "[dense]\nfile = \"two.wav\"\n", "needs inputs x outputs = 4");
  refused("inputs = 2\n[[path]]\ninput = 0\noutput = 0\nfile = \"a.txt\"\n",
          "needs both inputs and outputs");
  refused(head + "[[path]\n", "bad.toml:3");
}

}  // namespace
}  // namespace tapstream

namespace tapstream {
namespace {

std::filesystem::path shipped(const std::string& name) {
  return std::filesystem::path(TAPSTREAM_SOURCE_DIR) / "config" / "matrix" / name;
}

// Impulse on every input at frame 0, `frames` frames through the CPU matrix engine.
std::vector<std::vector<float>> impulse_response(const RoutingMatrix& m, std::size_t frames) {
  std::vector<std::vector<float>> inputs(m.inputs(), std::vector<float>(frames, 0.0f));
  for (auto& in : inputs) in[0] = 1.0f;
  EngineOptions options;
  options.max_block_frames = 1024;
  const auto engine = make_cpu_matrix_engine(m, options);
  std::mt19937_64 rng(5);
  return run_stream(*engine, inputs, rng, Layout::planar);
}

TEST(ShippedMatrices, CrossoverDriversSumToTheInputDelayedByHalfTheFilter) {
  MatrixFileOptions options;
  options.sample_rate = 48000;
  const RoutingMatrix m = load_matrix_file(shipped("crossover-2way.toml"), options);
  ASSERT_EQ(m.inputs(), 2u);
  ASSERT_EQ(m.outputs(), 4u);
  const auto out = impulse_response(m, 2048);
  const float tweeter_gain = float(std::pow(10.0, 2.0 / 20.0));  // undo its -2 dB
  for (std::size_t side = 0; side < 2; ++side) {
    for (std::size_t f = 0; f < 2048; ++f) {
      const float sum = out[2 * side][f] + tweeter_gain * out[2 * side + 1][f];
      ASSERT_NEAR(sum, f == 511 ? 1.0f : 0.0f, 1e-5) << "side " << side << ", frame " << f;
    }
  }
}

TEST(ShippedMatrices, CrossfeedGivesEachEarTheOtherChannelLowPassedAndEightDbDown) {
  const RoutingMatrix m = load_matrix_file(shipped("crossfeed-2x2.toml"), {});
  ASSERT_EQ(m.paths().size(), 4u);
  std::vector<std::vector<float>> inputs = {std::vector<float>(256, 0.0f),
                                            std::vector<float>(256, 0.0f)};
  inputs[0][0] = 1.0f;  // left only
  EngineOptions options;
  options.max_block_frames = 64;
  const auto engine = make_cpu_matrix_engine(m, options);
  std::mt19937_64 rng(6);
  const auto out = run_stream(*engine, inputs, rng, Layout::interleaved);
  EXPECT_NEAR(out[0][0], 1.0f, 1e-6);  // the direct path, undelayed
  double dc = 0.0;                     // the cross path's DC gain: -8 dB
  for (float v : out[1]) dc += v;
  EXPECT_NEAR(20.0 * std::log10(dc), -8.0, 0.01);
  std::size_t peak = 0;
  for (std::size_t f = 0; f < out[1].size(); ++f)
    if (std::fabs(out[1][f]) > std::fabs(out[1][peak])) peak = f;
  EXPECT_EQ(peak, 31u);  // the 63-tap linear-phase low-pass's centre
}

TEST(ShippedMatrices, WaveFieldScriptWritesA16To128MatrixWhoseDelaysFollowTheGeometry) {
  if (std::system("python3 --version >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 is not installed: tools/make-wfs-matrix.py cannot run";
  testing::TempDir dir;
  const std::string command = "python3 " + std::string(TAPSTREAM_SOURCE_DIR) +
                              "/tools/make-wfs-matrix.py " + dir.path().string() + " >/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  MatrixFileOptions options;
  options.sample_rate = 48000;
  const RoutingMatrix m = load_matrix_file(dir / "wfs-16x128.toml", options);
  ASSERT_EQ(m.inputs(), 16u);
  ASSERT_EQ(m.outputs(), 128u);
  ASSERT_EQ(m.paths().size(), 2048u);
  // An impulse on source 0 reaches each loudspeaker at its path's delay plus
  // the fractional-delay filter's centre (15 frames and a fraction).
  std::vector<std::vector<float>> inputs(16, std::vector<float>(2048, 0.0f));
  inputs[0][0] = 1.0f;
  EngineOptions engine_options;
  engine_options.max_block_frames = 1024;
  const auto engine = make_cpu_matrix_engine(m, engine_options);
  std::mt19937_64 rng(7);
  const auto out = run_stream(*engine, inputs, rng, Layout::planar);
  for (const MatrixPath& p : m.paths()) {
    if (p.input != 0) continue;
    std::size_t peak = 0;
    for (std::size_t f = 0; f < out[p.output].size(); ++f)
      if (std::fabs(out[p.output][f]) > std::fabs(out[p.output][peak])) peak = f;
    EXPECT_GE(peak, p.delay_frames + 15) << "loudspeaker " << p.output;
    EXPECT_LE(peak, p.delay_frames + 16) << "loudspeaker " << p.output;
  }
}

}  // namespace
}  // namespace tapstream

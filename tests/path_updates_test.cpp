// Per-path updates (MatrixEngine::set_paths) on the CPU engines: the native
// matrix engine and the diagonal engine over the per-channel engines. The
// reference is float64: each path's contribution is the causal convolution
// of its input with the filter of the moment (gain, delay and polarity
// applied in float64), and a call that follows an update blends the old and
// the new filter's output linearly over the call, w = (i + 1) / frames.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/engine_factory.hpp"
#include "dsp/cpu/cpu_engine.hpp"
#include "dsp/cpu/cpu_matrix_engine.hpp"
#include "dsp/model/diagonal_engine.hpp"
#include "matrix_support.hpp"
#include "path_updates_support.hpp"
#include "reference.hpp"
#include "wait_for.hpp"

namespace tapstream {
namespace {

using testing::announce;
using testing::make_path;
using testing::piecewise_reference;
using testing::random_signal;
using testing::relative_error;
using testing::run_with_updates;
using testing::Schedule;

// 3 -> 3 with gains, delays (one over a segment of the CPU engine's
// partition), an inverted path and output 2 reached by no path that changes.
RoutingMatrix test_matrix(std::uint64_t seed) {
  std::vector<MatrixPath> paths;
  paths.push_back(make_path(0, 0, random_signal(200, seed + 1), -3.0));
  paths.push_back(make_path(1, 0, random_signal(37, seed + 2), 0.0, 5, true));
  paths.push_back(make_path(2, 1, random_signal(300, seed + 3), 6.0, 700));
  paths.push_back(make_path(0, 1, random_signal(1, seed + 4)));
  paths.push_back(make_path(2, 2, random_signal(150, seed + 5), -1.0, 3));
  return RoutingMatrix::make(3, 3, std::move(paths));
}

// The diagonal: path c is input c -> output c.
RoutingMatrix test_diagonal(std::uint64_t seed) {
  std::vector<MatrixPath> paths;
  paths.push_back(make_path(0, 0, random_signal(200, seed + 1), -3.0));
  paths.push_back(make_path(1, 1, random_signal(37, seed + 2), 0.0, 5, true));
  paths.push_back(make_path(2, 2, random_signal(300, seed + 3), 6.0, 70));
  return RoutingMatrix::make(3, 3, std::move(paths));
}

constexpr std::size_t kMaxTaps = 1200;  // effective, delay included (the diagonal folds delays)

enum class Kind { native_cpu, diagonal_cpu };

std::unique_ptr<MatrixEngine> make(Kind kind, const RoutingMatrix& matrix, std::size_t block) {
  EngineOptions options;
  options.max_block_frames = block;
  options.max_taps = kMaxTaps;
  options.cpu.threads = 1;
  if (kind == Kind::native_cpu) return make_cpu_matrix_engine(matrix, options);
  return std::make_unique<DiagonalEngine>(make_cpu_engine(*matrix.diagonal_bank(), options),
                                          EngineTransport{}, &matrix);
}

// Every call, a random set of paths (at least one) takes random taps of a
// random length within the engine's reach.
Schedule updates_every_call(const RoutingMatrix& matrix, std::size_t calls, std::uint64_t seed,
                            std::size_t never_updated = std::numeric_limits<std::size_t>::max()) {
  std::mt19937_64 rng(seed);
  Schedule schedule;
  for (std::size_t call = 1; call < calls; ++call) {
    for (std::size_t p = 0; p < matrix.paths().size(); ++p) {
      if (p == never_updated) continue;
      if (rng() % 2 == 0 && !(p == 0 && schedule[call].empty())) continue;
      const std::size_t reach = kMaxTaps - matrix.paths()[p].delay_frames;
      const std::size_t length = 1 + rng() % std::min<std::size_t>(reach, 400);
      schedule[call][p] = random_signal(length, seed + 1000 * call + p);
    }
  }
  return schedule;
}

class PathUpdates : public ::testing::TestWithParam<Kind> {};

TEST_P(PathUpdates, UpdatesAtEveryCallMatchTheFloat64PiecewiseCrossfadedReference) {
  const std::uint64_t seed = announce("path updates", 2511);
  const RoutingMatrix matrix =
      GetParam() == Kind::native_cpu ? test_matrix(seed) : test_diagonal(seed);
  for (const std::size_t block : {64, 200}) {
    SCOPED_TRACE("calls of " + std::to_string(block) + " frames");
    const std::size_t calls = 60;
    const std::vector<std::size_t> sizes(calls, block);
    std::vector<std::vector<float>> inputs;
    for (std::size_t c = 0; c < 3; ++c)
      inputs.push_back(random_signal(calls * block, seed + 7 + c));
    const Schedule schedule = updates_every_call(matrix, calls, seed + block);
    const auto engine = make(GetParam(), matrix, block);
    const auto got = run_with_updates(*engine, inputs, sizes, schedule);
    const auto want = piecewise_reference(matrix, inputs, sizes, schedule);
    for (std::size_t o = 0; o < 3; ++o) EXPECT_LE(relative_error(got[o], want[o]), 1e-5) << o;
  }
}

TEST_P(PathUpdates, CallsOfAnySizeFadeOverTheCallAfterTheUpdate) {
  const std::uint64_t seed = announce("path updates, random call sizes", 2512);
  const RoutingMatrix matrix =
      GetParam() == Kind::native_cpu ? test_matrix(seed) : test_diagonal(seed);
  const std::size_t frames = 9000, block = 256;
  const std::vector<std::size_t> sizes = testing::random_block_sizes(frames, block, seed);
  std::vector<std::vector<float>> inputs;
  for (std::size_t c = 0; c < 3; ++c) inputs.push_back(random_signal(frames, seed + 7 + c));
  const Schedule schedule = updates_every_call(matrix, sizes.size(), seed + 1);
  const auto engine = make(GetParam(), matrix, block);
  const auto got = run_with_updates(*engine, inputs, sizes, schedule);
  const auto want = piecewise_reference(matrix, inputs, sizes, schedule);
  for (std::size_t o = 0; o < 3; ++o) EXPECT_LE(relative_error(got[o], want[o]), 1e-5) << o;
}

TEST_P(PathUpdates, AfterAnUpdateTheOutputIsTheNewFiltersFromTheNextCallOn) {
  const std::uint64_t seed = announce("one update", 2513);
  const RoutingMatrix matrix =
      GetParam() == Kind::native_cpu ? test_matrix(seed) : test_diagonal(seed);
  const std::size_t block = 128, calls = 40, update_at = 17;
  std::vector<std::vector<float>> inputs;
  for (std::size_t c = 0; c < 3; ++c) inputs.push_back(random_signal(calls * block, seed + 7 + c));
  Schedule schedule;
  schedule[update_at][0] = random_signal(250, seed + 20);
  schedule[update_at][2] = random_signal(90, seed + 21);
  const RoutingMatrix after = with_path_taps(
      matrix, std::vector<PathTaps>{{0, schedule[update_at][0]}, {2, schedule[update_at][2]}},
      kMaxTaps);
  const auto engine = make(GetParam(), matrix, block);
  const auto got =
      run_with_updates(*engine, inputs, std::vector<std::size_t>(calls, block), schedule);
  for (std::size_t o = 0; o < 3; ++o) {
    const std::vector<double> want_after = testing::reference_output(after, inputs, o);
    const std::size_t from = (update_at + 1) * block;
    EXPECT_LE(relative_error(std::span<const float>(got[o]).subspan(from),
                             std::span<const double>(want_after).subspan(from)),
              1e-5)
        << "output " << o;
  }
}

TEST_P(PathUpdates, AnUpdateIsTheSwapOfTheWholeMatrixWithThoseTapsToTheBit) {
  const std::uint64_t seed = announce("update against swap", 2514);
  const RoutingMatrix matrix =
      GetParam() == Kind::native_cpu ? test_matrix(seed) : test_diagonal(seed);
  const std::size_t block = 100, calls = 30;
  std::vector<std::vector<float>> inputs;
  for (std::size_t c = 0; c < 3; ++c) inputs.push_back(random_signal(calls * block, seed + 7 + c));
  const Schedule schedule = updates_every_call(matrix, calls, seed + 3);
  const auto by_paths = make(GetParam(), matrix, block);
  const auto by_matrix = make(GetParam(), matrix, block);
  const std::vector<std::size_t> sizes(calls, block);
  // The same run twice: per path, and as whole matrices.
  const auto paths_out = run_with_updates(*by_paths, inputs, sizes, schedule);
  RoutingMatrix running = matrix;
  std::vector<float> in, out;
  std::vector<std::vector<float>> matrix_out(3, std::vector<float>(calls * block));
  for (std::size_t call = 0; call < calls; ++call) {
    if (const auto found = schedule.find(call); found != schedule.end()) {
      std::vector<PathTaps> updates;
      for (const auto& [path, taps] : found->second) updates.push_back({path, taps});
      running = with_path_taps(running, updates, kMaxTaps);
      by_matrix->set_matrix(running, true);
    }
    in.assign(3 * block, 0.0f);
    out.assign(3 * block, 0.0f);
    for (std::size_t c = 0; c < 3; ++c)
      for (std::size_t f = 0; f < block; ++f) in[c * block + f] = inputs[c][call * block + f];
    by_matrix->process(in, out, block, Layout::planar);
    for (std::size_t c = 0; c < 3; ++c)
      for (std::size_t f = 0; f < block; ++f) matrix_out[c][call * block + f] = out[c * block + f];
  }
  for (std::size_t o = 0; o < 3; ++o) EXPECT_EQ(paths_out[o], matrix_out[o]) << "output " << o;
}

TEST_P(PathUpdates, OutputsOfUntouchedPathsStayTheSameToTheBit) {
  const std::uint64_t seed = announce("untouched paths", 2515);
  const RoutingMatrix matrix =
      GetParam() == Kind::native_cpu ? test_matrix(seed) : test_diagonal(seed);
  // Output 2 is reached by path 4 (native) or path 2 (diagonal) alone.
  const std::size_t untouched = GetParam() == Kind::native_cpu ? 4 : 2;
  const std::size_t block = 64, calls = 50;
  std::vector<std::vector<float>> inputs;
  for (std::size_t c = 0; c < 3; ++c) inputs.push_back(random_signal(calls * block, seed + 7 + c));
  const std::vector<std::size_t> sizes(calls, block);
  const auto still = run_with_updates(*make(GetParam(), matrix, block), inputs, sizes, {});
  const auto moving = run_with_updates(*make(GetParam(), matrix, block), inputs, sizes,
                                       updates_every_call(matrix, calls, seed + 4, untouched));
  EXPECT_EQ(still[2], moving[2]);
  EXPECT_NE(still[0], moving[0]);  // the others did change
}

TEST_P(PathUpdates, ASecondUpdateBeforeTheNextCallAddsToTheFirst) {
  const std::uint64_t seed = announce("two updates", 2516);
  const RoutingMatrix matrix =
      GetParam() == Kind::native_cpu ? test_matrix(seed) : test_diagonal(seed);
  const std::size_t block = 128, calls = 12;
  std::vector<std::vector<float>> inputs;
  for (std::size_t c = 0; c < 3; ++c) inputs.push_back(random_signal(calls * block, seed + 7 + c));
  const std::vector<float> a = random_signal(60, seed + 30), b = random_signal(70, seed + 31),
                           c = random_signal(80, seed + 32);
  const auto engine = make(GetParam(), matrix, block);
  std::vector<float> in(3 * block), out(3 * block);
  std::vector<std::vector<float>> got(3, std::vector<float>(calls * block));
  for (std::size_t call = 0; call < calls; ++call) {
    if (call == 5) {
      const std::vector<PathTaps> first{{0, a}, {1, b}};
      engine->set_paths(first, true);
      const std::vector<PathTaps> second{{1, c}};
      engine->set_paths(second, true);
    }
    for (std::size_t ch = 0; ch < 3; ++ch)
      for (std::size_t f = 0; f < block; ++f) in[ch * block + f] = inputs[ch][call * block + f];
    engine->process(in, out, block, Layout::planar);
    for (std::size_t ch = 0; ch < 3; ++ch)
      for (std::size_t f = 0; f < block; ++f) got[ch][call * block + f] = out[ch * block + f];
  }
  Schedule schedule;
  schedule[5][0] = a;
  schedule[5][1] = c;
  const auto want =
      piecewise_reference(matrix, inputs, std::vector<std::size_t>(calls, block), schedule);
  for (std::size_t o = 0; o < 3; ++o) EXPECT_LE(relative_error(got[o], want[o]), 1e-5) << o;
}

TEST_P(PathUpdates, BadUpdatesAreRefusedNamingThePathAndTheRunningFiltersKeepRunning) {
  const std::uint64_t seed = announce("bad updates", 2517);
  const RoutingMatrix matrix =
      GetParam() == Kind::native_cpu ? test_matrix(seed) : test_diagonal(seed);
  const std::size_t block = 64, calls = 20;
  std::vector<std::vector<float>> inputs;
  for (std::size_t c = 0; c < 3; ++c) inputs.push_back(random_signal(calls * block, seed + 7 + c));
  const std::vector<std::size_t> sizes(calls, block);
  const auto engine = make(GetParam(), matrix, block);
  const std::vector<float> good = random_signal(10, seed + 40);
  std::vector<float> nan = good, inf = good;
  nan[3] = std::numeric_limits<float>::quiet_NaN();
  inf[9] = -std::numeric_limits<float>::infinity();
  const std::vector<float> too_long(kMaxTaps + 1, 0.1f);
  const std::vector<float> empty;
  struct Bad {
    std::vector<PathTaps> updates;
    std::string says;
  };
  const std::size_t paths = matrix.paths().size();
  const std::vector<Bad> bad = {
      {{{paths, good}}, "path " + std::to_string(paths) + ": no such path"},
      {{{1, good}, {1, good}}, "path 1 (input 1 -> output "},
      {{{0, empty}}, "path 0 (input 0 -> output 0): no taps"},
      {{{0, too_long}}, "path 0 (input 0 -> output 0): 1201 taps"},
      {{{1, good}, {0, nan}}, "path 0 (input 0 -> output 0): tap 3 is not a finite number"},
      {{{0, inf}}, "tap 9 is not a finite number"},
  };
  for (const Bad& b : bad) {
    try {
      engine->set_paths(b.updates, true);
      ADD_FAILURE() << "accepted; expected " << b.says;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(b.says), std::string::npos) << e.what();
    }
  }
  // Nothing was installed: the output is that of the initial matrix.
  const auto got = run_with_updates(*engine, inputs, sizes, {});
  for (std::size_t o = 0; o < 3; ++o)
    EXPECT_LE(relative_error(got[o], testing::reference_output(matrix, inputs, o)), 1e-5) << o;
}

INSTANTIATE_TEST_SUITE_P(CpuEngines, PathUpdates,
                         ::testing::Values(Kind::native_cpu, Kind::diagonal_cpu),
                         [](const auto& info) {
                           return std::string(info.param == Kind::native_cpu ? "NativeMatrix"
                                                                             : "Diagonal");
                         });

// The real-time face: post_paths off the audio thread, prepared on the
// engine's own thread, taken by process_by at a call boundary.
TEST(PathUpdates, PostedPathsReachTheRealtimeFaceAtACallBoundaryCrossfaded) {
  const std::uint64_t seed = announce("posted paths", 2519);
  const RoutingMatrix matrix = test_diagonal(seed);
  EngineOptions options;
  options.max_block_frames = 64;
  options.max_taps = kMaxTaps;
  options.realtime_calls = true;
  options.cpu.threads = 1;
  DiagonalEngine engine(make_cpu_engine(*matrix.diagonal_bank(), options), EngineTransport{},
                        &matrix);
  RealtimeMatrixEngine* realtime = engine.realtime();
  ASSERT_NE(realtime, nullptr);
  const std::size_t block = 64, calls = 60, update_at = 25;
  std::vector<std::vector<float>> inputs;
  for (std::size_t c = 0; c < 3; ++c) inputs.push_back(random_signal(calls * block, seed + 7 + c));
  Schedule schedule;
  schedule[update_at][1] = random_signal(120, seed + 60);
  schedule[update_at][2] = random_signal(500, seed + 61);
  std::vector<float> in(3 * block), out(3 * block);
  std::vector<std::vector<float>> got(3, std::vector<float>(calls * block));
  timespec far{};
  clock_gettime(CLOCK_MONOTONIC, &far);
  far.tv_sec += 3600;  // unpaced: every tail is waited for
  for (std::size_t call = 0; call < calls; ++call) {
    if (call == update_at) {
      const std::vector<PathTaps> updates{{1, schedule[update_at][1]}, {2, schedule[update_at][2]}};
      realtime->post_paths(updates, true);
      ASSERT_TRUE(testing::wait_until(
          testing::long_wait, [&] { return !realtime->preparing_matrix(); },
          "the engine's preparer done", std::chrono::milliseconds(1)));
    }
    for (std::size_t c = 0; c < 3; ++c)
      for (std::size_t f = 0; f < block; ++f) in[c * block + f] = inputs[c][call * block + f];
    ASSERT_TRUE(realtime->process_by(in, out, block, Layout::planar, far)) << "call " << call;
    for (std::size_t c = 0; c < 3; ++c)
      for (std::size_t f = 0; f < block; ++f) got[c][call * block + f] = out[c * block + f];
  }
  const auto want =
      piecewise_reference(matrix, inputs, std::vector<std::size_t>(calls, block), schedule);
  for (std::size_t o = 0; o < 3; ++o) EXPECT_LE(relative_error(got[o], want[o]), 1e-5) << o;
}

TEST(PathUpdates, TheEngineFactorysEnginesTakePathUpdates) {
  const std::uint64_t seed = announce("factory engines", 2518);
  for (const RoutingMatrix& matrix : {test_matrix(seed), test_diagonal(seed)}) {
    EngineOptions options;
    options.max_block_frames = 64;
    options.max_taps = kMaxTaps;
    const auto engine = make_engine(Backend::cpu, matrix, options);
    const std::vector<float> taps = random_signal(50, seed + 1);
    const std::vector<PathTaps> update{{1, taps}};
    EXPECT_NO_THROW(engine->set_paths(update, true)) << engine->description();
  }
}

}  // namespace
}  // namespace tapstream

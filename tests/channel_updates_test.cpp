// Per-channel updates (Engine::set_channel_filters, through
// DiagonalEngine::set_paths) on the CPU engines: the uniform engine in both
// its forms (direct, partitioned FFT) and the non-uniformly partitioned
// engine transform and crossfade the named channels only. The checks are
// shared with the CUDA engine's (channel_updates_support.hpp).

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "channel_updates_support.hpp"
#include "dsp/cpu/cpu_engine.hpp"
#include "wait_for.hpp"

namespace tapstream {
namespace {

using testing::announce;
using testing::EngineMaker;

enum class Form { direct, fft };

EngineMaker uniform(Form form) {
  return [form](const FilterBank& bank, std::size_t max_block, std::size_t max_taps) {
    EngineOptions options;
    options.max_block_frames = max_block;
    options.max_taps = max_taps;
    options.algorithm = form == Form::direct ? Algorithm::direct : Algorithm::fft;
    options.cpu.threads = 1;
    return make_cpu_engine(bank, options);
  };
}

class UniformChannelUpdates : public ::testing::TestWithParam<Form> {};

TEST_P(UniformChannelUpdates, UpdatesAtRandomCallSplitsMatchTheFloat64Reference) {
  const std::uint64_t seed = announce("channel updates", 2521);
  testing::expect_updates_match_reference(uniform(GetParam()), 6, 1500, 256, 9000, seed);
}

TEST_P(UniformChannelUpdates, HalfTheChannelsChangingBeforeEveryCallMatchTheFloat64Reference) {
  const std::uint64_t seed = announce("many channels", 2522);
  testing::expect_many_channels_every_call(uniform(GetParam()), 24, 700, 128, 30, seed);
}

TEST_P(UniformChannelUpdates, UpdatesBeforeOneCallAddUpAlsoOnAWholeMatrixPendingBeforeThem) {
  const std::uint64_t seed = announce("updates before one call", 2539);
  testing::expect_updates_before_a_call_add_up(uniform(GetParam()), 900, 128, seed);
}

TEST_P(UniformChannelUpdates, ChannelsNoUpdateNamesStayBitIdenticalToARunWithoutUpdates) {
  const std::uint64_t seed = announce("untouched channels", 2523);
  testing::expect_untouched_channels_bit_identical(uniform(GetParam()), 5, 1500, 256, 8000, seed);
}

TEST_P(UniformChannelUpdates, BadChannelsAreRefusedNamingTheChannelAndTheEngineRunsOnUnchanged) {
  const std::uint64_t seed = announce("bad channels", 2524);
  testing::expect_bad_channels_refused(uniform(GetParam()), 900, 128, seed);
}

TEST_P(UniformChannelUpdates, AnUpdateTransformsAndCrossfadesItsChannelsOnly) {
  const std::uint64_t seed = announce("update cost", 2525);
  testing::expect_cost_of_changed_channels_only(uniform(GetParam()), 900, 128, seed);
}

INSTANTIATE_TEST_SUITE_P(CpuEngine, UniformChannelUpdates,
                         ::testing::Values(Form::direct, Form::fft), [](const auto& info) {
                           return std::string(info.param == Form::direct ? "Direct" : "Fft");
                         });

TEST(UniformChannelUpdates, AOneFilterBankTakesTheWholeBankFallbackAndThenUpdatesPerChannel) {
  const std::uint64_t seed = announce("shared bank", 2526);
  const std::size_t block = 64, calls = 40;
  const RoutingMatrix matrix =
      RoutingMatrix::diagonal(FilterBank::shared(testing::random_signal(300, seed), 4));
  const auto engine = testing::diagonal_engine(uniform(Form::fft), matrix, block, 600);
  // One shared filter: the engine says no, the diagonal hands over a whole bank.
  std::vector<float> taps = testing::random_signal(500, seed + 1);
  const std::vector<PathTaps> update{{2, taps}};
  auto probe = uniform(Form::fft)(*matrix.diagonal_bank(), block, 600);
  EXPECT_FALSE(probe->set_channel_filters(update, true));
  testing::Schedule schedule;
  schedule[3][2] = taps;
  schedule[9][0] = testing::random_signal(100, seed + 2);
  schedule[10][3] = testing::random_signal(600, seed + 3);
  const std::vector<std::size_t> sizes(calls, block);
  const testing::Signals inputs = testing::channel_inputs(4, calls * block, seed);
  const auto got = testing::run_with_updates(*engine, inputs, sizes, schedule);
  const auto want = testing::piecewise_reference(matrix, inputs, sizes, schedule);
  for (std::size_t c = 0; c < 4; ++c)
    EXPECT_LE(testing::relative_error(got[c], want[c]), 1e-5) << "channel " << c;
}

// The non-uniformly partitioned engine (the live engine: head in the call,
// tails on threads of their own), as the factory makes it for calls in an
// audio callback. Its preparer and tail workers make an update ready on
// threads of their own, and the first call after that installs it
// (dsp/cpu/cpu_nonuniform_engine.cpp); the tests wait for them before the
// next call, so that runs repeat and the update plays from that call on.
EngineMaker nonuniform() {
  return [](const FilterBank& bank, std::size_t max_block, std::size_t max_taps) {
    EngineOptions options;
    options.max_block_frames = max_block;
    options.max_taps = max_taps;
    options.realtime_calls = true;
    options.cpu.threads = 1;
    return make_cpu_engine(bank, options);
  };
}

void wait_for_preparer(Engine& engine) {
  RealtimeEngine* realtime = engine.realtime();
  ASSERT_NE(realtime, nullptr);
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait, [&] { return !realtime->preparing_filters(); },
      "the engine's preparer done", std::chrono::milliseconds(1)));
}

void settle_matrix(MatrixEngine& engine) {
  RealtimeMatrixEngine* realtime = engine.realtime();
  ASSERT_NE(realtime, nullptr);
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait, [&] { return !realtime->preparing_matrix(); },
      "the engine's preparer and tail workers done", std::chrono::milliseconds(1)));
}

// The filters of the tests below reach several tail segments, which an
// update used to reach only at their own switch frames, up to the last
// segment's first tap after the call it was due for.
void expect_several_tail_segments(std::size_t taps) {
  const testing::Signals one(1, std::vector<float>(taps, 0.5f));
  const auto engine = nonuniform()(FilterBank::per_channel(one), 64, taps);
  const std::string plan = engine->description();
  ASSERT_GE(std::count(plan.begin(), plan.end(), '+'), 2) << plan;
}

// Runs `inputs` in calls of `block`; before call k, `update(engine, k)`.
testing::Signals run_nonuniform(Engine& engine, const testing::Signals& inputs, std::size_t block,
                                const std::function<void(Engine&, std::size_t)>& update) {
  const std::size_t channels = inputs.size(), calls = inputs[0].size() / block;
  testing::Signals got(channels, std::vector<float>(calls * block));
  std::vector<float> in(channels * block), out(channels * block);
  for (std::size_t call = 0; call < calls; ++call) {
    update(engine, call);
    for (std::size_t c = 0; c < channels; ++c)
      for (std::size_t f = 0; f < block; ++f) in[c * block + f] = inputs[c][call * block + f];
    engine.process(in, out, block, Layout::planar);
    for (std::size_t c = 0; c < channels; ++c)
      for (std::size_t f = 0; f < block; ++f) got[c][call * block + f] = out[c * block + f];
  }
  return got;
}

TEST(NonUniformChannelUpdates, ChangedChannelsPlayAsAWholeBankSwapAndTheOthersAsBefore) {
  const std::uint64_t seed = announce("non-uniform channel updates", 2527);
  const std::size_t channels = 8, taps = 8000, block = 64, calls = 260;
  const RoutingMatrix matrix = testing::channel_matrix(channels, taps, seed);
  const testing::Signals inputs = testing::channel_inputs(channels, calls * block, seed);
  // Two updates on consecutive calls (the second offered right after the
  // first's install call), then two far apart.
  testing::Schedule schedule;
  schedule[10][1] = testing::random_signal(7500, seed + 1);
  schedule[10][4] = testing::random_signal(40, seed + 2);
  schedule[11][6] = testing::random_signal(7999, seed + 3);
  schedule[11][1] = testing::random_signal(700, seed + 4);
  schedule[90][0] = testing::random_signal(5000, seed + 5);
  schedule[160][4] = testing::random_signal(8000, seed + 6);
  schedule[160][6] = testing::random_signal(1, seed + 7);
  const std::vector<std::size_t> changed = {0, 1, 4, 6}, untouched = {2, 3, 5, 7};
  const auto first = nonuniform()(*matrix.diagonal_bank(), block, taps);
  ASSERT_NE(first->realtime(), nullptr) << first->description();
  // Tail segments on threads of their own (a plan of the head alone would not test them).
  ASSERT_EQ(first->description().find("tails on 0 "), std::string::npos) << first->description();

  // By channel: the bank of the moment, for the whole-bank run.
  std::vector<std::vector<float>> now;
  const std::shared_ptr<const FilterBank> initial = matrix.diagonal_bank();
  for (std::size_t c = 0; c < channels; ++c) {
    const auto t = initial->taps(c);
    now.emplace_back(t.begin(), t.end());
  }
  const auto by_channel = run_nonuniform(*first, inputs, block, [&](Engine& e, std::size_t call) {
    const auto found = schedule.find(call);
    if (found == schedule.end()) return;
    std::vector<PathTaps> updates;
    for (const auto& [c, t] : found->second) updates.push_back({c, t});
    ASSERT_TRUE(e.set_channel_filters(updates, true));
    wait_for_preparer(e);
  });
  const auto whole = run_nonuniform(*nonuniform()(*matrix.diagonal_bank(), block, taps), inputs,
                                    block, [&](Engine& e, std::size_t call) {
                                      const auto found = schedule.find(call);
                                      if (found == schedule.end()) return;
                                      for (const auto& [c, t] : found->second) now[c] = t;
                                      e.set_filters(FilterBank::per_channel(now), true);
                                      wait_for_preparer(e);
                                    });
  const auto still = run_nonuniform(*nonuniform()(*matrix.diagonal_bank(), block, taps), inputs,
                                    block, [](Engine&, std::size_t) {});
  // The whole bank fades every channel at each swap, also those an update
  // leaves alone (the same filter on both sides: rounding apart, the same
  // output), so a changed channel matches it to rounding, not to the bit.
  for (const std::size_t c : changed)
    EXPECT_LE(testing::relative_error(by_channel[c], whole[c]), 1e-6) << "channel " << c;
  for (const std::size_t c : untouched) EXPECT_EQ(by_channel[c], still[c]) << "channel " << c;
  // Long after the last update: the final filters, against float64.
  const std::size_t from = 200 * block, frames = calls * block;
  for (std::size_t c = 0; c < channels; ++c) {
    const std::vector<double> want = testing::reference_convolution(inputs[c], now[c]);
    const std::span<const float> got_tail(by_channel[c].data() + from, frames - from);
    EXPECT_LE(testing::relative_error(got_tail, std::span<const double>(want).subspan(from)), 1e-5)
        << "channel " << c;
  }
}

TEST(NonUniformChannelUpdates, PostedChannelsReachTheRealtimeFaceOnlyTheirChannelsChanging) {
  const std::uint64_t seed = announce("posted channels", 2528);
  const std::size_t channels = 4, taps = 8000, block = 64, calls = 120;
  const RoutingMatrix matrix = testing::channel_matrix(channels, taps, seed);
  const testing::Signals inputs = testing::channel_inputs(channels, calls * block, seed);
  const auto engine = testing::diagonal_engine(nonuniform(), matrix, block, taps);
  RealtimeMatrixEngine* realtime = engine->realtime();
  ASSERT_NE(realtime, nullptr);
  const std::vector<float> taps2 = testing::random_signal(6000, seed + 9);
  std::vector<float> in(channels * block), out(channels * block);
  testing::Signals got(channels, std::vector<float>(calls * block));
  timespec far{};
  clock_gettime(CLOCK_MONOTONIC, &far);
  far.tv_sec += 3600;  // unpaced: every tail is waited for
  for (std::size_t call = 0; call < calls; ++call) {
    if (call == 20) {
      const std::vector<PathTaps> updates{{2, taps2}};
      realtime->post_paths(updates, true);
      ASSERT_TRUE(testing::wait_until(
          testing::long_wait, [&] { return !realtime->preparing_matrix(); },
          "the engine's preparer done", std::chrono::milliseconds(1)));
    }
    for (std::size_t c = 0; c < channels; ++c)
      for (std::size_t f = 0; f < block; ++f) in[c * block + f] = inputs[c][call * block + f];
    ASSERT_TRUE(realtime->process_by(in, out, block, Layout::planar, far)) << "call " << call;
    for (std::size_t c = 0; c < channels; ++c)
      for (std::size_t f = 0; f < block; ++f) got[c][call * block + f] = out[c * block + f];
  }
  const auto still = run_nonuniform(*nonuniform()(*matrix.diagonal_bank(), block, taps), inputs,
                                    block, [](Engine&, std::size_t) {});
  for (const std::size_t c : {0, 1, 3}) EXPECT_EQ(got[c], still[c]) << "channel " << c;
  MatrixPath path = matrix.paths()[2].without_taps();
  path.taps = taps2;
  const std::vector<double> want = testing::reference_convolution(inputs[2], path.effective_taps());
  const std::size_t from = 80 * block;
  EXPECT_LE(testing::relative_error(std::span<const float>(got[2]).subspan(from),
                                    std::span<const double>(want).subspan(from)),
            1e-5);
  EXPECT_NE(got[2], still[2]);
}

TEST(NonUniformChannelUpdates, UpdatesAtRandomCallSplitsPlayFromTheNextCallAsTheFloat64Reference) {
  const std::uint64_t seed = announce("non-uniform updates at the next call", 2531);
  expect_several_tail_segments(8000);
  testing::expect_updates_match_reference(nonuniform(), 6, 8000, 64, 30000, seed, settle_matrix);
}

TEST(NonUniformChannelUpdates, HalfTheChannelsChangingBeforeEveryCallMatchTheFloat64Reference) {
  const std::uint64_t seed = announce("non-uniform updates every call", 2532);
  testing::expect_many_channels_every_call(nonuniform(), 12, 6000, 64, 220, seed, settle_matrix);
}

TEST(NonUniformChannelUpdates, UpdatesBeforeOneCallAddUpAlsoOnAWholeMatrixPendingBeforeThem) {
  const std::uint64_t seed = announce("non-uniform updates before one call", 2533);
  testing::expect_updates_before_a_call_add_up(nonuniform(), 6000, 64, seed, settle_matrix);
}

TEST(NonUniformChannelUpdates, ChannelsNoUpdateNamesStayBitIdenticalToARunWithoutUpdates) {
  const std::uint64_t seed = announce("non-uniform untouched channels", 2534);
  testing::expect_untouched_channels_bit_identical(nonuniform(), 5, 6000, 64, 16000, seed,
                                                   settle_matrix);
}

// The audio thread's face: updates posted before every call (and a whole
// matrix among them) crossfade over that call and play from the next on,
// against the float64 reference, with every call in time.
TEST(NonUniformChannelUpdates, UpdatesPostedBeforeEveryCallPlayFromThatCallOnTheRealtimeFace) {
  const std::uint64_t seed = announce("non-uniform posted every call", 2535);
  const std::size_t channels = 6, taps = 8000, block = 64, calls = 200;
  const RoutingMatrix matrix = testing::channel_matrix(channels, taps, seed);
  const testing::Signals inputs = testing::channel_inputs(channels, calls * block, seed);
  testing::Schedule schedule = testing::channel_updates(matrix, calls, 1, 2, taps, seed + 1);
  for (std::size_t c = 0; c < channels; ++c)  // call 77: every channel, as a whole matrix
    schedule[77][c] = testing::random_signal(1 + (c * 1231) % (taps - 20), seed + 50 + c);
  const auto engine = testing::diagonal_engine(nonuniform(), matrix, block, taps);
  RealtimeMatrixEngine* realtime = engine->realtime();
  ASSERT_NE(realtime, nullptr);
  std::vector<float> in(channels * block), out(channels * block);
  testing::Signals got(channels, std::vector<float>(calls * block));
  timespec far{};
  clock_gettime(CLOCK_MONOTONIC, &far);
  far.tv_sec += 3600;  // unpaced: every tail is waited for
  for (std::size_t call = 0; call < calls; ++call) {
    if (const auto found = schedule.find(call); found != schedule.end()) {
      std::vector<PathTaps> updates;
      for (const auto& [c, t] : found->second) updates.push_back({c, t});
      if (updates.size() == channels) {
        realtime->post_matrix(with_path_taps(matrix, updates, taps), true);
      } else {
        realtime->post_paths(updates, true);
      }
      settle_matrix(*engine);
    }
    for (std::size_t c = 0; c < channels; ++c)
      for (std::size_t f = 0; f < block; ++f) in[c * block + f] = inputs[c][call * block + f];
    ASSERT_TRUE(realtime->process_by(in, out, block, Layout::planar, far)) << "call " << call;
    for (std::size_t c = 0; c < channels; ++c)
      for (std::size_t f = 0; f < block; ++f) got[c][call * block + f] = out[c * block + f];
  }
  const auto want = testing::piecewise_reference(matrix, inputs,
                                                 std::vector<std::size_t>(calls, block), schedule);
  for (std::size_t c = 0; c < channels; ++c)
    EXPECT_LE(testing::relative_error(got[c], want[c]), 1e-5) << "channel " << c;
}

// Updates and whole banks posted from another thread while calls run, none
// waited for: none is lost (the output ends as the last filters' exactly),
// whatever the order in which they meet the calls and the tail workers.
TEST(NonUniformChannelUpdates, UpdatesAndWholeBanksPostedWhileCallsRunEndOnTheLastFilters) {
  const std::uint64_t seed = announce("non-uniform posted while calls run", 2536);
  const std::size_t channels = 4, taps = 8000, block = 64, calls = 700;
  const RoutingMatrix matrix = testing::channel_matrix(channels, taps, seed);
  const testing::Signals inputs = testing::channel_inputs(channels, calls * block, seed);
  const auto engine = testing::diagonal_engine(nonuniform(), matrix, block, taps);
  RealtimeMatrixEngine* realtime = engine->realtime();
  ASSERT_NE(realtime, nullptr);
  std::vector<std::vector<float>> now;
  for (const MatrixPath& p : matrix.paths()) now.push_back(p.taps);
  std::atomic<std::size_t> calls_done{0};
  std::atomic<bool> posted_all{false};
  std::thread poster([&] {
    std::mt19937_64 rng(seed + 1);
    for (std::size_t k = 0; k < 60; ++k) {
      // Wait for a few calls (random), so that posts meet calls at random points.
      const std::size_t after = calls_done.load() + rng() % 3;
      while (calls_done.load() < after && calls_done.load() < 400) std::this_thread::yield();
      if (k % 10 == 9) {
        std::vector<PathTaps> all;
        for (std::size_t c = 0; c < channels; ++c) {
          now[c] = testing::random_signal(1 + rng() % (taps - 20), seed + 1000 + k * 8 + c);
          all.push_back({c, now[c]});
        }
        realtime->post_matrix(with_path_taps(matrix, all, taps), true);
      } else {
        const std::size_t c = rng() % channels;
        now[c] = testing::random_signal(1 + rng() % (taps - 20), seed + 2000 + k);
        const std::vector<PathTaps> one{{c, now[c]}};
        realtime->post_paths(one, true);
      }
    }
    posted_all.store(true);
  });
  std::vector<float> in(channels * block), out(channels * block);
  testing::Signals got(channels, std::vector<float>(calls * block));
  timespec far{};
  clock_gettime(CLOCK_MONOTONIC, &far);
  far.tv_sec += 3600;
  for (std::size_t call = 0; call < calls; ++call) {
    if (call == 450) {  // the posts are over (the poster stops waiting at call 400)
      ASSERT_TRUE(testing::wait_until(
          testing::long_wait, [&] { return posted_all.load(); }, "the poster done",
          std::chrono::milliseconds(1)));
      settle_matrix(*engine);
    }
    for (std::size_t c = 0; c < channels; ++c)
      for (std::size_t f = 0; f < block; ++f) in[c * block + f] = inputs[c][call * block + f];
    ASSERT_TRUE(realtime->process_by(in, out, block, Layout::planar, far)) << "call " << call;
    calls_done.store(call + 1);
    for (std::size_t c = 0; c < channels; ++c)
      for (std::size_t f = 0; f < block; ++f) got[c][call * block + f] = out[c * block + f];
  }
  poster.join();
  // Call 450 installs whatever was still on its way; from the call after it
  // on, the last filters' convolution of the whole input.
  const std::size_t from = 451 * block;
  for (std::size_t c = 0; c < channels; ++c) {
    MatrixPath path = matrix.paths()[c].without_taps();
    path.taps = now[c];
    const std::vector<double> want =
        testing::reference_convolution(inputs[c], path.effective_taps());
    EXPECT_LE(testing::relative_error(std::span<const float>(got[c]).subspan(from),
                                      std::span<const double>(want).subspan(from)),
              1e-5)
        << "channel " << c;
  }
}

// reset() installs an update its workers have adopted, unfaded: the fresh
// stream plays it from its first call; one posted after the reset plays from
// the next call, faded over it, as in a stream never reset.
TEST(NonUniformChannelUpdates, AnUpdateBeforeAResetPlaysFromTheFreshStreamsFirstCall) {
  const std::uint64_t seed = announce("non-uniform update before a reset", 2537);
  const std::size_t channels = 3, taps = 8000, block = 64, calls = 180;
  const RoutingMatrix matrix = testing::channel_matrix(channels, taps, seed);
  const testing::Signals inputs = testing::channel_inputs(channels, calls * block, seed);
  const auto engine = testing::diagonal_engine(nonuniform(), matrix, block, taps);
  const std::vector<std::size_t> sizes(calls, block);
  testing::run_with_updates(*engine, inputs, std::vector<std::size_t>(40, block), {});
  const std::vector<float> h = testing::random_signal(taps - 30, seed + 1);
  const std::vector<PathTaps> update{{1, h}};
  engine->set_paths(update, true);
  settle_matrix(*engine);
  engine->reset();
  testing::Schedule schedule;  // after the reset: channel 2 at call 90
  schedule[90][2] = testing::random_signal(taps / 2, seed + 2);
  const auto got = testing::run_with_updates(*engine, inputs, sizes, schedule,
                                             testing::settled_updates(settle_matrix));
  std::vector<PathTaps> all{{1, h}};
  const RoutingMatrix reset_with = with_path_taps(matrix, all, taps);
  const auto want = testing::piecewise_reference(reset_with, inputs, sizes, schedule);
  for (std::size_t c = 0; c < channels; ++c)
    EXPECT_LE(testing::relative_error(got[c], want[c]), 1e-5) << "channel " << c;
}

TEST(NonUniformChannelUpdates, BadChannelsAreRefusedNamingTheChannelAndTheEngineRunsOnUnchanged) {
  const std::uint64_t seed = announce("non-uniform bad channels", 2529);
  testing::expect_bad_channels_refused(nonuniform(), 8000, 64, seed);
}

TEST(NonUniformChannelUpdates, AnUpdateTransformsAndCrossfadesItsChannelsOnly) {
  const std::uint64_t seed = announce("non-uniform update cost", 2530);
  testing::expect_cost_of_changed_channels_only(nonuniform(), 6000, 64, seed, wait_for_preparer);
}

}  // namespace
}  // namespace tapstream

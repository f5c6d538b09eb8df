#pragma once
// Test support for per-channel updates (Engine::set_channel_filters, reached
// through DiagonalEngine::set_paths): one set of checks, run on every
// per-channel engine that takes them natively (tests/channel_updates_test.cpp
// for the CPU engines, tests/cuda_channel_updates_test.cpp for the CUDA
// engine's partitioned path). The references are those of per-path updates
// (path_updates_support.hpp): the diagonal matrix's path c is channel c.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsp/model/channel_work.hpp"
#include "dsp/model/diagonal_engine.hpp"
#include "matrix_support.hpp"
#include "path_updates_support.hpp"
#include "reference.hpp"

namespace tapstream::testing {

// Makes the per-channel engine under test for `bank`.
using EngineMaker = std::function<std::unique_ptr<Engine>(
    const FilterBank& bank, std::size_t max_block, std::size_t max_taps)>;

// `channels` channels, path c: input c -> output c, of 1/4..all of `longest`
// taps, with gains, an inverted path and a delay (folded into the taps).
inline RoutingMatrix channel_matrix(std::size_t channels, std::size_t longest, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<MatrixPath> paths;
  for (std::size_t c = 0; c < channels; ++c) {
    const std::size_t delay = c == 1 ? 17 : 0;
    const std::size_t length = longest / 4 + rng() % (longest - longest / 4 - delay);
    paths.push_back(make_path(c, c, random_signal(length, seed + 100 + c),
                              double(int(rng() % 13) - 6), delay, c == 2));
  }
  return RoutingMatrix::make(channels, channels, std::move(paths));
}

inline std::unique_ptr<DiagonalEngine> diagonal_engine(const EngineMaker& make,
                                                       const RoutingMatrix& matrix,
                                                       std::size_t max_block,
                                                       std::size_t max_taps) {
  return std::make_unique<DiagonalEngine>(make(*matrix.diagonal_bank(), max_block, max_taps),
                                          EngineTransport{}, &matrix);
}

// Before every `every`-th call from call 1 on, `per_update` random channels
// (never `never`) take random taps of a random length within max_taps.
inline Schedule channel_updates(const RoutingMatrix& matrix, std::size_t calls, std::size_t every,
                                std::size_t per_update, std::size_t max_taps, std::uint64_t seed,
                                std::size_t never = std::numeric_limits<std::size_t>::max()) {
  std::mt19937_64 rng(seed);
  Schedule schedule;
  const std::size_t channels = matrix.paths().size();
  for (std::size_t call = 1; call < calls; call += every) {
    for (std::size_t k = 0; k < per_update; ++k) {
      const std::size_t c = rng() % channels;
      if (c == never) continue;
      const std::size_t reach = max_taps - matrix.paths()[c].delay_frames;
      const std::size_t length = 1 + rng() % reach;
      schedule[call][c] = random_signal(length, seed + 7919 * call + c);
    }
  }
  return schedule;
}

inline Signals channel_inputs(std::size_t channels, std::size_t frames, std::uint64_t seed) {
  Signals inputs;
  for (std::size_t c = 0; c < channels; ++c) inputs.push_back(random_signal(frames, seed + 31 + c));
  return inputs;
}

// Waits for what an engine prepares on threads of its own (null: nothing to
// wait for), so that runs repeat: the checks below call it after each update.
using Settle = std::function<void(MatrixEngine&)>;

// Applies `updates` (crossfade on), then settles.
inline std::function<void(MatrixEngine&, const std::vector<PathTaps>&)> settled_updates(
    const Settle& settle) {
  if (!settle) return {};
  return [settle](MatrixEngine& engine, const std::vector<PathTaps>& updates) {
    engine.set_paths(updates, /*crossfade=*/true);
    settle(engine);
  };
}

inline std::size_t total(const std::vector<std::size_t>& sizes) {
  std::size_t n = 0;
  for (const std::size_t s : sizes) n += s;
  return n;
}

// Updates of a few channels at random call splits: every channel equals the
// float64 reference in which a changed channel crossfades over the call after
// its update and plays its new filter from the call after that on.
inline void expect_updates_match_reference(const EngineMaker& make, std::size_t channels,
                                           std::size_t max_taps, std::size_t max_block,
                                           std::size_t frames, std::uint64_t seed,
                                           const Settle& settle = {}) {
  const RoutingMatrix matrix = channel_matrix(channels, max_taps, seed);
  const std::vector<std::size_t> sizes = random_block_sizes(frames, max_block, seed + 1);
  const Signals inputs = channel_inputs(channels, frames, seed);
  const Schedule schedule = channel_updates(matrix, sizes.size(), 3, 3, max_taps, seed + 2);
  const auto engine = diagonal_engine(make, matrix, max_block, max_taps);
  const auto got = run_with_updates(*engine, inputs, sizes, schedule, settled_updates(settle));
  const auto want = piecewise_reference(matrix, inputs, sizes, schedule);
  for (std::size_t c = 0; c < channels; ++c)
    EXPECT_LE(relative_error(got[c], want[c]), 1e-5) << "channel " << c;
}

// Many channels (half of them) change before every call.
inline void expect_many_channels_every_call(const EngineMaker& make, std::size_t channels,
                                            std::size_t max_taps, std::size_t block,
                                            std::size_t calls, std::uint64_t seed,
                                            const Settle& settle = {}) {
  const RoutingMatrix matrix = channel_matrix(channels, max_taps, seed);
  const std::vector<std::size_t> sizes(calls, block);
  const Signals inputs = channel_inputs(channels, calls * block, seed);
  const Schedule schedule = channel_updates(matrix, calls, 1, channels / 2 + 1, max_taps, seed + 3);
  const auto engine = diagonal_engine(make, matrix, block, max_taps);
  const auto got = run_with_updates(*engine, inputs, sizes, schedule, settled_updates(settle));
  const auto want = piecewise_reference(matrix, inputs, sizes, schedule);
  for (std::size_t c = 0; c < channels; ++c)
    EXPECT_LE(relative_error(got[c], want[c]), 1e-5) << "channel " << c;
}

// Two updates before one call add up (a channel named in both takes the
// later taps), also on top of a whole matrix swapped in before them.
inline void expect_updates_before_a_call_add_up(const EngineMaker& make, std::size_t max_taps,
                                                std::size_t block, std::uint64_t seed,
                                                const Settle& settle = {}) {
  const std::size_t channels = 4, calls = 16;
  const RoutingMatrix matrix = channel_matrix(channels, max_taps, seed);
  const Signals inputs = channel_inputs(channels, calls * block, seed);
  const std::vector<float> a = random_signal(max_taps / 3, seed + 30),
                           b = random_signal(max_taps - 20, seed + 31),  // path 1's delay
      c = random_signal(7, seed + 32), d = random_signal(max_taps / 2, seed + 33);
  std::vector<std::vector<float>> whole;
  for (std::size_t ch = 0; ch < channels; ++ch)
    whole.push_back(random_signal(1 + (ch * 997 + 13) % (max_taps - 20), seed + 40 + ch));
  Schedule schedule;
  schedule[5][0] = a;
  schedule[5][1] = c;
  for (std::size_t ch = 0; ch < channels; ++ch) schedule[9][ch] = whole[ch];
  schedule[9][2] = d;
  const auto engine = diagonal_engine(make, matrix, block, max_taps);
  const auto got =
      run_with_updates(*engine, inputs, std::vector<std::size_t>(calls, block), schedule,
                       [&](MatrixEngine& e, const std::vector<PathTaps>& updates) {
                         if (updates.size() == 2) {  // call 5: {0: a, 1: b}, then {1: c}
                           const std::vector<PathTaps> first{{0, a}, {1, b}}, second{{1, c}};
                           e.set_paths(first, true);
                           e.set_paths(second, true);
                           if (settle) settle(e);
                           return;
                         }
                         // Call 9: the whole matrix, then {2: d} on top of it before the call.
                         std::vector<PathTaps> all;
                         for (std::size_t ch = 0; ch < channels; ++ch)
                           all.push_back({ch, whole[ch]});
                         e.set_matrix(with_path_taps(matrix, all, max_taps), true);
                         const std::vector<PathTaps> on_top{{2, d}};
                         e.set_paths(on_top, true);
                         if (settle) settle(e);
                       });
  const auto want =
      piecewise_reference(matrix, inputs, std::vector<std::size_t>(calls, block), schedule);
  for (std::size_t ch = 0; ch < channels; ++ch)
    EXPECT_LE(relative_error(got[ch], want[ch]), 1e-5) << "channel " << ch;
}

// A channel no update names plays exactly as in a run without updates.
inline void expect_untouched_channels_bit_identical(const EngineMaker& make, std::size_t channels,
                                                    std::size_t max_taps, std::size_t max_block,
                                                    std::size_t frames, std::uint64_t seed,
                                                    const Settle& settle = {}) {
  const RoutingMatrix matrix = channel_matrix(channels, max_taps, seed);
  const std::vector<std::size_t> sizes = random_block_sizes(frames, max_block, seed + 1);
  const Signals inputs = channel_inputs(channels, frames, seed);
  const std::size_t untouched = channels - 1;
  const Schedule schedule =
      channel_updates(matrix, sizes.size(), 2, channels, max_taps, seed + 4, untouched);
  const auto still =
      run_with_updates(*diagonal_engine(make, matrix, max_block, max_taps), inputs, sizes, {});
  const auto moving = run_with_updates(*diagonal_engine(make, matrix, max_block, max_taps), inputs,
                                       sizes, schedule, settled_updates(settle));
  EXPECT_EQ(still[untouched], moving[untouched]);
  EXPECT_NE(still[0], moving[0]);  // the others did change
}

// Bad updates are refused naming the channel (or, through the diagonal, the
// path), and the engine runs on as it was.
inline void expect_bad_channels_refused(const EngineMaker& make, std::size_t max_taps,
                                        std::size_t block, std::uint64_t seed) {
  const std::size_t channels = 6, calls = 30;
  const RoutingMatrix matrix = channel_matrix(channels, max_taps, seed);
  const Signals inputs = channel_inputs(channels, calls * block, seed);
  std::unique_ptr<Engine> engine = make(*matrix.diagonal_bank(), block, max_taps);
  const std::vector<float> good = random_signal(10, seed + 40);
  std::vector<float> nan = good;
  nan[3] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> too_long(max_taps + 1, 0.1f);
  struct Bad {
    std::vector<PathTaps> updates;
    std::string says;
  };
  const std::vector<Bad> bad = {
      {{{1, good}, {3, nan}}, "channel 3: tap 3 is not a finite number"},
      {{{5, too_long}}, "channel 5: " + std::to_string(max_taps + 1) + " taps"},
      {{{channels, good}}, "channel " + std::to_string(channels) + ": no such channel"},
      {{{2, good}, {2, good}}, "channel 2: named twice"},
  };
  for (const Bad& b : bad) {
    try {
      engine->set_channel_filters(b.updates, true);
      ADD_FAILURE() << "accepted; expected " << b.says;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(b.says), std::string::npos) << e.what();
    }
  }
  DiagonalEngine diagonal(std::move(engine), EngineTransport{}, &matrix);
  try {
    const std::vector<PathTaps> updates{{0, good}, {4, nan}};
    diagonal.set_paths(updates, true);
    ADD_FAILURE() << "a NaN accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("path 4 (input 4 -> output 4): tap 3"), std::string::npos)
        << e.what();
  }
  // Nothing was installed: the output is that of the initial filters.
  const auto got = run_with_updates(diagonal, inputs, std::vector<std::size_t>(calls, block), {});
  for (std::size_t c = 0; c < channels; ++c)
    EXPECT_LE(relative_error(got[c], reference_output(matrix, inputs, c)), 1e-5) << c;
}

// An update of 3 channels out of 64 costs 3/64 of a whole bank: the channel
// filters transformed and the channels crossfaded over the calls after it
// are counted (not timed), against those of the same engine taking the
// whole bank. `settle`, when set, waits for what the engine prepares
// elsewhere; the calls span the longest filter, by which every engine has
// taken the update.
inline void expect_cost_of_changed_channels_only(const EngineMaker& make, std::size_t max_taps,
                                                 std::size_t block, std::uint64_t seed,
                                                 const std::function<void(Engine&)>& settle = {}) {
  const std::size_t channels = 64, changed = 3;
  const RoutingMatrix matrix = channel_matrix(channels, max_taps, seed);
  std::unique_ptr<Engine> engine = make(*matrix.diagonal_bank(), block, max_taps);
  std::vector<float> in(channels * block, 0.25f), out(channels * block);
  const auto calls = [&] {
    for (std::size_t i = 0; i < max_taps / block + 8; ++i)
      engine->process(in, out, block, Layout::planar);
  };
  calls();
  const std::vector<float> a = random_signal(max_taps / 2, seed + 1),
                           b = random_signal(max_taps, seed + 2), c = random_signal(3, seed + 3);
  const std::vector<PathTaps> update{{5, a}, {17, b}, {63, c}};
  const auto transformed = [] { return channel_work.transformed.load(); };
  const auto faded = [] { return channel_work.faded.load(); };
  std::uint64_t t0 = transformed(), f0 = faded();
  ASSERT_TRUE(engine->set_channel_filters(update, true)) << engine->description();
  if (settle) settle(*engine);
  calls();
  const std::uint64_t update_transformed = transformed() - t0, update_faded = faded() - f0;
  t0 = transformed();
  f0 = faded();
  engine->set_filters(*matrix.diagonal_bank(), true);
  if (settle) settle(*engine);
  calls();
  const std::uint64_t whole_transformed = transformed() - t0, whole_faded = faded() - f0;
  std::printf("transformed %llu (whole bank %llu), faded %llu (whole bank %llu)\n",
              (unsigned long long)update_transformed, (unsigned long long)whole_transformed,
              (unsigned long long)update_faded, (unsigned long long)whole_faded);
  EXPECT_GT(update_transformed, 0u);
  EXPECT_GT(update_faded, 0u);
  EXPECT_EQ(update_transformed * channels, whole_transformed * changed);
  EXPECT_EQ(update_faded * channels, whole_faded * changed);
}

}  // namespace tapstream::testing

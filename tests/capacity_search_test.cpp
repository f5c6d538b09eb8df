// The capacity search of `tapstream bench capacity` against made-up engines:
// which counts fit short probes and which fit long runs is given, the
// search's answer and its steps are checked.

#include "daemon/commands/capacity_search.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace tapstream {
namespace {

constexpr std::size_t kProbe = 300, kLong = 10000;

// An engine whose short probes fit up to probe_limit channels and whose long
// runs fit up to long_limit; records every long run asked for. `stall_at`:
// the one short probe (counted from 1) that a stall of the machine fails.
struct MadeUpEngine {
  std::size_t probe_limit, long_limit;
  std::vector<std::size_t> long_runs;
  std::size_t stall_at = 0, probes = 0;
  bool fits(std::size_t channels, std::size_t blocks) {
    if (blocks == kLong) {
      long_runs.push_back(channels);
      return channels <= long_limit;
    }
    if (++probes == stall_at) return false;
    return channels <= probe_limit;
  }
};

CapacitySearch search(MadeUpEngine& engine, std::size_t most = 1 << 16) {
  return search_capacity(most, kProbe, kLong, [&](std::size_t channels, std::size_t blocks) {
    return engine.fits(channels, blocks);
  });
}

TEST(CapacitySearch, FindsTheLargestCountWithinASixteenthAndConfirmsIt) {
  MadeUpEngine engine{100, 100, {}};
  const CapacitySearch found = search(engine);
  EXPECT_LE(found.channels, 100u);
  EXPECT_GE(found.channels, 100u - 100u / 16);
  EXPECT_FALSE(found.capped);
  ASSERT_EQ(engine.long_runs.size(), 1u);
  EXPECT_EQ(engine.long_runs[0], found.channels);
}

// A CPU engine on a 16-core host: 58 channels passed the probes, no long run
// from 58 down to 37 fitted, and the search used to stop there with no answer
// (reported as 0 channels; docs/history.md, "Capacity on the H100, run by run").
TEST(CapacitySearch, StepsDownPastFourEighthsByHalvesUntilALongRunFits) {
  MadeUpEngine engine{58, 20, {}};
  const CapacitySearch found = search(engine);
  EXPECT_EQ(engine.long_runs, (std::vector<std::size_t>{58, 50, 43, 37, 32, 16}));
  EXPECT_EQ(found.channels, 16u);
}

// On an H200 a 512-tap matrix fitted 8 paths and failed 16 at p99.9 2351 us
// of a 667 us budget over 200 blocks (p99 219 us): one stall, and the search
// ended at 14 instead of doubling on.
TEST(CapacitySearch, ALoneStallInAShortProbeDoesNotEndTheDoubling) {
  for (std::size_t stall = 1; stall <= 12; ++stall) {
    SCOPED_TRACE("the probe that stalls: " + std::to_string(stall));
    MadeUpEngine engine{100, 100, {}, stall};
    const CapacitySearch found = search(engine);
    EXPECT_GE(found.channels, 100u - 100u / 16);
    EXPECT_LE(found.channels, 100u);
  }
}

TEST(CapacitySearch, ReportsNoCountWhenEvenOneChannelFailsTheLongRun) {
  MadeUpEngine engine{58, 0, {}};
  const CapacitySearch found = search(engine);
  EXPECT_EQ(found.channels, 0u);
  EXPECT_EQ(engine.long_runs.back(), 1u);
  EXPECT_LT(engine.long_runs.size(), 12u);
}

TEST(CapacitySearch, IsCappedOnlyWhenTheMostItMayTryFitsTheLongRunToo) {
  MadeUpEngine fits_all{1000, 1000, {}};
  CapacitySearch found = search(fits_all, 64);
  EXPECT_EQ(found.channels, 64u);
  EXPECT_TRUE(found.capped);

  MadeUpEngine probes_only{1000, 40, {}};
  found = search(probes_only, 64);
  EXPECT_LE(found.channels, 40u);
  EXPECT_GT(found.channels, 0u);
  EXPECT_FALSE(found.capped);
}

}  // namespace
}  // namespace tapstream

// `tapstream probe`: the machine's stalls, measured by a thread that runs no
// tapstream code. A stall made on purpose (the process stopped by SIGSTOP for
// a while) must show as one gap of about that length, at that time, on the
// clock the daemon's trace uses.

#include <gtest/gtest.h>
#include <signal.h>
#include <time.h>

#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>
#include <thread>

#include "tests/process_support.hpp"
#include "tests/wait_for.hpp"

namespace tapstream {
namespace {

using testing::Child;
using testing::long_wait;
using testing::read_text;
using testing::TempDir;
using testing::wait_until;

std::int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return std::int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

TEST(ProbeCommand, AStopOfItsProcessShowsAsOneGapOfThatLengthAtThatTime) {
  TempDir dir;
  Child probe({TAPSTREAM_BINARY, "probe", "--seconds", "120", "--threshold-us", "50000"},
              dir / "out.csv", dir / "err.txt");
  ASSERT_TRUE(probe.started());
  ASSERT_TRUE(wait_until(
      long_wait, [&] { return read_text(dir / "err.txt").find("probing") != std::string::npos; },
      [&] { return read_text(dir / "err.txt"); }));
  const std::int64_t stopped_at = now_ns();
  probe.signal(SIGSTOP);
  // The stimulus, not a wait: the stall the probe must measure.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  probe.signal(SIGCONT);
  const std::int64_t continued_at = now_ns();
  probe.signal(SIGINT);
  ASSERT_EQ(probe.wait_for(long_wait), 0) << read_text(dir / "err.txt");
  std::istringstream csv(read_text(dir / "out.csv"));
  std::string line;
  ASSERT_TRUE(std::getline(csv, line));
  EXPECT_EQ(line, "start_ns,gap_us");
  int stalls = 0;
  while (std::getline(csv, line)) {
    const auto comma = line.find(',');
    ASSERT_NE(comma, std::string::npos) << line;
    const std::int64_t start = std::stoll(line.substr(0, comma));
    const double gap_us = std::stod(line.substr(comma + 1));
    if (gap_us < 350'000) continue;  // the machine's own (a loaded test machine has some)
    ++stalls;
    EXPECT_LE(start, stopped_at + 1'000'000'000) << line;
    EXPECT_GE(start + std::int64_t(gap_us * 1000), continued_at - 1'000'000'000) << line;
    EXPECT_LE(start + std::int64_t(gap_us * 1000), continued_at + 1'000'000'000) << line;
  }
  EXPECT_EQ(stalls, 1) << read_text(dir / "out.csv");
  EXPECT_NE(read_text(dir / "err.txt").find("gaps over 50000 us"), std::string::npos)
      << read_text(dir / "err.txt");
}

TEST(ProbeCommand, BadOptionsAreRefusedNamingTheOption) {
  TempDir dir;
  Child probe({TAPSTREAM_BINARY, "probe", "--threshold-us", "0"}, dir / "out.csv", dir / "err.txt");
  EXPECT_EQ(probe.wait_for(long_wait), 2);
  EXPECT_NE(read_text(dir / "err.txt").find("--threshold-us"), std::string::npos)
      << read_text(dir / "err.txt");
}

}  // namespace
}  // namespace tapstream

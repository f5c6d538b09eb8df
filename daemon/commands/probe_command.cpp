// `tapstream probe`: a busy thread that reads the clock as fast as it can and
// records every gap between two readings longer than a threshold. It runs no
// tapstream code, so a gap is the machine's (the hypervisor took the CPU, an
// interrupt storm, a higher-priority thread, page reclaim): run beside the
// daemon, its gaps are what the daemon's own late periods can be lined up
// against (`tapstream ctl trace`, the same CLOCK_MONOTONIC in nanoseconds;
// bench/line-up-trace.py; docs/load-test.md).
//
// Prints `start_ns,gap_us` lines (the reading before the gap, and its length)
// on standard output once it ends, at --seconds or SIGINT/SIGTERM, and a
// summary (readings, gaps, the longest, the CPUs' steal time meanwhile) on
// standard error.

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/commands/command.hpp"
#include "daemon/pipeline/period_trace.hpp"

namespace tapstream {

namespace {

std::atomic<bool> probe_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

extern "C" void stop_probe(int) {
  probe_stop.store(true, std::memory_order_relaxed);
}

// The steal time of all CPUs so far, in USER_HZ ticks (/proc/stat); -1 when unknown.
long long steal_ticks() {
  std::ifstream stat("/proc/stat");
  std::string line;
  if (!std::getline(stat, line) || line.rfind("cpu ", 0) != 0) return -1;
  std::istringstream fields(line.substr(4));
  long long value = 0;
  for (int i = 0; i < 8; ++i) {
    if (!(fields >> value)) return -1;
  }
  return value;  // user nice system idle iowait irq softirq steal
}

struct ProbeArgs {
  double seconds = 60;
  double threshold_us = 100;
  int cpu = -1;
  int priority = 0;
};

struct Gap {
  std::int64_t start_ns;
  std::int64_t length_ns;
};

int run_probe(const ProbeArgs& args) {
  if (args.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(args.cpu, &set);
    if (const int error = pthread_setaffinity_np(pthread_self(), sizeof set, &set); error != 0) {
      throw std::runtime_error(fmt::format("--cpu {}: {}", args.cpu, std::strerror(error)));
    }
  }
  if (args.priority > 0) {
    sched_param param{};
    param.sched_priority = args.priority;
    if (const int error = pthread_setschedparam(pthread_self(), SCHED_FIFO, &param); error != 0) {
      throw std::runtime_error(fmt::format("--priority {}: SCHED_FIFO refused: {}", args.priority,
                                           std::strerror(error)));
    }
  }
  struct sigaction action {};
  action.sa_handler = stop_probe;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  // Kept in memory and printed at the end: writing while probing would be a gap of its own.
  std::vector<Gap> gaps;
  gaps.reserve(1 << 20);
  const auto threshold_ns = static_cast<std::int64_t>(args.threshold_us * 1000);
  const long long steal_before = steal_ticks();
  // The first reading before the message that says the probing runs: a
  // stall right after the message (a stop sent on reading it) is a gap.
  const std::int64_t start = monotonic_ns();
  fmt::print(stderr, "probe: probing for at most {} s, recording gaps over {} us\n", args.seconds,
             args.threshold_us);
  std::fflush(stderr);
  const std::int64_t end = start + static_cast<std::int64_t>(args.seconds * 1e9);
  std::int64_t previous = start;
  std::int64_t longest = 0;
  std::uint64_t readings = 0;
  // A reading after the stop is asked for too: a stall between the last
  // reading and the stop (the process stopped, then told to end as it
  // resumed, the signal handled before the loop's next reading) is a gap like
  // any other.
  for (bool last = false; !last;) {
    last = probe_stop.load(std::memory_order_relaxed);
    const std::int64_t now = monotonic_ns();
    ++readings;
    const std::int64_t gap = now - previous;
    longest = std::max(longest, gap);
    if (gap > threshold_ns && gaps.size() < gaps.capacity()) gaps.push_back({previous, gap});
    previous = now;
    if (now >= end) break;
  }
  const long long steal_after = steal_ticks();
  std::string out = "start_ns,gap_us\n";
  for (const Gap& gap : gaps) out += fmt::format("{},{:.1f}\n", gap.start_ns, gap.length_ns / 1e3);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  const double ran = (previous - start) / 1e9;
  fmt::print(stderr,
             "probe: {:.1f} s, {} readings ({:.0f} ns apart on average), {} gaps over {} us, "
             "the longest {:.1f} us; steal time of all CPUs meanwhile: {}\n",
             ran, readings, readings > 0 ? (previous - start) / double(readings) : 0.0, gaps.size(),
             args.threshold_us, longest / 1e3,
             steal_before >= 0 && steal_after >= 0
                 ? fmt::format("{} ms", (steal_after - steal_before) * 1000 / sysconf(_SC_CLK_TCK))
                 : std::string("unknown"));
  return exit_code::ok;
}

}  // namespace

Command add_probe_command(CLI::App& app) {
  auto args = std::make_shared<ProbeArgs>();
  auto* sub = app.add_subcommand(
      "probe",
      "Busy-read the clock and print every gap longer than a threshold (the machine's stalls, "
      "to line up with `tapstream ctl trace`)");
  sub->add_option("--seconds", args->seconds, "How long to probe (SIGINT/SIGTERM end it sooner)")
      ->check(number_between(0.001, 86400, "s"));
  sub->add_option("--threshold-us", args->threshold_us, "Shortest gap recorded")
      ->check(number_between(1, 1e6, "us"));
  sub->add_option("--cpu", args->cpu, "Pin the probe to this CPU")->check(CLI::Range(0, 4095));
  sub->add_option("--priority", args->priority,
                  "Run at this SCHED_FIFO priority (as the daemon's threads may)")
      ->check(CLI::Range(1, 99));
  return {sub, [args] { return run_probe(*args); }};
}

}  // namespace tapstream

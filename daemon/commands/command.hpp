#pragma once
// A subcommand of the tapstream executable: each lives in its own
// daemon/commands/*_command.cpp and registers its options on the CLI11 app.

#include <CLI/CLI.hpp>
#include <functional>
#include <stdexcept>

namespace tapstream {

// The process exit codes, the same for every subcommand (README, "Exit codes").
namespace exit_code {
inline constexpr int ok = 0;
inline constexpr int runtime_error = 1;  // the job failed: bad data, a device, a file
inline constexpr int usage = 2;          // the command line was wrong; nothing was done
inline constexpr int partial = 3;        // done, but not all of it (input truncated, ...)
// Ended by signal `number` (SIGINT: 130, SIGTERM: 143), as a shell reports it.
inline constexpr int on_signal(int number) {
  return 128 + number;
}
}  // namespace exit_code

// A command line that CLI11's own checks let through but that makes no sense
// (e.g. `design bandpass --cutoff 300`): exits with exit_code::usage.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An option's value must be a number in [low, high]; the message says so in
// the option's unit ("'0' is not between 1 and 10000000 Hz"), where CLI11's
// Range would print six decimals, or DBL_MAX's 309 digits.
CLI::Validator number_between(double low, double high, const std::string& unit);

struct Command {
  CLI::App* app = nullptr;   // the parsed subcommand
  std::function<int()> run;  // runs it; returns the process exit code (exit_code::...)
};

Command add_process_command(CLI::App& app);
Command add_design_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_devices_command(CLI::App& app);
Command add_ctl_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_info_command(CLI::App& app);
Command add_plot_command(CLI::App& app);
Command add_probe_command(CLI::App& app);

}  // namespace tapstream

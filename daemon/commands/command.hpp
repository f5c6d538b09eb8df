#pragma once
// A subcommand of the tapstream executable: each lives in its own
// daemon/*_command.cpp and registers its options on the CLI11 app.

#include <CLI/CLI.hpp>
#include <functional>

namespace tapstream {

struct Command {
  CLI::App* app = nullptr;   // the parsed subcommand
  std::function<int()> run;  // runs it; returns the process exit code
};

Command add_process_command(CLI::App& app);
Command add_design_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_devices_command(CLI::App& app);
Command add_ctl_command(CLI::App& app);

}  // namespace tapstream

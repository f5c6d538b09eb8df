#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <exception>
#include <vector>

#include "daemon/commands/command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"tapstream: streaming multi-channel FIR filtering on GPUs and CPUs"};
  app.require_subcommand(1);
  int verbose = 0;
  bool quiet = false;
  app.add_flag("-v,--verbose", verbose, "More log output (-vv for trace)");
  app.add_flag("-q,--quiet", quiet, "Only errors");

  const std::vector<tapstream::Command> commands = {
      tapstream::add_process_command(app), tapstream::add_design_command(app),
      tapstream::add_run_command(app),     tapstream::add_devices_command(app),
      tapstream::add_ctl_command(app),
  };

  CLI11_PARSE(app, argc, argv);
  // Logs and errors go to stderr, so that stdout stays free for data.
  spdlog::set_default_logger(spdlog::stderr_color_mt("tapstream"));
  spdlog::set_pattern("%^%l%$: %v");
  spdlog::set_level(quiet          ? spdlog::level::err
                    : verbose >= 2 ? spdlog::level::trace
                    : verbose == 1 ? spdlog::level::debug
                                   : spdlog::level::info);
  for (const auto& command : commands) {
    if (!command.app->parsed()) continue;
    try {
      return command.run();
    } catch (const std::exception& e) {
      spdlog::error("{}: {}", command.app->get_name(), e.what());
      return 1;
    }
  }
  return 2;
}

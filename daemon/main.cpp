#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <exception>
#include <vector>

#include "daemon/commands/command.hpp"
#include "daemon/fftw_environment.hpp"

int main(int argc, char** argv) {
  using namespace tapstream;
  CLI::App app{"tapstream: streaming multi-channel FIR filtering on GPUs and CPUs"};
  app.require_subcommand(1);
  // Subcommands inherit this: an option a subcommand does not know (-q, -v)
  // is tried on the main app, so `tapstream process -q ...` works too.
  app.fallthrough();
  app.set_version_flag("--version", TAPSTREAM_VERSION_TEXT);
  app.footer(
      "Exit codes: 0 ok, 1 runtime error, 2 usage error, 3 partial success, 128+N ended by "
      "signal N.");
  int verbose = 0;
  bool quiet = false;
  app.add_flag("-v,--verbose", verbose, "More log output (-vv for trace)");
  app.add_flag("-q,--quiet", quiet, "Only errors");

  const std::vector<Command> commands = {
      add_process_command(app), add_design_command(app), add_run_command(app),
      add_devices_command(app), add_ctl_command(app),    add_bench_command(app),
      add_info_command(app),    add_plot_command(app),   add_probe_command(app),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0; every other one is usage.
    app.exit(e);
    return e.get_exit_code() == 0 ? exit_code::ok : exit_code::usage;
  }
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
      fftw::set_planner_options(fftw_planner_from_environment());
      return command.run();
    } catch (const UsageError& e) {
      spdlog::error("{}: {} (see tapstream {} --help)", command.app->get_name(), e.what(),
                    command.app->get_name());
      return exit_code::usage;
    } catch (const std::exception& e) {
      spdlog::error("{}: {}", command.app->get_name(), e.what());
      return exit_code::runtime_error;
    }
  }
  return exit_code::usage;
}

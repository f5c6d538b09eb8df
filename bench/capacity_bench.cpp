// The capacity benchmark (issue 8) as a program of its own: the same code as
// `tapstream bench capacity` (daemon/commands/bench_command.cpp), same options.
//   capacity_bench [--engines cuda,cpu] [--blocks 32,64,...] [--taps 4096,...]
//                  [--measure-blocks N] [--probe-blocks N] [--json FILE] [--commit SHA]

#include <spdlog/spdlog.h>

#include <exception>
#include <string>
#include <vector>

#include "daemon/commands/command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"capacity_bench: channels each engine carries live"};
  const tapstream::Command bench = tapstream::add_bench_command(app);
  std::vector<std::string> words = {"bench", "capacity"};
  for (int i = argc - 1; i >= 1; --i) words.insert(words.begin() + 2, argv[i]);
  std::vector<std::string> reversed(words.rbegin(), words.rend());  // CLI11 parses a reversed list
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return e.get_exit_code() == 0 ? tapstream::exit_code::ok : tapstream::exit_code::usage;
  }
  try {
    return bench.run();
  } catch (const tapstream::UsageError& e) {
    spdlog::error("capacity_bench: {}", e.what());
    return tapstream::exit_code::usage;
  } catch (const std::exception& e) {
    spdlog::error("capacity_bench: {}", e.what());
    return tapstream::exit_code::runtime_error;
  }
}

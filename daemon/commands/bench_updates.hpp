#pragma once
// `tapstream bench updates` (daemon/commands/bench_updates.cpp): how many
// paths' filters an engine replaces at every block within half the period.

#include <CLI/CLI.hpp>
#include <functional>

namespace tapstream {

// Adds the `updates` subcommand to `bench`; the function returned runs it
// when it was the one parsed (returning the exit code), else returns -1.
std::function<int()> add_bench_updates(CLI::App& bench);

}  // namespace tapstream

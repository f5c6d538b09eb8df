#pragma once
// `tapstream process ARGS...` run in this process: the command line is parsed
// by the process command itself (daemon/commands/process_command, which
// filters through daemon/commands/offline_filter), so that process_file writes
// what the executable writes, bit for bit, and takes its options as they are.

#include <string>
#include <vector>

namespace tapstream::python {

// Runs the process subcommand with `arguments` (what follows `process` on
// the command line). Returns its exit status (0 done, 3 done from damaged
// input, 128 + n ended by signal n); throws UsageError for a command line
// the command refuses (CLI11's and its own), and what the command throws for
// a failed job (naming the culprit).
int run_process_command(const std::vector<std::string>& arguments);

}  // namespace tapstream::python

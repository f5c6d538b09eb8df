#include "python/process_command_runner.hpp"

#include "daemon/commands/command.hpp"

namespace tapstream::python {

int run_process_command(const std::vector<std::string>& arguments) {
  CLI::App app{"tapstream"};
  const Command command = add_process_command(app);
  std::vector<const char*> argv{"tapstream", "process"};
  for (const std::string& argument : arguments) argv.push_back(argument.c_str());
  try {
    app.parse(int(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  return command.run();
}

}  // namespace tapstream::python

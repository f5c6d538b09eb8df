// `tapstream ctl [--socket PATH | --config FILE] status | load CHANNEL|all FILE |
// load path I O FILE | load matrix FILE | reload | stop`:
// talks to a running `tapstream run` through its control socket: writes the
// command as the daemon's JSON request (daemon/control/ctl_request.hpp),
// prints the reply as one line of JSON ({"ok":true,...} with the result's
// keys, or {"ok":false,"error":...}); exits 1 when it says "ok":false.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "daemon/commands/command.hpp"
#include "daemon/config/config.hpp"
#include "daemon/control/control_socket.hpp"
#include "daemon/control/ctl_request.hpp"
#include "daemon/control/json.hpp"
#include "daemon/pipeline/period_trace.hpp"

namespace tapstream {

namespace {

struct CtlArgs {
  std::string socket;
  std::string config;
  int timeout_ms = 10000;
  std::vector<std::string> load;  // CHANNEL|all FILE, path I O FILE, matrix FILE
  unsigned trace_records = 4096;
};

// The `load` text command for `words`; throws UsageError when they are not
// one of the forms.
std::string load_request(const std::vector<std::string>& words) {
  const bool path = !words.empty() && words.front() == "path";
  if (words.size() != (path ? 4u : 2u)) {
    throw UsageError(
        "load: expected CHANNEL FILE, all FILE, path INPUT OUTPUT FILE or matrix FILE");
  }
  const std::string& file = words.back();
  if (file.find('\n') != std::string::npos) {
    throw ControlSocketError("file name contains a newline");
  }
  std::string request = "load";
  for (std::size_t i = 0; i + 1 < words.size(); ++i) request += " " + words[i];
  return request + " " + std::filesystem::absolute(file).lexically_normal().string();
}

std::filesystem::path choose_socket(const CtlArgs& args) {
  if (!args.socket.empty()) return args.socket;
  if (!args.config.empty()) {
    const LiveConfig config = load_live_config(args.config);
    if (config.control_socket.empty()) {
      throw ControlSocketError(args.config +
                               " sets control.socket = \"\": the daemon has no "
                               "control socket");
    }
    return config.control_socket;
  }
  return default_control_socket();
}

}  // namespace

Command add_ctl_command(CLI::App& app) {
  auto args = std::make_shared<CtlArgs>();
  CLI::App* ctl = app.add_subcommand("ctl", "Query or steer a running `tapstream run`");
  ctl->add_option("--socket", args->socket,
                  "Control socket (default: $XDG_RUNTIME_DIR/tapstream/control.sock)");
  ctl->add_option("--config", args->config, "Take the control socket from this configuration")
      ->excludes("--socket");
  ctl->add_option("--timeout", args->timeout_ms, "Milliseconds to wait for the reply")
      ->check(CLI::Range(1, 600000));
  ctl->require_subcommand(1);

  CLI::App* status = ctl->add_subcommand("status", "Print the daemon's status as one line of JSON");
  status->fallthrough();
  CLI::App* load = ctl->add_subcommand(
      "load",
      "Load a coefficient file for one channel (from 0) or all, or for the path from input I "
      "to output O (a filter per channel has the paths C C), or (with a routing matrix) a "
      "whole matrix file; swapped at a block boundary with a one-block crossfade");
  load->fallthrough();
  load->add_option("what", args->load,
                   "CHANNEL FILE | all FILE | path INPUT OUTPUT FILE | matrix FILE")
      ->required()
      ->expected(2, 4);
  CLI::App* reload = ctl->add_subcommand(
      "reload", "Read the configuration again (as SIGHUP): only changed filter files are re-read");
  reload->fallthrough();
  CLI::App* stop = ctl->add_subcommand("stop", "Stop the daemon cleanly (drains, then exits 0)");
  stop->fallthrough();
  CLI::App* trace = ctl->add_subcommand(
      "trace",
      "Print the timestamps of the recent periods, engine calls and outputs (CLOCK_MONOTONIC "
      "ns, as `tapstream probe` prints) as one line of JSON");
  trace->fallthrough();
  trace->add_option("records", args->trace_records, "How many of each (the newest)")
      ->check(CLI::Range(1u, unsigned(PeriodTrace::kRecords)));

  Command command;
  command.app = ctl;
  command.run = [args, status, load, reload, stop, trace]() {
    const std::filesystem::path socket = choose_socket(*args);
    std::string request;
    if (status->parsed()) {
      request = "status";
    } else if (reload->parsed()) {
      request = "reload";
    } else if (stop->parsed()) {
      request = "stop";
    } else if (load->parsed()) {
      request = load_request(args->load);
    } else if (trace->parsed()) {
      request = "trace " + std::to_string(args->trace_records);
    }
    const std::string reply =
        ctl_exchange(socket, request, std::chrono::milliseconds(args->timeout_ms));
    std::printf("%s\n", reply.c_str());
    const Json parsed = Json::parse(reply, nullptr, /*allow_exceptions=*/false);
    return parsed.is_object() && parsed.value("ok", false) ? 0 : 1;
  };
  return command;
}

}  // namespace tapstream

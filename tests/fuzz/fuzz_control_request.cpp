// Control-socket requests: one line, the JSON request model shared with the
// websocket API (answered by a ControlApi over a real, idle pipeline, as the
// socket's owner), or anything else (refused by the socket). The reply must
// always be one line of JSON. The input may also be a `tapstream ctl` text
// command: its translation (daemon/control/ctl_request.hpp) is sent too.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

#include "daemon/control/control_api.hpp"
#include "daemon/control/control_socket.hpp"
#include "daemon/control/ctl_request.hpp"
#include "daemon/pipeline/live_pipeline.hpp"
#include "tests/fuzz/fuzz_support.hpp"
#include "tests/idle_pipeline.hpp"

namespace {

using namespace tapstream;

struct Daemon {
  std::shared_ptr<const RoutingMatrix> matrix = std::make_shared<const RoutingMatrix>(
      RoutingMatrix::diagonal(FilterBank::shared({1.0f, 0.5f}, 2)));
  std::unique_ptr<LivePipeline> pipeline;
  std::unique_ptr<ControlApi> api;
  ApiSession session;
  std::unique_ptr<ControlServer> server;

  Daemon() {
    pipeline = testing::make_idle_pipeline(*matrix);
    ApiHooks hooks;
    hooks.matrix = [this] { return matrix; };
    hooks.load = [](const LoadRequest& request) {
      return std::filesystem::exists(request.file) ? std::string()
                                                   : request.file.string() + ": no such file";
    };
    hooks.config = [] { return LiveConfig{}; };
    hooks.apply_config = [](const LiveConfig&, std::vector<std::string>&, std::string&) {
      return std::string();
    };
    hooks.log = [](std::size_t) { return std::vector<std::string>{"a line"}; };
    hooks.state_changed = [] {};
    hooks.status = [] { return DaemonStatus{}; };
    hooks.reload = [] { return std::string("reloaded"); };
    hooks.stop = [] { return std::string("stopping"); };
    api = std::make_unique<ControlApi>(*pipeline, hooks, fuzzing::scratch().path() / "uploads");
    session.can_subscribe = false;  // as on the Unix socket
    session.owner = true;
    const auto answer = [this](std::string_view line) { return api->handle(line, session); };
    server = std::make_unique<ControlServer>(fuzzing::scratch().path() / "control.sock", answer);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Daemon daemon;
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  const std::string reply = daemon.server->handle_request(line);
  if (reply.find('\n') != std::string::npos) __builtin_trap();  // one line per reply
  const auto parsed = nlohmann::json::parse(reply, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object() || !parsed.contains("ok")) __builtin_trap();
  std::string request;
  try {
    request = ctl_request_json(line);
  } catch (const CtlSyntaxError&) {
    return 0;
  }
  const std::string printed = ctl_reply_text(daemon.server->handle_request(request));
  if (printed.find('\n') != std::string::npos) __builtin_trap();
  const auto shown = nlohmann::json::parse(printed, nullptr, false);
  if (shown.is_discarded() || !shown.is_object() || !shown.contains("ok")) __builtin_trap();
  return 0;
}

// Control-socket requests: one line of text ("status", "load 0 /f.txt",
// "reload", "stop") or one JSON object (the request model shared with the
// websocket API, answered by a ControlApi over a real, idle pipeline). The
// reply must always be one line of JSON.

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
#include "daemon/pipeline/live_pipeline.hpp"
#include "dsp/cpu_engine.hpp"
#include "dsp/diagonal_engine.hpp"
#include "tests/fuzz/fuzz_support.hpp"

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
    EngineOptions engine;
    engine.max_block_frames = 64;
    engine.max_taps = 64;
    LivePipelineOptions options;
    options.block_frames = 64;
    options.realtime = false;
    pipeline = std::make_unique<LivePipeline>(
        std::make_unique<DiagonalEngine>(make_cpu_engine(*matrix->diagonal_bank(), engine)),
        options);
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
    hooks.devices = [] { return std::pair<std::string, std::string>("in", "out"); };
    hooks.log = [](std::size_t) { return std::vector<std::string>{"a line"}; };
    hooks.state_changed = [] {};
    api = std::make_unique<ControlApi>(*pipeline, hooks, fuzzing::scratch().path() / "uploads");
    session.can_subscribe = false;  // as on the Unix socket
    ControlHandlers handlers;
    handlers.status = [] { return DaemonStatus{}; };
    handlers.load = [](const LoadRequest& request) {
      if (!std::filesystem::exists(request.file)) throw std::runtime_error("no such file");
      return std::string("loaded");
    };
    handlers.reload = [] { return std::string("reloaded"); };
    handlers.stop = [] { return std::string("stopping"); };
    handlers.json = [this](std::string_view line) { return api->handle(line, session); };
    server = std::make_unique<ControlServer>(fuzzing::scratch().path() / "control.sock", handlers);
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
  return 0;
}

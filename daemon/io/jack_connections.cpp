#include "daemon/io/jack_connections.hpp"

#include <fmt/format.h>
#include <jack/jack.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <memory>

#include "daemon/io/audio_device.hpp"

namespace tapstream {

namespace {

struct ClientCloser {
  void operator()(jack_client_t* client) const { jack_client_close(client); }
};
using Client = std::unique_ptr<jack_client_t, ClientCloser>;

std::vector<std::string> names_of(const char** ports) {
  std::vector<std::string> names;
  if (ports == nullptr) return names;
  for (const char** p = ports; *p != nullptr; ++p) names.emplace_back(*p);
  jack_free(ports);
  return names;
}

std::string join(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

// One side of the client: its own ports and the kind of port they connect to.
struct Side {
  const char* key;           // "connect_inputs" or "connect_outputs"
  const char* own_prefix;    // "in_" or "out_"
  unsigned long peer_flags;  // JackPortIsOutput for our inputs, JackPortIsInput for our outputs
  const char* peer_kind;     // "output" or "input"
  const JackPortPatterns* patterns;
  std::size_t channels;  // tapstream's ports on this side
};

class Connector {
 public:
  explicit Connector(const std::string& client) : client_(client) {
    jack_status_t status{};
    helper_.reset(jack_client_open((client + "-connect").c_str(), JackNoStartServer, &status));
    if (!helper_) {
      throw AudioDeviceError(fmt::format(
          "[jack]: cannot reach the JACK server to connect the ports of '{}' (status 0x{:x})",
          client, static_cast<unsigned>(status)));
    }
  }

  void apply(const Side& side, bool autoconnect) {
    const auto mode = side.patterns->mode;
    const std::size_t channels = side.channels;
    if (mode == JackPortPatterns::Mode::device && autoconnect) return;
    std::vector<std::string> own;
    for (std::size_t c = 0; c < channels; ++c) {
      own.push_back(fmt::format("{}:{}{}", client_, side.own_prefix, c));
      if (jack_port_by_name(helper_.get(), own.back().c_str()) == nullptr) {
        throw AudioDeviceError(
            fmt::format("[jack] {}: tapstream's port {} is not there (ports: {})", side.key,
                        own.back(), join(ports(client_ + ":", 0))));
      }
    }
    for (const auto& port : own) disconnect_all(port, side);
    std::vector<std::vector<std::string>> peers(channels);
    if (mode == JackPortPatterns::Mode::spread) {
      const std::string& pattern = side.patterns->patterns.front();
      const auto matches = peer_ports(pattern, side);
      if (matches.size() < channels) {
        throw AudioDeviceError(fmt::format(
            "[jack] {} = \"{}\" matches {} JACK {} port(s) ({}), {} channels need one each; {} "
            "ports: {}",
            side.key, pattern, matches.size(), side.peer_kind, join(matches), channels,
            side.peer_kind, join(peer_ports(".*", side))));
      }
      for (std::size_t c = 0; c < channels; ++c) peers[c] = {matches[c]};
    } else if (mode == JackPortPatterns::Mode::per_channel) {
      for (std::size_t c = 0; c < channels; ++c) {
        const std::string& pattern = side.patterns->patterns[c];
        peers[c] = peer_ports(pattern, side);
        if (peers[c].empty()) {
          throw AudioDeviceError(fmt::format(
              "[jack] {}[{}] = \"{}\" matches no JACK {} port; {} ports: {}", side.key, c, pattern,
              side.peer_kind, side.peer_kind, join(peer_ports(".*", side))));
        }
      }
    }
    std::string made;
    for (std::size_t c = 0; c < channels; ++c) {
      for (const auto& peer : peers[c]) {
        const bool ours_is_input = side.peer_flags == JackPortIsOutput;
        const std::string& source = ours_is_input ? peer : own[c];
        const std::string& destination = ours_is_input ? own[c] : peer;
        const int error = jack_connect(helper_.get(), source.c_str(), destination.c_str());
        if (error != 0 && error != EEXIST) {
          throw AudioDeviceError(fmt::format("[jack] {}: connecting {} to {} failed (error {})",
                                             side.key, source, destination, error));
        }
        made += fmt::format("{}{} {} {}", made.empty() ? "" : ", ", own[c],
                            ours_is_input ? "<-" : "->", peer);
      }
    }
    spdlog::info("JACK {}: {}", side.key, made.empty() ? "no connections" : made);
  }

 private:
  std::vector<std::string> ports(const std::string& pattern, unsigned long flags) const {
    return names_of(jack_get_ports(helper_.get(), pattern.c_str(), JACK_DEFAULT_AUDIO_TYPE, flags));
  }

  // The other clients' ports that `pattern` names: the port of that exact
  // name if there is one, else every port the expression matches.
  std::vector<std::string> peer_ports(const std::string& pattern, const Side& side) const {
    std::vector<std::string> found;
    for (auto& name : ports(pattern, side.peer_flags)) {
      if (name.rfind(client_ + ":", 0) == 0) continue;  // not our own ports
      if (name == pattern) return {name};
      found.push_back(std::move(name));
    }
    return found;
  }

  void disconnect_all(const std::string& own, const Side& side) {
    jack_port_t* port = jack_port_by_name(helper_.get(), own.c_str());
    const bool ours_is_input = side.peer_flags == JackPortIsOutput;
    for (const auto& peer : names_of(jack_port_get_all_connections(helper_.get(), port))) {
      const std::string& source = ours_is_input ? peer : own;
      const std::string& destination = ours_is_input ? own : peer;
      jack_disconnect(helper_.get(), source.c_str(), destination.c_str());
    }
  }

  std::string client_;
  Client helper_;
};

}  // namespace

void apply_jack_connections(const JackConfig& config, const std::string& client,
                            std::size_t input_channels, std::size_t output_channels) {
  const bool inputs = input_channels > 0;
  const bool outputs = output_channels > 0;
  const auto wanted = [&](const JackPortPatterns& patterns, bool present) {
    return present && (patterns.mode != JackPortPatterns::Mode::device || !config.autoconnect);
  };
  if (!wanted(config.inputs, inputs) && !wanted(config.outputs, outputs)) return;
  Connector connector(client);
  if (inputs) {
    connector.apply(
        {"connect_inputs", "in_", JackPortIsOutput, "output", &config.inputs, input_channels},
        config.autoconnect);
  }
  if (outputs) {
    connector.apply(
        {"connect_outputs", "out_", JackPortIsInput, "input", &config.outputs, output_channels},
        config.autoconnect);
  }
}

}  // namespace tapstream

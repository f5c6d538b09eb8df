#pragma once
// tapstream as a JACK client: its name and what its ports are connected to
// ([jack] in the configuration). PortAudio's JACK host API names the client
// (PaJack_SetClientName, before Pa_Initialize) but always connects a stream's
// ports (in_0.., out_0..) to the ports of the device it was opened on when the
// stream starts; there is no switch for that. So where the configuration asks
// for other connections, or none, a short-lived second client undoes
// PortAudio's connections and makes the configured ones, right after the
// stream starts.

#include <cstddef>
#include <string>
#include <vector>

namespace tapstream {

// What one side of the client (its inputs, or its outputs) is connected to.
struct JackPortPatterns {
  enum class Mode {
    device,       // the device's ports, as PortAudio connects them (unless autoconnect is off)
    none,         // nothing
    spread,       // the ports one pattern matches, in JACK's order, one per channel
    per_channel,  // one pattern per channel; every port it matches is connected to that channel
  };
  Mode mode = Mode::device;
  // JACK port patterns (POSIX extended regular expressions, as jack_lsp and
  // jack_get_ports take them); a pattern that is a port's exact name means
  // that port alone.
  std::vector<std::string> patterns;
  bool operator==(const JackPortPatterns&) const = default;
};

struct JackConfig {
  std::string client_name = "tapstream";  // JACK makes it unique (tapstream-01) if taken
  bool autoconnect = true;                // connect to the device's ports where no pattern is given
  JackPortPatterns inputs;                // [jack] connect_inputs: what feeds in_0, in_1, ...
  JackPortPatterns outputs;               // [jack] connect_outputs: what out_0, out_1, ... feed
  bool operator==(const JackConfig&) const = default;
};

// Longest JACK client name (jack_client_name_size() less the terminating NUL).
inline constexpr std::size_t max_jack_client_name = 63;

// Replaces the connections PortAudio made for `client`'s first
// `input_channels` inputs and/or `output_channels` outputs (0: that side is
// not on JACK) by those `config` asks for; does nothing where the device's
// connections are wanted. Throws AudioDeviceError naming the key and the
// pattern that matched nothing (or too little), with the ports there are.
void apply_jack_connections(const JackConfig& config, const std::string& client,
                            std::size_t input_channels, std::size_t output_channels);

}  // namespace tapstream

// `tapstream devices`: every audio device PortAudio sees, with its index (to
// use in a configuration or on the command line), host API, channel counts
// and default sample rate.

#include <fmt/format.h>

#include "daemon/commands/command.hpp"
#include "daemon/io/audio_device.hpp"

namespace tapstream {

Command add_devices_command(CLI::App& app) {
  auto* sub = app.add_subcommand("devices", "List audio devices with channels and default rates");
  return {sub, [] {
            PortAudioLibrary library;
            const auto devices = list_audio_devices();
            if (devices.empty()) {
              fmt::print("no audio devices (is a sound server such as JACK running?)\n");
              return 0;
            }
            fmt::print("index  name (host API): channels in, out, default rate\n");
            for (const auto& device : devices) fmt::print("{}\n", describe_audio_device(device));
            return 0;
          }};
}

}  // namespace tapstream

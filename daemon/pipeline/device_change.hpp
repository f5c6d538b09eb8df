#pragma once
// A change of the audio device's stream that the live daemon follows while it
// runs: the device callback (the backend's side) notices it, the pipeline
// reports it (LivePipeline::next_device_change), and the daemon logs it and
// shows it in its status. One kind per thing a sound server may change under
// a running client: its period (JACK's buffer size, PipeWire's quantum) and
// its sample rate.

#include <cstddef>

namespace tapstream {

enum class DeviceChangeKind { period, rate };

struct DeviceChange {
  DeviceChangeKind kind = DeviceChangeKind::period;
  std::size_t from = 0;  // frames (period) or Hz (rate); 0: not known before
  std::size_t to = 0;
};

}  // namespace tapstream

#pragma once
// What `tapstream run` follows of the device it plays through: a change the
// device (or its JACK server) brings is reported as one event with a field
// per kind of change, each handled on its own in daemon/commands/run_command.cpp.
//
// - sample_rate: with sample_rate = "device", the device was (re)opened at
//   another rate than the one the filters were read for (a JACK server that
//   came back at another rate, a device reopened at another rate). The
//   daemon restarts itself in place (same PID and arguments, as it does for
//   a lost JACK server), and the fresh process reads the new rate's filters
//   and builds its engine through the one factory, swapper and pipeline.
// A period (quantum) change belongs beside it, as a field of its own.

#include <optional>

namespace tapstream {

struct DeviceFormatChange {
  std::optional<int> sample_rate;  // the rate the device runs at now, in Hz

  bool any() const { return sample_rate.has_value(); }
};

}  // namespace tapstream

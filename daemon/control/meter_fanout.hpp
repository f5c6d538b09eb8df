#pragma once
// Meter events for websocket subscribers: one read of the meters and one
// formatted event per tick, shared by every client subscribed at the same
// interval, so that a client costs one write per event and not a read, a
// format and an allocation of its own.
//
// Exact per client: a client whose cursor stands where the shared read began
// gets the shared event, which is what a read of its own would have given at
// that instant, and its cursor moves to where the shared read ended. Any
// other client (it asked get_meters in between, skipped an event as a slow
// reader, or has just subscribed) gets a read of its own, so "since the
// previous read" stays its own. After one such read it is normally back in
// step with the others.
//
// Threads: one control thread (the websocket server's) uses a MeterFanout;
// the OutputStage it reads may be read from any thread.

#include <memory>
#include <string>
#include <vector>

#include "dsp/realtime/output_stage.hpp"

namespace tapstream {

// The event pushed to subscribers, {"event":"meters","levels":[...]}, with the
// fields of get_meters' levels (docs/api.md).
std::string meters_event_text(const std::vector<ChannelLevels>& levels);

class MeterFanout {
 public:
  explicit MeterFanout(const OutputStage& stage) : stage_(stage) {}

  // Reads the meters once for this tick and formats the shared event.
  void read();
  // This tick's event for the client whose cursor is `cursor` (after read());
  // advances the cursor as a read of its own would.
  std::shared_ptr<const std::string> event_for(MeterCursor& cursor);

 private:
  const OutputStage& stage_;
  MeterCursor before_;  // where the shared read began
  MeterCursor after_;   // and ended
  std::shared_ptr<const std::string> event_;
};

}  // namespace tapstream

#include "daemon/control/meter_fanout.hpp"

#include <fmt/format.h>

#include <iterator>

namespace tapstream {

std::string meters_event_text(const std::vector<ChannelLevels>& levels) {
  fmt::memory_buffer out;
  fmt::format_to(std::back_inserter(out), R"({{"event":"meters","levels":[)");
  for (std::size_t c = 0; c < levels.size(); ++c) {
    const ChannelLevels& l = levels[c];
    fmt::format_to(std::back_inserter(out),
                   R"({}{{"peak":{:.6g},"rms":{:.6g},"peak_since":{:.6g},"rms_since":{:.6g},)"
                   R"("clipped":{},"clipped_total":{}}})",
                   c == 0 ? "" : ",", l.peak, l.rms, l.peak_since, l.rms_since, l.clipped,
                   l.clipped_total);
  }
  fmt::format_to(std::back_inserter(out), "]}}");
  return fmt::to_string(out);
}

void MeterFanout::read() {
  before_ = after_;
  event_ = std::make_shared<const std::string>(meters_event_text(stage_.read_levels(after_)));
}

std::shared_ptr<const std::string> MeterFanout::event_for(MeterCursor& cursor) {
  if (event_ && cursor == before_) {
    cursor = after_;
    return event_;
  }
  return std::make_shared<const std::string>(meters_event_text(stage_.read_levels(cursor)));
}

}  // namespace tapstream

#include "daemon/control/daemon_status.hpp"

#include <utility>

namespace tapstream {

Json status_document(const DaemonStatus& status) {
  Json json = Json::object();
  json["backend"] = status.backend;
  json["engine"] = status.engine;
  json["input"] = status.input_device;
  json["output"] = status.output_device;
  json["sample_rate"] = status.sample_rate;
  json["sample_rate_from"] = status.sample_rate_from;
  json["block_frames"] = status.block_frames;
  json["channels"] = status.channels;
  json["latency_frames"] = status.latency_frames;
  json["latency_ms"] =
      status.sample_rate > 0 ? 1000.0 * double(status.latency_frames) / status.sample_rate : 0.0;
  json["latency_mode"] = status.latency_mode;
  // The device's period as the callback sees it (it may change while running).
  json["period_frames"] = status.period_frames;
  json["period_ms"] =
      status.sample_rate > 0 ? 1000.0 * double(status.period_frames) / status.sample_rate : 0.0;
  json["period_changes"] = status.period_changes;
  json["replans"] = status.replans;
  json["inputs"] = status.input_channels;
  json["outputs"] = status.channels;
  Json paths = Json::array();
  Json filters = Json::array();  // the same, under the key a filter per channel always had
  for (std::size_t p = 0; p < status.paths.size(); ++p) {
    const auto& path = status.paths[p];
    Json entry = {{"input", path.input},     {"output", path.output},
                  {"file", path.file},       {"taps", path.taps},
                  {"gain_db", path.gain_db}, {"delay_frames", path.delay_frames},
                  {"invert", path.invert}};
    paths.push_back(entry);
    Json alias = {{"channel", p}};
    alias.update(entry);
    filters.push_back(std::move(alias));
  }
  json["matrix"] = {{"file", status.matrix_file}, {"paths", std::move(paths)}};
  json["filters"] = std::move(filters);
  json["blocks"] = status.blocks;
  json["underruns"] = status.underruns;
  json["overruns"] = status.overruns;
  json["late_periods"] = status.late_periods;
  json["late_unstarted"] = status.late_unstarted;
  json["nonfinite_inputs"] = status.nonfinite_inputs;
  json["swaps"] = status.swaps;
  json["rejected_swaps"] = status.rejected_swaps;
  json["uptime_s"] = status.uptime_s;
  // What real-time scheduling and memory the audio path got (the causes a
  // late period's cure depends on: docs/performance.md, SOFA).
  json["scheduling"] = {{"callback_thread", status.callback_thread},
                        {"callback_priority", status.callback_priority},
                        {"callback_raised", status.callback_raised},
                        {"callback_raise_error", status.callback_raise_error},
                        {"memory_locked", status.memory_locked}};
  const auto& p = status.processing;
  json["processing_us"] = {
      {"blocks", p.count},
      {"block_period",
       status.sample_rate > 0 ? 1e6 * double(status.block_frames) / status.sample_rate : 0.0},
      {"mean", p.mean_us},
      {"p50", p.p50_us},
      {"p90", p.p90_us},
      {"p99", p.p99_us},
      {"p999", p.p999_us},
      {"max", p.max_us}};
  return json;
}

}  // namespace tapstream

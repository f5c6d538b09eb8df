#include "daemon/control/trace_document.hpp"

#include <array>
#include <string>
#include <vector>

#include "daemon/pipeline/latency_mode.hpp"

namespace tapstream {

namespace {

template <std::size_t Fields>
nlohmann::json rows_json(const TraceRing<Fields>& ring,
                         const std::array<const char*, Fields>& names, std::size_t records) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& record : ring.snapshot(records)) rows.push_back(record);
  return {{"fields", names}, {"written", ring.written()}, {"rows", std::move(rows)}};
}

}  // namespace

nlohmann::json trace_document(const LivePipeline& pipeline, std::size_t records) {
  const PeriodTrace& trace = pipeline.trace();
  nlohmann::json json = nlohmann::json::object();
  json["clock"] = "CLOCK_MONOTONIC, nanoseconds";
  json["now_ns"] = monotonic_ns();
  json["sample_rate"] = pipeline.sample_rate();
  json["block_frames"] = pipeline.block_frames();
  json["latency_mode"] = pipeline.latency_mode() == LatencyMode::zero ? "zero" : "buffered";
  json["engine_in_callback"] = pipeline.engine_in_callback();
  json["inputs"] = rows_json<PeriodTrace::input_fields>(
      trace.inputs, {"start_ns", "handed_ns", "first_frame", "frames"}, records);
  json["outputs"] = rows_json<PeriodTrace::output_fields>(
      trace.outputs,
      {"start_ns", "taken_ns", "deadline_ns", "first_frame", "frames", "late_frames"}, records);
  json["blocks"] = rows_json<PeriodTrace::block_fields>(
      trace.blocks, {"woke_ns", "start_ns", "end_ns", "first_frame", "frames"}, records);
  json["swaps"] =
      rows_json<PeriodTrace::swap_fields>(trace.swaps, {"start_ns", "end_ns", "block"}, records);
  return json;
}

}  // namespace tapstream

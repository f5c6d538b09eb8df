#pragma once
// The live pipeline's trace (daemon/pipeline/period_trace.hpp) as the API's
// get_trace answer: each ring as its field names and rows of integers, oldest
// first (plain JSON: its key order is not kept), with the clock they share and its reading now, so
// that a client can line them up with other CLOCK_MONOTONIC records (`tapstream probe`).

#include <cstddef>
#include <nlohmann/json.hpp>

#include "daemon/pipeline/live_pipeline.hpp"

namespace tapstream {

// The newest `records` of each ring (1 .. PeriodTrace::kRecords).
nlohmann::json trace_document(const LivePipeline& pipeline, std::size_t records);

}  // namespace tapstream

#pragma once
// A live pipeline that is never started: what the control-plane suites and the
// control-request fuzzer answer requests against (swaps, status, meters)
// without a device or an audio thread.

#include <memory>

#include "daemon/pipeline/live_pipeline.hpp"
#include "dsp/cpu/cpu_engine.hpp"
#include "dsp/model/diagonal_engine.hpp"
#include "dsp/model/routing_matrix.hpp"

namespace tapstream::testing {

// 64-frame blocks and filters of up to 64 taps, on the CPU engine, not real-time.
inline std::unique_ptr<LivePipeline> make_idle_pipeline(const RoutingMatrix& diagonal) {
  EngineOptions engine;
  engine.max_block_frames = 64;
  engine.max_taps = 64;
  LivePipelineOptions options;
  options.block_frames = 64;
  options.realtime = false;
  return std::make_unique<LivePipeline>(
      std::make_unique<DiagonalEngine>(make_cpu_engine(*diagonal.diagonal_bank(), engine)),
      options);
}

}  // namespace tapstream::testing

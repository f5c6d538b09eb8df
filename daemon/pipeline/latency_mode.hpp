#pragma once
// The live pipeline's two latency modes (daemon/pipeline/live_pipeline.hpp):
// buffered (an engine thread a block and a margin behind the device) and zero
// (same period: each period's output returns inside its own callback).

namespace tapstream {

enum class LatencyMode { buffered, zero };

}  // namespace tapstream

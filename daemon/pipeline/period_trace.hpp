#pragma once
// What the live pipeline did in each recent period, block and call, with
// CLOCK_MONOTONIC timestamps in nanoseconds (the clock `tapstream probe` and
// the kernel's own logs use), so that late periods can be lined up with the
// engine's work and with stalls of the machine: `tapstream ctl trace` (the
// API's get_trace) dumps it. Always on: a record costs a clock read and a few
// stores, and the rings' memory is touched once at construction.
//
// Threads: each ring has one writer (dsp/realtime/trace_ring.hpp): `inputs`
// the thread that calls push_input()/offer_input(), `outputs` the thread that
// calls pull_output(), `blocks` the thread that runs the engine (the engine
// thread, or the input side when the engine runs in the callback), `swaps`
// the thread that gives the engine new matrices (the engine thread, or the
// swap thread). Any thread may dump.

#include <time.h>

#include <cstddef>
#include <cstdint>

#include "dsp/realtime/trace_ring.hpp"

namespace tapstream {

inline std::int64_t monotonic_ns() noexcept {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return std::int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

inline std::int64_t to_ns(const timespec& t) noexcept {
  return std::int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

struct PeriodTrace {
  // push_input(): called at `start`, its frames handed over (to the ring and
  // the engine thread woken, or filtered in the call) at `handed`; `first`:
  // the index of its first input frame.
  enum Input : std::size_t { input_start, input_handed, input_first, input_frames, input_fields };
  // pull_output(): called at `start`, its output taken at `taken`, against
  // `deadline` (zero mode; 0 in buffered mode); `late`: frames played as silence.
  enum Output : std::size_t {
    output_start,
    output_taken,
    output_deadline,
    output_first,
    output_frames,
    output_late,
    output_fields
  };
  // One engine call: its thread woke (or found input) at `woke`, called the
  // engine at `start`, which returned at `end`; `first`: its first input frame.
  enum Block : std::size_t {
    block_woke,
    block_start,
    block_end,
    block_first,
    block_frames,
    block_fields
  };

  // One new matrix given to the engine (set_matrix on the engine thread, or
  // post_matrix on the swap thread when the engine runs in the callback),
  // from `start` to `end`; `block`: the first block it may filter.
  enum Swap : std::size_t { swap_start, swap_end, swap_block, swap_fields };

  static constexpr std::size_t kRecords = std::size_t(1) << 15;

  TraceRing<input_fields> inputs{kRecords};
  TraceRing<output_fields> outputs{kRecords};
  TraceRing<block_fields> blocks{kRecords};
  TraceRing<swap_fields> swaps{1024};
};

}  // namespace tapstream

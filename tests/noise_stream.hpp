#pragma once
// A test's JACK feeder and recorder streaming a random signal through the
// daemon cycle by cycle, for the suites that change the server's period
// under it (jack_period_change_test, pipewire_jack_test): the feeder plays
// `signal` from the cycle it is armed in, the recorder records from that same
// cycle and notes each cycle's frame count, so that the recording can be
// checked period by period against the convolution of what went in, whatever
// the periods were. With tap ports, the recorder also records the feeder's
// output as it arrives in the same cycle: what went in, as the daemon's graph
// had it (PipeWire, changing its quantum, may drop a cycle of the feeder's
// output that the recorder never sees come back). The two JACK calls the callbacks make go through
// function pointers: the JACK library linked in (jackd2's), or PipeWire's loaded at run time
// (pipewire_jack_test).

#include <jack/jack.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tapstream::testing {

// Shared by the two process callbacks and the test thread: the feeder
// publishes the first cycle's frame time with a release store of `fed_at_set`,
// the recorder how much it recorded with a release store of `recorded`.
template <std::size_t Channels>
struct NoiseStream {
  using PortBuffer = void* (*)(jack_port_t*, jack_nframes_t);
  using LastFrameTime = jack_nframes_t (*)(const jack_client_t*);
  NoiseStream(PortBuffer port_buffer, LastFrameTime last_frame_time)
      : port_buffer(port_buffer), last_frame_time(last_frame_time) {}
  PortBuffer port_buffer;
  LastFrameTime last_frame_time;
  jack_client_t* feeder = nullptr;
  jack_client_t* recorder = nullptr;
  jack_port_t* out_ports[Channels] = {};
  jack_port_t* in_ports[Channels] = {};
  jack_port_t* tap_ports[Channels] = {};  // optional: the recorder's copy of the feeder's output
  std::vector<float> signal[Channels];    // what the feeder plays, then silence
  std::atomic<bool> armed{false};
  std::atomic<std::uint64_t> cycles{0};  // the feeder's, for wait_for_cycles
  std::atomic<bool> fed_at_set{false};
  jack_nframes_t fed_at = 0;
  std::size_t fed = 0;  // feeder only
  std::vector<float> recording[Channels];
  std::vector<float> tapped[Channels];      // from tap_ports, when registered
  std::vector<std::uint32_t> cycle_frames;  // the recorder's cycles, in order
  std::atomic<std::size_t> recorded{0};
  std::atomic<std::size_t> recorded_cycles{0};

  static int feed(jack_nframes_t frames, void* arg) {
    auto& s = *static_cast<NoiseStream*>(arg);
    const bool on = s.armed.load(std::memory_order_acquire);
    for (std::size_t c = 0; c < Channels; ++c) {
      auto* out = static_cast<float*>(s.port_buffer(s.out_ports[c], frames));
      std::fill(out, out + frames, 0.0f);
      if (!on) continue;
      const std::size_t n = s.fed < s.signal[c].size()
                                ? std::min<std::size_t>(frames, s.signal[c].size() - s.fed)
                                : 0;
      std::copy_n(s.signal[c].begin() + std::ptrdiff_t(s.fed), n, out);
    }
    if (on) {
      if (!s.fed_at_set.load(std::memory_order_relaxed)) {
        s.fed_at = s.last_frame_time(s.feeder);
        s.fed_at_set.store(true, std::memory_order_release);
      }
      s.fed += frames;
    }
    s.cycles.fetch_add(1, std::memory_order_release);
    return 0;
  }

  static int record(jack_nframes_t frames, void* arg) {
    auto& s = *static_cast<NoiseStream*>(arg);
    if (!s.fed_at_set.load(std::memory_order_acquire)) return 0;
    if (static_cast<std::int32_t>(s.last_frame_time(s.recorder) - s.fed_at) < 0) return 0;
    const std::size_t at = s.recorded.load(std::memory_order_relaxed);
    const std::size_t cycle = s.recorded_cycles.load(std::memory_order_relaxed);
    const std::size_t n = std::min<std::size_t>(frames, s.recording[0].size() - at);
    if (n == 0 || cycle == s.cycle_frames.size()) return 0;
    for (std::size_t c = 0; c < Channels; ++c) {
      const auto* in = static_cast<const float*>(s.port_buffer(s.in_ports[c], frames));
      std::copy(in, in + n, s.recording[c].begin() + std::ptrdiff_t(at));
      if (s.tap_ports[c] != nullptr) {
        const auto* fed = static_cast<const float*>(s.port_buffer(s.tap_ports[c], frames));
        std::copy(fed, fed + n, s.tapped[c].begin() + std::ptrdiff_t(at));
      }
    }
    s.cycle_frames[cycle] = static_cast<std::uint32_t>(n);
    s.recorded_cycles.store(cycle + 1, std::memory_order_release);
    s.recorded.store(at + n, std::memory_order_release);
    return 0;
  }

  // Room for `frames` of recording in at most `cycles` cycles.
  void prepare(std::size_t frames, std::size_t cycles) {
    for (auto& r : recording) r.assign(frames, 0.0f);
    for (auto& r : tapped) r.assign(frames, 0.0f);
    cycle_frames.assign(cycles, 0);
  }
};

// One recorded cycle checked against what was wanted.
struct CycleCheck {
  std::size_t exact = 0;               // cycles equal to the convolution
  std::size_t silent = 0;              // late periods: whole silence
  std::size_t wrong = 0;               // neither (a glitch)
  std::size_t excused = 0;             // not exact, within `after` frames of a gap of the server's
  std::size_t first_wrong = SIZE_MAX;  // the first wrong frame...
  std::size_t first_wrong_cycle = 0;   // ...and its cycle
  double worst_error = 0.0;            // of the wrong ones
};

// Classifies each recorded cycle of `y` (cycle lengths `cycles`, `count` of
// them) against `want` (the convolution of what was fed), with tolerance
// `tolerance`. A cycle that is not exact and begins within 2048 frames
// before or `after` frames after one of `gaps` (recorded frames where the
// server dropped a cycle, see check_placed_cycles) is excused, not wrong.
inline CycleCheck check_cycles(const std::vector<float>& y, const std::vector<double>& want,
                               const std::vector<std::uint32_t>& cycles, std::size_t count,
                               double tolerance, const std::vector<std::size_t>& gaps = {},
                               std::size_t after = 0) {
  CycleCheck check;
  std::size_t at = 0;
  for (std::size_t k = 0; k < count; ++k) {
    bool near_gap = false;
    for (const std::size_t gap : gaps) {
      near_gap =
          near_gap || (at + 2048 >= gap && at < gap + after);  // (either side may see it first)
    }
    double error = 0.0;
    bool zero = true;
    for (std::size_t f = at; f < at + cycles[k]; ++f) {
      error = std::max(error, std::abs(double(y[f]) - (f < want.size() ? want[f] : 0.0)));
      zero = zero && y[f] == 0.0f;
    }
    if (error <= tolerance) {
      ++check.exact;
    } else if (near_gap) {
      ++check.excused;
    } else if (zero) {
      ++check.silent;
    } else {
      ++check.wrong;
      if (check.first_wrong == SIZE_MAX) {
        check.first_wrong = at;
        while (std::abs(double(y[check.first_wrong]) -
                        (check.first_wrong < want.size() ? want[check.first_wrong] : 0.0)) <=
               tolerance) {
          ++check.first_wrong;
        }
        check.first_wrong_cycle = k;
      }
      check.worst_error = std::max(check.worst_error, error);
    }
    at += cycles[k];
  }
  return check;
}

// Like check_cycles, for a graph that may drop cycles (PipeWire on a loaded
// machine): each recorded cycle is placed in the fed `signal` by its tapped
// copy (what the feeder played in that cycle, found at or after where the
// previous cycle ended) and checked against the convolution of the whole
// signal with `h` there. Frames the feeder played that never came back are
// counted in `dropped`; a cycle whose tapped copy is not in the signal counts
// as wrong.
struct PlacedCycleCheck : CycleCheck {
  std::size_t dropped = 0;              // frames of the signal in cycles the recorder never saw
  std::vector<std::size_t> gap_frames;  // recorded frames where it skipped
};
inline PlacedCycleCheck check_placed_cycles(const std::vector<float>& y,
                                            const std::vector<float>& tapped,
                                            const std::vector<float>& signal,
                                            const std::vector<float>& h,
                                            const std::vector<std::uint32_t>& cycles,
                                            std::size_t count, double tolerance) {
  PlacedCycleCheck check;
  std::size_t at = 0, next = 0;  // recorded frame, its expected place in the signal
  for (std::size_t k = 0; k < count; at += cycles[k++]) {
    const std::size_t n = cycles[k];
    std::size_t place = next;
    const auto found = [&](std::size_t p) {
      return p + n <= signal.size() && std::equal(tapped.begin() + std::ptrdiff_t(at),
                                                  tapped.begin() + std::ptrdiff_t(at + n),
                                                  signal.begin() + std::ptrdiff_t(p));
    };
    while (place < next + 65536 && !found(place)) ++place;
    if (!found(place)) {
      ++check.wrong;
      if (check.first_wrong == SIZE_MAX) check.first_wrong = at, check.first_wrong_cycle = k;
      next += n;
      continue;
    }
    if (place != next) {
      check.dropped += place - next;
      check.gap_frames.push_back(at);
    }
    next = place + n;
    double error = 0.0;
    bool zero = true;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t p = place + i;
      double want = 0.0;
      for (std::size_t t = 0; t < h.size() && t <= p; ++t)
        want += double(h[t]) * double(signal[p - t]);
      error = std::max(error, std::abs(double(y[at + i]) - want));
      zero = zero && y[at + i] == 0.0f;
    }
    if (error <= tolerance) {
      ++check.exact;
    } else if (zero) {
      ++check.silent;
    } else {
      ++check.wrong;
      check.worst_error = std::max(check.worst_error, error);
      if (check.first_wrong == SIZE_MAX) check.first_wrong = at, check.first_wrong_cycle = k;
    }
  }
  return check;
}

}  // namespace tapstream::testing

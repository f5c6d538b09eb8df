#include "daemon/commands/capacity_search.hpp"

#include <algorithm>

namespace tapstream {

CapacitySearch search_capacity(std::size_t most, std::size_t probe_blocks,
                               std::size_t measure_blocks,
                               const std::function<bool(std::size_t, std::size_t)>& fits) {
  CapacitySearch result;
  most = std::max<std::size_t>(1, most);
  // A short probe's p99.9 is its few worst blocks: one stall of the machine
  // (a clock ramping up, another process) fails it at any count. A failed
  // probe is asked once more: an overload fails again, a lone stall not.
  const auto probe_fits = [&](std::size_t c) {
    return fits(c, probe_blocks) || fits(c, probe_blocks);
  };
  std::size_t lo = 0, hi = 0;
  for (std::size_t c = 1; c <= most; c = std::min(most, c * 2)) {
    if (probe_fits(c)) {
      lo = c;
      if (c == most) break;
    } else {
      hi = c;
      break;
    }
  }
  if (hi == 0) result.capped = lo == most;
  while (hi != 0 && lo != 0 && hi - lo > std::max<std::size_t>(1, lo / 16)) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (probe_fits(mid))
      lo = mid;
    else
      hi = mid;
  }
  // Short probes miss the rare spikes a long run meets: step down until a
  // long run fits. Small steps first (the probe is usually close), then
  // halves, so that a machine with spikes at every count still ends within
  // a few runs with an answer instead of none.
  for (int attempt = 0; lo != 0; ++attempt) {
    if (fits(lo, measure_blocks)) {
      result.channels = lo;
      return result;
    }
    result.capped = false;
    lo = attempt < 4 ? lo * 7 / 8 : lo / 2;
  }
  return result;
}

}  // namespace tapstream

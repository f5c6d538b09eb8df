#pragma once
// The search of `tapstream bench capacity`: the largest channel count whose
// block times fit the budget, probed short and confirmed long.

#include <cstddef>
#include <functional>

namespace tapstream {

struct CapacitySearch {
  std::size_t channels = 0;  // confirmed over measure_blocks; 0: no count was
  bool capped = false;       // `most` itself fit the probes (the real capacity may be higher)
};

// fits(channels, blocks): whether `channels` channels keep their block times
// within the budget over `blocks` timed blocks. The search doubles from 1
// while the short probes (probe_blocks) fit (a probe that does not is run
// once more before it counts: a lone stall must not end the search), bisects to within ~6 %, then
// confirms over measure_blocks, stepping down (by 1/8 four times, then by
// halves) while the long run does not fit, down to 1 channel.
CapacitySearch search_capacity(std::size_t most, std::size_t probe_blocks,
                               std::size_t measure_blocks,
                               const std::function<bool(std::size_t, std::size_t)>& fits);

}  // namespace tapstream

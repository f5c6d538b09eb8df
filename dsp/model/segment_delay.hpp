#pragma once
// A path's delay on a uniformly partitioned engine (partition P, segments of
// P frames, a frequency-domain delay line of the inputs' segment spectra):
// d = q P + r frames. The path reads its input's delay line q segments
// further back (its partition j meets the spectrum of segment s - q - j) and
// only the remainder r < P becomes leading zeros of its taps, so a delay
// costs at most one partition whatever its length. Both matrix engines (CPU,
// CUDA) run delays this way; this is their shared arithmetic.

#include <cstddef>
#include <vector>

#include "dsp/model/routing_matrix.hpp"

namespace tapstream {

struct SegmentDelay {
  std::size_t segments = 0;   // q: whole segments, read further back in the delay line
  std::size_t remainder = 0;  // r < P: leading zeros of the taps
};

inline SegmentDelay split_delay(std::size_t delay_frames, std::size_t partition) {
  return {delay_frames / partition, delay_frames % partition};
}

// Partitions a path of `taps` taps and `delay_frames` delay spans: its
// remainder's zeros and its taps, in segments.
inline std::size_t partitions_reached(std::size_t delay_frames, std::size_t taps,
                                      std::size_t partition) {
  return (delay_frames % partition + taps + partition - 1) / partition;
}

// Partitions an engine holds per path so that any path of at most `max_taps`
// taps, whatever its delay's remainder, fits.
inline std::size_t partitions_for_any_delay(std::size_t max_taps, std::size_t partition) {
  return (partition - 1 + max_taps + partition - 1) / partition;
}

// Segments the delay line keeps so that a path of at most `max_taps` taps
// delayed by at most `max_delay_frames` finds every segment it reads: its
// oldest is q + k - 1 back, and the current segment's own slot counts.
inline std::size_t delay_line_segments(std::size_t max_taps, std::size_t max_delay_frames,
                                       std::size_t partition) {
  return max_delay_frames / partition + partitions_for_any_delay(max_taps, partition);
}

// A dense engine's table of whole-segment delays: entry [input * stride +
// output] is the segments of the path input -> output (0 where no path
// runs); stride >= outputs (a padded row).
inline std::vector<int> segment_delay_table(const RoutingMatrix& matrix, std::size_t partition,
                                            std::size_t stride) {
  std::vector<int> table(matrix.inputs() * stride, 0);
  for (const MatrixPath& path : matrix.paths())
    table[path.input * stride + path.output] = int(path.delay_frames / partition);
  return table;
}

}  // namespace tapstream

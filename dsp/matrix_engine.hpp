#pragma once
// A MatrixEngine runs a RoutingMatrix on a stream: inputs() channels in,
// outputs() channels out, each output the sum of its paths. The same contract
// as Engine (dsp/engine.hpp): any call size 1..max_block_frames, output exactly
// the causal convolution of the whole stream (no added latency, independent of
// how the stream is cut), swaps at a block boundary with a one-block
// crossfade, one thread at a time, no allocation in process().
//
// Two implementations: the CPU engine's native matrix (dsp/cpu_matrix_engine:
// one frequency-domain delay line per input, one inverse transform per
// output, BruteFIR's model) and MatrixFilter (dsp/matrix_filter: any Engine
// with one channel per path, used where an engine has no native matrix).

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "dsp/engine.hpp"
#include "dsp/routing_matrix.hpp"

namespace tapstream {

class MatrixEngine {
 public:
  virtual ~MatrixEngine() = default;

  // `in` holds inputs() channels, `out` outputs() channels, `frames` frames
  // each, both in `layout`; they must not overlap.
  virtual void process(std::span<const float> in, std::span<float> out, std::size_t frames,
                       Layout layout) = 0;
  // Swaps in a matrix with the same paths (same input -> output pairs in the
  // same order; new filters, gains, delays or polarities) at the next block
  // boundary. Throws std::invalid_argument naming the first path that
  // differs, and keeps the running matrix.
  virtual void set_matrix(const RoutingMatrix& matrix, bool crossfade) = 0;
  virtual void reset() = 0;

  virtual const RoutingMatrix& matrix() const = 0;
  std::size_t inputs() const { return matrix().inputs(); }
  std::size_t outputs() const { return matrix().outputs(); }
  virtual std::size_t max_block_frames() const = 0;
  virtual std::size_t max_taps() const = 0;
  virtual std::string description() const = 0;
};

// Throws std::invalid_argument unless `next` can replace `running` in place
// (same channel counts, same paths in the same order, taps within max_taps).
void check_matrix_swap(const RoutingMatrix& running, const RoutingMatrix& next,
                       std::size_t max_taps);

}  // namespace tapstream

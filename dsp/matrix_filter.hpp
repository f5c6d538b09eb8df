#pragma once
// Runs a RoutingMatrix on any Engine: the engine filters one channel per path
// (each path's effective taps: delay, gain and polarity folded in), fed from
// the path's input; what the paths deliver to an output is summed there.
// Exact, block-size invariant and without added latency because the engine
// is; the cost is one forward transform per path rather than one per input,
// which engines with a native matrix path (per-bin products) avoid.
//
// Used by one thread at a time, like an Engine; process() never allocates.

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "dsp/engine.hpp"
#include "dsp/routing_matrix.hpp"

namespace tapstream {

class MatrixFilter {
 public:
  // `engine` must have been built for matrix.path_bank() (one channel per path).
  MatrixFilter(RoutingMatrix matrix, std::unique_ptr<Engine> engine);

  // `in` holds inputs() channels, `out` outputs() channels, `frames` frames
  // each (1..max_block_frames()), both in `layout`; they must not overlap.
  void process(std::span<const float> in, std::span<float> out, std::size_t frames, Layout layout);

  // Swaps in a matrix with the same paths (same input -> output pairs in the
  // same order), new filters, gains, delays or polarities, at the next block
  // boundary with the engine's crossfade. Throws std::invalid_argument naming
  // the first path that differs, and keeps the running matrix.
  void set_matrix(const RoutingMatrix& matrix, bool crossfade);
  void reset() { engine_->reset(); }

  const RoutingMatrix& matrix() const { return matrix_; }
  std::size_t inputs() const { return matrix_.inputs(); }
  std::size_t outputs() const { return matrix_.outputs(); }
  std::size_t max_block_frames() const { return engine_->max_block_frames(); }
  const Engine& engine() const { return *engine_; }

 private:
  RoutingMatrix matrix_;
  std::unique_ptr<Engine> engine_;
  std::vector<float> path_in_;   // planar, one channel per path
  std::vector<float> path_out_;  // planar, one channel per path
};

}  // namespace tapstream

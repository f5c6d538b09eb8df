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
#include <string>
#include <vector>

#include "dsp/model/engine.hpp"
#include "dsp/model/matrix_engine.hpp"
#include "dsp/model/routing_matrix.hpp"

namespace tapstream {

class MatrixFilter final : public MatrixEngine {
 public:
  // `engine` must have been built for matrix.path_bank() (one channel per path).
  MatrixFilter(RoutingMatrix matrix, std::unique_ptr<Engine> engine);

  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout layout) override;
  void set_matrix(const RoutingMatrix& matrix, bool crossfade) override;
  void reset() override { engine_->reset(); }

  std::size_t inputs() const override { return matrix_.inputs(); }
  std::size_t outputs() const override { return matrix_.outputs(); }
  std::size_t max_block_frames() const override { return engine_->max_block_frames(); }
  std::size_t max_taps() const override { return engine_->max_taps(); }
  std::string name() const override { return engine_->name(); }
  std::string description() const override;

 private:
  RoutingMatrix matrix_;
  std::unique_ptr<Engine> engine_;
  std::vector<float> path_in_;   // planar, one channel per path
  std::vector<float> path_out_;  // planar, one channel per path
};

}  // namespace tapstream

#pragma once
// A routing matrix sharded by output over several engines, one per GPU: each
// output (with every path into it) runs on one shard, a shard gets the inputs
// its paths read, and a call returns when every shard's has. The engine
// factory (daemon/engine_factory) makes one for `EngineOptions::devices` of
// more than one GPU; with one it makes the plain engine, so the one-GPU path
// has nothing added.
//
// The split: outputs in contiguous ranges, balanced by their paths (a
// diagonal matrix: equal numbers of channels; a shard of a diagonal matrix is
// diagonal, so it keeps the per-channel engines' fast paths). set_matrix()
// splits the new matrix the same way and is checked whole before any shard
// takes its part, so a refused swap leaves every shard as it was; so are
// set_paths() updates, each path's taps sent to the shard that runs it.
//
// A call: every shard's block is started (MatrixEngine::start_process: the
// CUDA engine enqueues its copies and kernels and returns) before any is
// finished, so the GPUs work at once with no thread hand-off; an engine
// without split calls runs whole in its start (the CPU engines: the shards
// then run one after the other, which the tests use to check the split
// exactly). A shard reads its inputs from the caller's block where they are
// one contiguous run of it (planar, or every input), else from its own
// staging (the CUDA engine's page-locked staging, where it then copies
// nothing itself); it writes its outputs straight into the caller's block
// where they are contiguous in it (planar), else into its staging, copied
// out when every shard is done.
//
// Not offered: realtime() (no shard engine that has one is sharded: the CPU
// engine runs on one host), process_device() (each shard's memory is on its
// own GPU), page-locked memory and staging of its own.
//
// Threads: one caller, as every MatrixEngine; the shards are made at once,
// one thread each (a GPU's engine set-up is mostly its own device's work).

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dsp/model/matrix_engine.hpp"
#include "dsp/model/routing_matrix.hpp"

namespace tapstream {

// The outputs [first, first + count) of a matrix, with the paths into them.
struct OutputRange {
  std::size_t first = 0;
  std::size_t count = 0;
  bool operator==(const OutputRange&) const = default;
};

// At most `shards` contiguous, non-empty ranges covering every output, with
// as equal numbers of paths as whole outputs allow (an output no path reaches
// weighs as one path). Fewer ranges when the matrix has fewer outputs.
std::vector<OutputRange> split_outputs(const RoutingMatrix& matrix, std::size_t shards);

// The part of `matrix` that computes `range`: its outputs renumbered from 0,
// its inputs those its paths read (ascending, renumbered from 0; written to
// `inputs` as the matrix's own numbers), its paths in the matrix's order with
// their gains, delays and polarities. A diagonal matrix's part is diagonal
// (and its diagonal_bank() shared where the whole's is).
RoutingMatrix matrix_part(const RoutingMatrix& matrix, const OutputRange& range,
                          std::vector<std::size_t>& inputs);

class ShardedEngine final : public MatrixEngine {
 public:
  // Builds shard s's engine for its part of the matrix (called once per
  // shard, on a thread of its own; all shards are made before any is used).
  using MakeShard =
      std::function<std::unique_ptr<MatrixEngine>(std::size_t shard, const RoutingMatrix& part)>;

  // Throws what a shard's construction throws, or std::invalid_argument when
  // the shards disagree on their block or filter sizes.
  ShardedEngine(const RoutingMatrix& matrix, std::size_t shards, const MakeShard& make);

  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout layout) override;
  void set_matrix(const RoutingMatrix& matrix, bool crossfade) override;
  // Each named path's taps to the shard that runs it (as its own path
  // index there), checked whole before any shard takes its share.
  void set_paths(std::span<const PathTaps> paths, bool crossfade) override;
  void reset() override;

  std::size_t inputs() const override { return inputs_; }
  std::size_t outputs() const override { return outputs_; }
  std::size_t max_block_frames() const override { return max_block_frames_; }
  std::size_t max_taps() const override { return max_taps_; }
  std::size_t max_delay_frames() const override { return max_delay_frames_; }
  std::string name() const override;
  std::string description() const override;
  double last_call_host_us() const override { return last_call_host_us_; }

  std::size_t shards() const { return shards_.size(); }

 private:
  struct Shard {
    std::unique_ptr<MatrixEngine> engine;
    OutputRange range;
    std::vector<std::size_t> inputs;  // the matrix's inputs it reads, ascending
    bool inputs_contiguous = false;   // inputs[k] == inputs[0] + k
    // Its blocks when the caller's cannot be used: the engine's staging where
    // it has one large enough, else these.
    std::span<float> in_block, out_block;
    std::vector<float> own_in, own_out;
  };

  // Where shard s reads this call's inputs from (gathered first if needed).
  std::span<const float> shard_input(Shard& shard, std::span<const float> in, std::size_t frames,
                                     Layout layout) const;
  // Where shard s writes its outputs; `scatter` says whether they must be
  // copied into the caller's block afterwards.
  std::span<float> shard_output(Shard& shard, std::span<float> out, std::size_t frames,
                                Layout layout, bool& scatter) const;
  void scatter(const Shard& shard, std::span<float> out, std::size_t frames, Layout layout) const;

  // Where each path of the matrix runs: its shard and its index there.
  struct PathPlace {
    std::size_t shard = 0, index = 0;
  };

  std::vector<Shard> shards_;
  std::vector<PathPlace> path_place_;  // by the matrix's path index
  std::size_t inputs_ = 0, outputs_ = 0;
  std::size_t max_block_frames_ = 0, max_taps_ = 0, max_delay_frames_ = 0;
  // The running matrix's paths (input, output) with a token tap each: what a
  // swap is checked against (check_matrix_swap) without keeping the filters.
  std::unique_ptr<RoutingMatrix> skeleton_;
  double last_call_host_us_ = std::numeric_limits<double>::quiet_NaN();
};

}  // namespace tapstream

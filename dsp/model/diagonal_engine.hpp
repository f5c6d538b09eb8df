#pragma once
// A diagonal routing matrix (path c: input c -> output c, as many outputs as
// inputs) run on a per-channel Engine: the CPU engines and the CUDA engine
// keep their fast per-channel paths (constant-memory taps, the partitioned
// live path, the shared-filter case) under the one MatrixEngine interface.
//
// process() is the engine's process(), nothing added: no copy, no channel
// mapping, and no copy of the matrix is kept. set_matrix() hands the engine the matrix's
// diagonal_bank() (dsp/model/routing_matrix.hpp: shared when every path has the same effective
// taps); realtime() is the engine's real-time face, seen through the matrix; the CUDA transport's
// extras are what the factory found for the engine.
//
// set_paths() and post_paths() hand the named channels' new effective taps
// to the engine's per-channel update (Engine::set_channel_filters,
// RealtimeEngine::post_channel_filters), which transforms and crossfades
// those channels only, as the native matrix engines do their paths. Where
// the engine cannot (it says so: the CUDA engine's direct and uniform FFT
// paths, a running bank of one shared filter), they rebuild the
// per-channel bank (the named channels' new taps, the others' as they run)
// and hand it over like set_matrix().
//
// Threads: those of the engine it wraps (one caller; with realtime(), one
// audio thread in process_by() and one swap thread in post_matrix()).

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dsp/model/engine.hpp"
#include "dsp/model/matrix_engine.hpp"
#include "dsp/model/routing_matrix.hpp"

namespace tapstream {

// What the engine factory knows of a per-channel engine's transport beyond
// process() (the CUDA engine's; empty for the others).
struct EngineTransport {
  std::span<float> staging_input;  // the engine's own page-locked staging
  std::span<float> staging_output;
  PinnedMemory pinned;
  double (*call_host_us)(const Engine& engine) = nullptr;  // its last call's CPU-side part
  // MatrixEngine::process_device on the engine (null: it has no device path).
  bool (*process_device)(Engine& engine, const float* in, std::size_t in_stride, float* out,
                         std::size_t out_stride, std::size_t frames, void* stream) = nullptr;
};

class DiagonalEngine final : public MatrixEngine, private RealtimeMatrixEngine {
 public:
  // `engine` runs the diagonal_bank() of a diagonal matrix (its channels are
  // the matrix's inputs and outputs).
  // `running`: the matrix the engine was built for (its gains, delays and
  // polarities, and its bank, which set_paths() needs); null: set_paths()
  // refuses until the first set_matrix().
  explicit DiagonalEngine(std::unique_ptr<Engine> engine, EngineTransport transport = {},
                          const RoutingMatrix* running = nullptr);

  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout layout) override {
    engine_->process(in, out, frames, layout);
  }
  void start_process(std::span<const float> in, std::span<float> out, std::size_t frames,
                     Layout layout) override {
    engine_->start_process(in, out, frames, layout);
  }
  void finish_process() override { engine_->finish_process(); }
  void set_matrix(const RoutingMatrix& matrix, bool crossfade) override;
  void set_paths(std::span<const PathTaps> paths, bool crossfade) override;
  void reset() override { engine_->reset(); }

  std::size_t inputs() const override { return engine_->channels(); }
  std::size_t outputs() const override { return engine_->channels(); }
  std::size_t max_block_frames() const override { return engine_->max_block_frames(); }
  std::size_t max_taps() const override { return engine_->max_taps(); }
  std::string name() const override { return engine_->name(); }
  std::string description() const override { return engine_->description(); }

  RealtimeMatrixEngine* realtime() override { return realtime_ ? this : nullptr; }
  std::span<float> staging_input() override { return transport_.staging_input; }
  std::span<float> staging_output() override { return transport_.staging_output; }
  PinnedMemory pinned_memory() const override { return transport_.pinned; }
  double last_call_host_us() const override;
  bool process_device(const float* in, std::size_t in_stride, float* out, std::size_t out_stride,
                      std::size_t frames, void* stream) override {
    return transport_.process_device != nullptr &&
           transport_.process_device(*engine_, in, in_stride, out, out_stride, frames, stream);
  }

 private:
  bool process_by(std::span<const float> in, std::span<float> out, std::size_t frames,
                  Layout layout, const timespec& deadline) noexcept override {
    return realtime_->process_by(in, out, frames, layout, deadline);
  }
  void post_matrix(const RoutingMatrix& matrix, bool crossfade) override;
  void post_paths(std::span<const PathTaps> paths, bool crossfade) override;
  bool preparing_matrix() const override { return realtime_->preparing_filters(); }

  // Throws std::invalid_argument unless `matrix` is the diagonal of this
  // engine's channels (a per-channel engine cannot reroute).
  void check(const RoutingMatrix& matrix) const;
  // Remembers what runs (from set_matrix/post_matrix).
  void remember(const RoutingMatrix& matrix, std::shared_ptr<const FilterBank> bank);
  // The named paths' effective taps (checked), in `paths` order.
  std::vector<std::vector<float>> effective_taps(std::span<const PathTaps> paths) const;
  // The running bank with `paths` replaced by `taps` (their effective taps).
  std::shared_ptr<const FilterBank> bank_with(std::span<const PathTaps> paths,
                                              std::vector<std::vector<float>>& taps) const;
  // Hands the update to the engine: per channel where it can (`channel_update`:
  // Engine::set_channel_filters or RealtimeEngine::post_channel_filters),
  // else as a whole bank (`whole`: set_filters or post_filters).
  template <typename ChannelUpdate, typename WholeBank>
  void update(std::span<const PathTaps> paths, bool crossfade, ChannelUpdate channel_update,
              WholeBank whole);

  std::unique_ptr<Engine> engine_;
  RealtimeEngine* realtime_;  // engine_'s, or null
  EngineTransport transport_;
  // What runs, for set_paths(): each path's gain, delay and polarity (taps
  // left empty), the bank the engine was last handed whole (shared, not
  // copied) and, per channel, the effective taps a per-channel update has
  // installed since (empty: the bank's), which a later whole bank keeps.
  std::vector<MatrixPath> geometry_;
  std::shared_ptr<const FilterBank> bank_;
  std::vector<std::vector<float>> updated_;
};

}  // namespace tapstream

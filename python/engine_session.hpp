#pragma once
// The Python module's engine: a MatrixEngine (made by the engine factory) and
// the matrix it runs, for callers that hand it blocks of any length in any
// memory order. Plain C++ (no Python): the module calls it with the GIL
// released.
//
// Threads: any number may call it; one at a time gets the engine (a
// MatrixEngine takes one caller at a time), the others wait.

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "dsp/model/matrix_engine.hpp"
#include "dsp/model/routing_matrix.hpp"

namespace tapstream::python {

// Samples of a 2-D (channels, frames) block anywhere in memory: sample
// (channel c, frame f) at data[c * channel_stride + f * frame_stride].
struct StridedBlock {
  const float* data = nullptr;
  std::ptrdiff_t channel_stride = 0;
  std::ptrdiff_t frame_stride = 0;
};

class EngineSession {
 public:
  EngineSession(std::unique_ptr<MatrixEngine> engine, RoutingMatrix matrix);

  // Filters `frames` frames (any number) of inputs() channels from `in` into
  // `out`, outputs() rows of `frames` floats each (C order). Calls longer than
  // the engine's block are split; a C-ordered block that fits one engine call
  // goes straight through, anything else through the session's own staging.
  void process(const StridedBlock& in, float* out, std::size_t frames);

  // The same through device memory (a CUDA engine's; see
  // MatrixEngine::process_device): `in` holds inputs() rows of `frames`
  // floats, `out` outputs() rows, both C order on the engine's GPU. Returns
  // false, doing nothing, where the engine has no device path.
  bool process_device(const float* in, float* out, std::size_t frames, void* stream);

  // The engine's own time for `calls` calls of `frames` frames from `in` (C
  // order, at most one engine block) into `out`, in microseconds each: what
  // a call costs without the module (bench/python_overhead.py).
  std::vector<double> time_engine_calls(const float* in, float* out, std::size_t frames,
                                        std::size_t calls);
  // The same for process_device (false where there is none).
  std::vector<double> time_device_calls(const float* in, float* out, std::size_t frames,
                                        void* stream, std::size_t calls);
  // The engine's own microseconds in the last process() or process_device()
  // (its calls and the session's staging, not the module's work around
  // them): what bench/python_overhead.py subtracts from the same call's time
  // seen from Python, so that both are measured at the same pace.
  double last_call_us() const;

  // Swaps in `next` (same paths as the running one) at the next call;
  // throws std::invalid_argument naming the first difference.
  void set_matrix(const RoutingMatrix& next, bool crossfade);
  // New taps for some paths, keyed by (input, output); every other path and
  // every gain, delay and polarity stays. The engine transforms the named
  // paths only (MatrixEngine::set_paths). Throws std::invalid_argument
  // naming a pair that is no path of the matrix, or the engine's refusal.
  void set_paths(std::map<std::pair<std::size_t, std::size_t>, std::vector<float>> taps,
                 bool crossfade);
  // The same with the taps in device memory on the engine's GPU
  // (MatrixEngine::set_paths_device: transformed there, no copy through the
  // host), after what was enqueued on `stream`. Returns false, doing
  // nothing, where the engine has no device path. Their taps are not kept on
  // the host: matrix() refuses, naming them, until they are set again from
  // host memory or the matrix is set whole.
  bool set_paths_device(
      const std::map<std::pair<std::size_t, std::size_t>, std::span<const float>>& taps,
      bool crossfade, void* stream);

  // Forgets the input history.
  void reset();

  // The matrix as last set (what runs from the next call on). Throws
  // std::runtime_error naming a path whose taps came last from device memory.
  std::shared_ptr<const RoutingMatrix> matrix() const;
  // Its routing, gains, delays and polarities (which set_paths keeps); the
  // taps of paths set since are not merged in.
  std::shared_ptr<const RoutingMatrix> routing() const;
  const MatrixEngine& engine() const { return *engine_; }
  std::size_t inputs() const { return engine_->inputs(); }
  std::size_t outputs() const { return engine_->outputs(); }

 private:
  mutable std::mutex mutex_;  // one caller at a time in the engine, and guards matrix_
  std::unique_ptr<MatrixEngine> engine_;
  // The matrix as last set whole, and the taps set_paths gave since (by
  // path index), merged into it by matrix(); both guarded by mutex_.
  mutable std::shared_ptr<const RoutingMatrix> matrix_;
  mutable std::map<std::size_t, std::vector<float>> updated_taps_;
  std::set<std::size_t> device_taps_;  // paths whose taps came last from device memory
  double last_call_us_ = 0.0;
  // Each path's index by (input, output).
  std::map<std::pair<std::size_t, std::size_t>, std::size_t> index_of_;
  // The paths' indices for the keys of `taps` (guarded by mutex_ held).
  template <class Taps>
  std::vector<std::size_t> indices(const Taps& taps) const;
  std::vector<float> staging_in_, staging_out_;  // planar, one engine block each
};

}  // namespace tapstream::python

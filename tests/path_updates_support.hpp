#pragma once
// Test support for per-path updates (MatrixEngine::set_paths): a stream run
// in calls with updates scheduled before some of them, and its float64
// reference: each path's contribution is the causal convolution of its input
// with the filter of the moment (gain, delay and polarity applied in
// float64), and a call that follows an update blends the old and the new
// filter's output linearly over the call, w = (i + 1) / frames.

#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <map>
#include <vector>

#include "dsp/model/matrix_engine.hpp"
#include "dsp/model/routing_matrix.hpp"

namespace tapstream::testing {

// Before call `call` (counted from 0), these paths take these taps.
using Schedule = std::map<std::size_t, std::map<std::size_t, std::vector<float>>>;

// Runs `inputs` through `engine` in calls of `sizes`, applying `schedule`
// with set_paths (crossfade on; `update`, when set, applies it instead);
// planar output per channel.
inline std::vector<std::vector<float>> run_with_updates(
    MatrixEngine& engine, const std::vector<std::vector<float>>& inputs,
    const std::vector<std::size_t>& sizes, const Schedule& schedule,
    const std::function<void(MatrixEngine&, const std::vector<PathTaps>&)>& update = {}) {
  const std::size_t frames = inputs[0].size(), n_in = engine.inputs(), n_out = engine.outputs();
  std::vector<std::vector<float>> outputs(n_out, std::vector<float>(frames));
  std::vector<float> in, out;
  std::size_t start = 0;
  for (std::size_t call = 0; call < sizes.size(); ++call) {
    if (const auto found = schedule.find(call); found != schedule.end()) {
      std::vector<PathTaps> updates;
      for (const auto& [path, taps] : found->second) updates.push_back({path, taps});
      if (update) {
        update(engine, updates);
      } else {
        engine.set_paths(updates, /*crossfade=*/true);
      }
    }
    const std::size_t n = sizes[call];
    in.assign(n_in * n, 0.0f);
    out.assign(n_out * n, std::numeric_limits<float>::quiet_NaN());
    for (std::size_t c = 0; c < n_in; ++c)
      for (std::size_t f = 0; f < n; ++f) in[c * n + f] = inputs[c][start + f];
    engine.process(in, out, n, Layout::planar);
    for (std::size_t c = 0; c < n_out; ++c)
      for (std::size_t f = 0; f < n; ++f) outputs[c][start + f] = out[c * n + f];
    start += n;
  }
  return outputs;
}

// y[n] for n in [first, last) of `x` through `path`'s geometry with `taps`, in float64.
inline void add_path_output(const MatrixPath& path, const std::vector<float>& taps,
                            const std::vector<float>& x, std::size_t first, std::size_t last,
                            double weight_from, double weight_step, std::vector<double>& y) {
  const double scale = std::pow(10.0, path.gain_db / 20.0) * (path.invert ? -1.0 : 1.0);
  for (std::size_t n = first; n < last; ++n) {
    double acc = 0.0;
    for (std::size_t k = 0; k < taps.size(); ++k) {
      const std::size_t lag = k + path.delay_frames;
      if (lag > n) break;
      acc += double(taps[k]) * double(x[n - lag]);
    }
    y[n] += (weight_from + weight_step * double(n - first + 1)) * scale * acc;
  }
}

// The float64 reference of the whole run (see the top of the file).
inline std::vector<std::vector<double>> piecewise_reference(
    const RoutingMatrix& initial, const std::vector<std::vector<float>>& inputs,
    const std::vector<std::size_t>& sizes, const Schedule& schedule) {
  const std::size_t frames = inputs[0].size();
  std::vector<std::vector<double>> y(initial.outputs(), std::vector<double>(frames, 0.0));
  std::vector<std::vector<float>> current;
  for (const MatrixPath& p : initial.paths()) current.push_back(p.taps);
  std::size_t start = 0;
  for (std::size_t call = 0; call < sizes.size(); ++call) {
    const std::size_t n = sizes[call];
    std::map<std::size_t, std::vector<float>> changed;
    if (const auto found = schedule.find(call); found != schedule.end()) changed = found->second;
    for (std::size_t p = 0; p < initial.paths().size(); ++p) {
      const MatrixPath& path = initial.paths()[p];
      auto& out = y[path.output];
      const auto& x = inputs[path.input];
      const auto update = changed.find(p);
      if (update == changed.end()) {
        add_path_output(path, current[p], x, start, start + n, 1.0, 0.0, out);
        continue;
      }
      const double step = 1.0 / double(n);
      add_path_output(path, current[p], x, start, start + n, 1.0, -step, out);
      add_path_output(path, update->second, x, start, start + n, 0.0, step, out);
      current[p] = update->second;
    }
    start += n;
  }
  return y;
}

}  // namespace tapstream::testing

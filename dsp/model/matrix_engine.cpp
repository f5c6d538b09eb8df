#include "dsp/model/matrix_engine.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace tapstream {

void check_matrix_swap(const RoutingMatrix& running, const RoutingMatrix& next,
                       std::size_t max_taps, std::size_t max_delay_frames) {
  if (next.inputs() != running.inputs() || next.outputs() != running.outputs()) {
    throw std::invalid_argument("the new matrix is " + std::to_string(next.inputs()) + " -> " +
                                std::to_string(next.outputs()) + ", the running one " +
                                std::to_string(running.inputs()) + " -> " +
                                std::to_string(running.outputs()) +
                                " (a restart is needed to change the channel counts)");
  }
  const auto& now = running.paths();
  const auto& then = next.paths();
  if (then.size() != now.size()) {
    throw std::invalid_argument("the new matrix has " + std::to_string(then.size()) +
                                " paths, the running one " + std::to_string(now.size()) +
                                " (a restart is needed to add or remove paths)");
  }
  for (std::size_t p = 0; p < now.size(); ++p) {
    if (then[p].input != now[p].input || then[p].output != now[p].output) {
      throw std::invalid_argument(
          RoutingMatrix::describe_path(p, then[p]) + " differs from the running " +
          RoutingMatrix::describe_path(p, now[p]) + " (a restart is needed to reroute)");
    }
  }
  for (std::size_t p = 0; p < then.size(); ++p) {
    const MatrixPath& path = then[p];
    const std::string name = RoutingMatrix::describe_path(p, path);
    if (max_delay_frames == 0) {
      if (path.delay_frames + path.taps.size() > max_taps)
        throw std::invalid_argument(
            name + ": " + std::to_string(path.delay_frames + path.taps.size()) +
            " effective taps (delay included); the running engine holds at most " +
            std::to_string(max_taps));
      continue;
    }
    if (path.taps.size() > max_taps)
      throw std::invalid_argument(name + ": " + std::to_string(path.taps.size()) +
                                  " taps; the running engine holds at most " +
                                  std::to_string(max_taps));
    if (path.delay_frames > max_delay_frames)
      throw std::invalid_argument(name + ": a delay of " + std::to_string(path.delay_frames) +
                                  " frames; the running engine's delay line holds at most " +
                                  std::to_string(max_delay_frames));
  }
}

void MatrixEngine::set_paths(std::span<const PathTaps> /*paths*/, bool /*crossfade*/) {
  throw std::invalid_argument("the " + name() +
                              " engine takes no per-path updates; swap the whole matrix");
}

void check_path_taps(std::span<const MatrixPath> all, std::span<const PathTaps> paths,
                     std::size_t max_taps, std::size_t max_delay_frames, bool finite) {
  std::vector<bool> named(all.size(), false);
  for (const PathTaps& update : paths) {
    if (update.path >= all.size())
      throw std::invalid_argument("path " + std::to_string(update.path) +
                                  ": no such path (the running matrix has " +
                                  std::to_string(all.size()) + ")");
    const MatrixPath& path = all[update.path];
    // Named only on an error: an update of a thousand paths at every block
    // would otherwise format and allocate a thousand names a block.
    const auto name = [&] { return RoutingMatrix::describe_path(update.path, path); };
    if (named[update.path]) throw std::invalid_argument(name() + ": named twice in one update");
    named[update.path] = true;
    if (update.taps.empty()) throw std::invalid_argument(name() + ": no taps");
    const std::size_t effective =
        update.taps.size() + (max_delay_frames == 0 ? path.delay_frames : 0);
    if (effective > max_taps)
      throw std::invalid_argument(
          name() + ": " + std::to_string(effective) + " taps" +
          (max_delay_frames == 0 && path.delay_frames > 0 ? " (delay included)" : "") +
          "; the running engine holds at most " + std::to_string(max_taps));
    if (!finite) continue;
    for (std::size_t t = 0; t < update.taps.size(); ++t) {
      if (!std::isfinite(update.taps[t]))
        throw std::invalid_argument(name() + ": tap " + std::to_string(t) +
                                    " is not a finite number");
    }
  }
}

RoutingMatrix with_path_taps(const RoutingMatrix& running, std::span<const PathTaps> paths,
                             std::size_t max_taps, std::size_t max_delay_frames,
                             const std::string& source) {
  check_path_taps(running.paths(), paths, max_taps, max_delay_frames);
  std::vector<MatrixPath> next = running.paths();
  for (const PathTaps& update : paths) {
    MatrixPath& path = next[update.path];
    path.taps.assign(update.taps.begin(), update.taps.end());
    path.source = source;
    path.file.clear();
  }
  // Checked above against the engine; RoutingMatrix::make's own limit is
  // the model's (2^20 taps), which max_taps never exceeds.
  return RoutingMatrix::make(running.inputs(), running.outputs(), std::move(next),
                             std::max(max_taps, running.max_filter_taps()));
}

}  // namespace tapstream

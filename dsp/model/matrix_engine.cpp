#include "dsp/model/matrix_engine.hpp"

#include <stdexcept>
#include <string>

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

}  // namespace tapstream

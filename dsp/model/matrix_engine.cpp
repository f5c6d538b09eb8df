#include "dsp/model/matrix_engine.hpp"

#include <stdexcept>
#include <string>

namespace tapstream {

void check_matrix_swap(const RoutingMatrix& running, const RoutingMatrix& next,
                       std::size_t max_taps) {
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
  if (next.max_taps() > max_taps) {
    throw std::invalid_argument("the new matrix has a path of " + std::to_string(next.max_taps()) +
                                " effective taps; the running engine holds at most " +
                                std::to_string(max_taps));
  }
}

}  // namespace tapstream

#include "dsp/model/diagonal_engine.hpp"

#include <stdexcept>
#include <utility>

namespace tapstream {

DiagonalEngine::DiagonalEngine(std::unique_ptr<Engine> engine, EngineTransport transport)
    : engine_(std::move(engine)),
      realtime_(engine_ ? engine_->realtime() : nullptr),
      transport_(transport) {
  if (!engine_) throw std::invalid_argument("DiagonalEngine: no engine");
}

void DiagonalEngine::check(const RoutingMatrix& matrix) const {
  const std::size_t channels = engine_->channels();
  if (!matrix.is_diagonal() || matrix.inputs() != channels) {
    throw std::invalid_argument(
        "the new matrix (" + std::to_string(matrix.inputs()) + " -> " +
        std::to_string(matrix.outputs()) + ", " + std::to_string(matrix.paths().size()) +
        " paths) is not the diagonal of the running " + std::to_string(channels) +
        " channels (path c: input c -> output c; a restart is needed to reroute)");
  }
}

void DiagonalEngine::set_matrix(const RoutingMatrix& matrix, bool crossfade) {
  check(matrix);
  engine_->set_filters(*matrix.diagonal_bank(), crossfade);
}

void DiagonalEngine::post_matrix(const RoutingMatrix& matrix, bool crossfade) {
  check(matrix);
  realtime_->post_filters(*matrix.diagonal_bank(), crossfade);
}

double DiagonalEngine::last_call_host_us() const {
  return transport_.call_host_us ? transport_.call_host_us(*engine_)
                                 : MatrixEngine::last_call_host_us();
}

}  // namespace tapstream

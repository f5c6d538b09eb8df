#include "dsp/model/matrix_filter.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace tapstream {

MatrixFilter::MatrixFilter(RoutingMatrix matrix, std::unique_ptr<Engine> engine)
    : matrix_(std::move(matrix)), engine_(std::move(engine)) {
  if (!engine_) throw std::invalid_argument("MatrixFilter: no engine");
  const std::size_t paths = matrix_.paths().size();
  if (engine_->channels() != paths) {
    throw std::invalid_argument("MatrixFilter: the engine has " +
                                std::to_string(engine_->channels()) + " channels, the matrix " +
                                std::to_string(paths) + " paths");
  }
  path_in_.assign(paths * engine_->max_block_frames(), 0.0f);
  path_out_.assign(paths * engine_->max_block_frames(), 0.0f);
}

void MatrixFilter::process(std::span<const float> in, std::span<float> out, std::size_t frames,
                           Layout layout) {
  const std::size_t n_in = inputs(), n_out = outputs();
  if (frames == 0 || frames > max_block_frames()) {
    throw std::invalid_argument("MatrixFilter: block of " + std::to_string(frames) +
                                " frames (1.." + std::to_string(max_block_frames()) + ")");
  }
  if (in.size() < n_in * frames || out.size() < n_out * frames) {
    throw std::invalid_argument("MatrixFilter: buffers smaller than the block");
  }
  const auto& paths = matrix_.paths();
  // Sample (frame f, channel c) of a buffer with `channels` channels.
  const auto at = [&](std::size_t f, std::size_t c, std::size_t channels) {
    return layout == Layout::interleaved ? f * channels + c : c * frames + f;
  };
  for (std::size_t p = 0; p < paths.size(); ++p) {
    float* dst = path_in_.data() + p * frames;
    const std::size_t c = paths[p].input;
    if (layout == Layout::planar) {
      std::copy_n(in.data() + c * frames, frames, dst);
    } else {
      for (std::size_t f = 0; f < frames; ++f) dst[f] = in[f * n_in + c];
    }
  }
  engine_->process(std::span<const float>(path_in_.data(), paths.size() * frames),
                   std::span<float>(path_out_.data(), paths.size() * frames), frames,
                   Layout::planar);
  std::fill_n(out.data(), n_out * frames, 0.0f);
  for (std::size_t p = 0; p < paths.size(); ++p) {
    const float* src = path_out_.data() + p * frames;
    const std::size_t c = paths[p].output;
    for (std::size_t f = 0; f < frames; ++f) out[at(f, c, n_out)] += src[f];
  }
}

void MatrixFilter::set_matrix(const RoutingMatrix& matrix, bool crossfade) {
  check_matrix_swap(matrix_, matrix, engine_->max_taps());
  engine_->set_filters(matrix.path_bank(), crossfade);
  matrix_ = matrix;
}

std::string MatrixFilter::description() const {
  return engine_->description() + ", one channel per path (" +
         std::to_string(matrix_.paths().size()) + " paths)";
}

}  // namespace tapstream

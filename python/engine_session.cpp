#include "python/engine_session.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

namespace tapstream::python {

EngineSession::EngineSession(std::unique_ptr<MatrixEngine> engine, RoutingMatrix matrix)
    : engine_(std::move(engine)),
      matrix_(std::make_shared<const RoutingMatrix>(std::move(matrix))),
      staging_in_(engine_->inputs() * engine_->max_block_frames()),
      staging_out_(engine_->outputs() * engine_->max_block_frames()) {}

void EngineSession::process(const StridedBlock& in, float* out, std::size_t frames) {
  const std::lock_guard lock(mutex_);
  const std::size_t n_in = engine_->inputs(), n_out = engine_->outputs();
  const std::size_t block = engine_->max_block_frames();
  const bool c_order = in.frame_stride == 1 && in.channel_stride == std::ptrdiff_t(frames);
  if (frames == 0) return;
  if (frames <= block && (c_order || (n_in == 1 && in.frame_stride == 1))) {
    engine_->process({in.data, n_in * frames}, {out, n_out * frames}, frames, Layout::planar);
    return;
  }
  for (std::size_t done = 0; done < frames;) {
    const std::size_t n = std::min(block, frames - done);
    for (std::size_t c = 0; c < n_in; ++c) {
      const float* src =
          in.data + std::ptrdiff_t(c) * in.channel_stride + std::ptrdiff_t(done) * in.frame_stride;
      float* dst = staging_in_.data() + c * n;
      if (in.frame_stride == 1) {
        std::memcpy(dst, src, n * sizeof(float));
      } else {
        for (std::size_t f = 0; f < n; ++f) dst[f] = src[std::ptrdiff_t(f) * in.frame_stride];
      }
    }
    engine_->process({staging_in_.data(), n_in * n}, {staging_out_.data(), n_out * n}, n,
                     Layout::planar);
    for (std::size_t c = 0; c < n_out; ++c) {
      std::memcpy(out + c * frames + done, staging_out_.data() + c * n, n * sizeof(float));
    }
    done += n;
  }
}

bool EngineSession::process_device(const float* in, float* out, std::size_t frames, void* stream) {
  const std::lock_guard lock(mutex_);
  const std::size_t block = engine_->max_block_frames();
  for (std::size_t done = 0; done < frames;) {
    const std::size_t n = std::min(block, frames - done);
    if (!engine_->process_device(in + done, frames, out + done, frames, n, stream)) return false;
    done += n;
  }
  return true;
}

namespace {

template <typename Call>
std::vector<double> time_calls(std::size_t calls, const Call& call) {
  std::vector<double> us(calls);
  for (double& t : us) {
    const auto start = std::chrono::steady_clock::now();
    call();
    t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  }
  return us;
}

}  // namespace

std::vector<double> EngineSession::time_engine_calls(const float* in, float* out,
                                                     std::size_t frames, std::size_t calls) {
  const std::lock_guard lock(mutex_);
  const std::span<const float> input(in, engine_->inputs() * frames);
  const std::span<float> output(out, engine_->outputs() * frames);
  return time_calls(calls, [&] { engine_->process(input, output, frames, Layout::planar); });
}

std::vector<double> EngineSession::time_device_calls(const float* in, float* out,
                                                     std::size_t frames, void* stream,
                                                     std::size_t calls) {
  const std::lock_guard lock(mutex_);
  return time_calls(calls, [&] {
    if (!engine_->process_device(in, frames, out, frames, frames, stream)) {
      throw std::invalid_argument("this engine has no device path");
    }
  });
}

void EngineSession::set_matrix(const RoutingMatrix& next, bool crossfade) {
  const std::lock_guard lock(mutex_);
  engine_->set_matrix(next, crossfade);
  matrix_ = std::make_shared<const RoutingMatrix>(next);
}

void EngineSession::set_paths(
    std::map<std::pair<std::size_t, std::size_t>, std::vector<float>> taps, bool crossfade) {
  const std::lock_guard lock(mutex_);
  std::vector<MatrixPath> paths = matrix_->paths();
  std::size_t replaced = 0;
  for (MatrixPath& path : paths) {
    const auto found = taps.find({path.input, path.output});
    if (found == taps.end()) continue;
    path.taps = std::move(found->second);
    path.source = "set_paths";
    path.file.clear();
    ++replaced;
  }
  if (replaced != taps.size()) {
    for (const auto& [pair, unused] : taps) {
      const bool known = std::any_of(paths.begin(), paths.end(), [&](const MatrixPath& p) {
        return p.input == pair.first && p.output == pair.second;
      });
      if (!known) {
        throw std::invalid_argument("set_paths: input " + std::to_string(pair.first) +
                                    " -> output " + std::to_string(pair.second) +
                                    " is no path of this " + std::to_string(matrix_->inputs()) +
                                    " x " + std::to_string(matrix_->outputs()) + " matrix (" +
                                    std::to_string(paths.size()) + " paths)");
      }
    }
  }
  RoutingMatrix next = RoutingMatrix::make(matrix_->inputs(), matrix_->outputs(), std::move(paths),
                                           engine_->max_taps());
  engine_->set_matrix(next, crossfade);
  matrix_ = std::make_shared<const RoutingMatrix>(std::move(next));
}

void EngineSession::reset() {
  const std::lock_guard lock(mutex_);
  engine_->reset();
}

std::shared_ptr<const RoutingMatrix> EngineSession::matrix() const {
  const std::lock_guard lock(mutex_);
  return matrix_;
}

}  // namespace tapstream::python

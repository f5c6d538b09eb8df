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
      staging_out_(engine_->outputs() * engine_->max_block_frames()) {
  for (std::size_t p = 0; p < matrix_->paths().size(); ++p)
    index_of_[{matrix_->paths()[p].input, matrix_->paths()[p].output}] = p;
}

template <class Taps>
std::vector<std::size_t> EngineSession::indices(const Taps& taps) const {
  std::vector<std::size_t> found;
  found.reserve(taps.size());
  for (const auto& entry : taps) {
    const auto& pair = entry.first;
    const auto at = index_of_.find(pair);
    if (at == index_of_.end()) {
      throw std::invalid_argument("set_paths: input " + std::to_string(pair.first) + " -> output " +
                                  std::to_string(pair.second) + " is no path of this " +
                                  std::to_string(matrix_->inputs()) + " x " +
                                  std::to_string(matrix_->outputs()) + " matrix (" +
                                  std::to_string(matrix_->paths().size()) + " paths)");
    }
    found.push_back(at->second);
  }
  return found;
}

namespace {

// Writes the microseconds from its making to its end into `us`.
class CallTimer {
 public:
  explicit CallTimer(double& us) : us_(us) {}
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;
  ~CallTimer() {
    us_ = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_)
              .count();
  }

 private:
  double& us_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

double EngineSession::last_call_us() const {
  const std::lock_guard lock(mutex_);
  return last_call_us_;
}

void EngineSession::process(const StridedBlock& in, float* out, std::size_t frames) {
  const std::lock_guard lock(mutex_);
  const CallTimer timer(last_call_us_);
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
  const CallTimer timer(last_call_us_);
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
  updated_taps_.clear();
  device_taps_.clear();
}

void EngineSession::set_paths(
    std::map<std::pair<std::size_t, std::size_t>, std::vector<float>> taps, bool crossfade) {
  const std::lock_guard lock(mutex_);
  const std::vector<std::size_t> index = indices(taps);
  std::vector<PathTaps> updates;
  updates.reserve(taps.size());
  std::size_t u = 0;
  for (const auto& entry : taps) updates.push_back({index[u++], entry.second});
  // The engine transforms the named paths only; what runs is remembered as
  // their taps, merged into the matrix when someone asks for it.
  engine_->set_paths(updates, crossfade);
  u = 0;
  for (auto& entry : taps) {
    device_taps_.erase(index[u]);
    updated_taps_[index[u++]] = std::move(entry.second);
  }
}

bool EngineSession::set_paths_device(
    const std::map<std::pair<std::size_t, std::size_t>, std::span<const float>>& taps,
    bool crossfade, void* stream) {
  const std::lock_guard lock(mutex_);
  const std::vector<std::size_t> index = indices(taps);
  std::vector<PathTaps> updates;
  updates.reserve(taps.size());
  std::size_t u = 0;
  for (const auto& entry : taps) updates.push_back({index[u++], entry.second});
  if (!engine_->set_paths_device(updates, crossfade, stream)) return false;
  for (const std::size_t p : index) {
    updated_taps_.erase(p);
    device_taps_.insert(p);
  }
  return true;
}

void EngineSession::reset() {
  const std::lock_guard lock(mutex_);
  engine_->reset();
}

std::shared_ptr<const RoutingMatrix> EngineSession::routing() const {
  const std::lock_guard lock(mutex_);
  return matrix_;
}

std::shared_ptr<const RoutingMatrix> EngineSession::matrix() const {
  const std::lock_guard lock(mutex_);
  if (!device_taps_.empty()) {
    const std::size_t p = *device_taps_.begin();
    throw std::runtime_error(RoutingMatrix::describe_path(p, matrix_->paths()[p]) + " (and " +
                             std::to_string(device_taps_.size() - 1) +
                             " more) took its taps from device arrays, which the engine does "
                             "not keep on the host: set them from host arrays to read them here");
  }
  if (!updated_taps_.empty()) {
    std::vector<PathTaps> updates;
    for (const auto& [path, taps] : updated_taps_) updates.push_back({path, taps});
    // Checked by the engine when they were set.
    matrix_ = std::make_shared<const RoutingMatrix>(
        with_path_taps(*matrix_, updates, std::max(engine_->max_taps(), matrix_->max_taps()),
                       engine_->max_delay_frames(), "set_paths"));
    updated_taps_.clear();
  }
  return matrix_;
}

}  // namespace tapstream::python

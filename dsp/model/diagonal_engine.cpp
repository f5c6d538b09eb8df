#include "dsp/model/diagonal_engine.hpp"

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tapstream {

DiagonalEngine::DiagonalEngine(std::unique_ptr<Engine> engine, EngineTransport transport,
                               const RoutingMatrix* running)
    : engine_(std::move(engine)),
      realtime_(engine_ ? engine_->realtime() : nullptr),
      transport_(transport) {
  if (!engine_) throw std::invalid_argument("DiagonalEngine: no engine");
  if (running != nullptr) {
    check(*running);
    remember(*running, running->diagonal_bank());
  }
}

void DiagonalEngine::remember(const RoutingMatrix& matrix, std::shared_ptr<const FilterBank> bank) {
  bank_ = std::move(bank);
  updated_.assign(bank_->channels(), {});
  geometry_.clear();
  // Everything but the taps (the bank holds them): set_matrix runs on the
  // live pipeline's engine thread between two periods, where copying every
  // path's taps (16 MiB at 64 x 65536) and faulting in their pages made each
  // swap 5-10 ms long and late by several periods on the GPU machine.
  for (const MatrixPath& path : matrix.paths()) geometry_.push_back(path.without_taps());
}

std::vector<std::vector<float>> DiagonalEngine::effective_taps(
    std::span<const PathTaps> paths) const {
  if (!bank_)
    throw std::invalid_argument("the " + engine_->name() +
                                " engine was made without its matrix: swap the whole matrix");
  // The per-channel engines fold delays into taps.
  check_path_taps(geometry_, paths, engine_->max_taps(), 0);
  std::vector<std::vector<float>> taps;
  taps.reserve(paths.size());
  for (const PathTaps& update : paths) {
    MatrixPath path = geometry_[update.path];
    path.taps.assign(update.taps.begin(), update.taps.end());
    taps.push_back(path.effective_taps());
  }
  return taps;
}

std::shared_ptr<const FilterBank> DiagonalEngine::bank_with(
    std::span<const PathTaps> paths, std::vector<std::vector<float>>& effective) const {
  std::vector<std::vector<float>> taps(bank_->channels());
  std::vector<std::string> sources(bank_->channels());
  for (std::size_t c = 0; c < taps.size(); ++c) {
    const std::span<const float> running =
        updated_[c].empty() ? bank_->taps(c) : std::span<const float>(updated_[c]);
    taps[c].assign(running.begin(), running.end());
    sources[c] = updated_[c].empty() ? bank_->source(c) : "set_paths";
  }
  for (std::size_t u = 0; u < paths.size(); ++u) {
    taps[paths[u].path] = std::move(effective[u]);
    sources[paths[u].path] = "set_paths";
  }
  return std::make_shared<const FilterBank>(
      FilterBank::per_channel(std::move(taps), std::move(sources)));
}

template <typename ChannelUpdate, typename WholeBank>
void DiagonalEngine::update(std::span<const PathTaps> paths, bool crossfade,
                            ChannelUpdate channel_update, WholeBank whole) {
  std::vector<std::vector<float>> taps = effective_taps(paths);
  std::vector<PathTaps> channels(paths.size());
  for (std::size_t u = 0; u < paths.size(); ++u) channels[u] = {paths[u].path, taps[u]};
  if (channel_update(std::span<const PathTaps>(channels), crossfade)) {
    for (std::size_t u = 0; u < paths.size(); ++u) updated_[paths[u].path] = std::move(taps[u]);
    return;
  }
  const std::shared_ptr<const FilterBank> bank = bank_with(paths, taps);
  whole(*bank, crossfade);
  bank_ = bank;
  updated_.assign(bank_->channels(), {});
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
  const std::shared_ptr<const FilterBank> bank = matrix.diagonal_bank();
  engine_->set_filters(*bank, crossfade);
  remember(matrix, bank);
}

void DiagonalEngine::set_paths(std::span<const PathTaps> paths, bool crossfade) {
  update(
      paths, crossfade,
      [&](std::span<const PathTaps> channels, bool fade) {
        return engine_->set_channel_filters(channels, fade);
      },
      [&](const FilterBank& bank, bool fade) { engine_->set_filters(bank, fade); });
}

void DiagonalEngine::post_matrix(const RoutingMatrix& matrix, bool crossfade) {
  check(matrix);
  const std::shared_ptr<const FilterBank> bank = matrix.diagonal_bank();
  realtime_->post_filters(*bank, crossfade);
  remember(matrix, bank);
}

void DiagonalEngine::post_paths(std::span<const PathTaps> paths, bool crossfade) {
  update(
      paths, crossfade,
      [&](std::span<const PathTaps> channels, bool fade) {
        return realtime_->post_channel_filters(channels, fade);
      },
      [&](const FilterBank& bank, bool fade) { realtime_->post_filters(bank, fade); });
}

double DiagonalEngine::last_call_host_us() const {
  return transport_.call_host_us ? transport_.call_host_us(*engine_)
                                 : MatrixEngine::last_call_host_us();
}

}  // namespace tapstream

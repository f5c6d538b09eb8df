#include "dsp/model/routing_matrix.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <utility>

namespace tapstream {

std::vector<float> MatrixPath::effective_taps(std::size_t leading_zeros) const {
  const double scale = std::pow(10.0, gain_db / 20.0) * (invert ? -1.0 : 1.0);
  std::vector<float> out(leading_zeros + taps.size(), 0.0f);
  for (std::size_t i = 0; i < taps.size(); ++i) {
    out[leading_zeros + i] = static_cast<float>(double(taps[i]) * scale);
  }
  return out;
}

std::string RoutingMatrix::describe_path(std::size_t index, const MatrixPath& path) {
  return "path " + std::to_string(index) + " (input " + std::to_string(path.input) + " -> output " +
         std::to_string(path.output) + ")";
}

RoutingMatrix RoutingMatrix::make(std::size_t inputs, std::size_t outputs,
                                  std::vector<MatrixPath> paths, std::size_t max_taps) {
  if (inputs == 0) throw std::invalid_argument("the matrix has no inputs");
  if (outputs == 0) throw std::invalid_argument("the matrix has no outputs");
  if (paths.empty()) throw std::invalid_argument("the matrix has no paths");
  RoutingMatrix matrix;
  matrix.inputs_ = inputs;
  matrix.outputs_ = outputs;
  std::set<std::pair<std::size_t, std::size_t>> seen;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    const MatrixPath& p = paths[i];
    const std::string name = describe_path(i, p);
    if (p.input >= inputs)
      throw std::invalid_argument(name + ": input " + std::to_string(p.input) +
                                  " is out of range (the matrix has inputs 0.." +
                                  std::to_string(inputs - 1) + ")");
    if (p.output >= outputs)
      throw std::invalid_argument(name + ": output " + std::to_string(p.output) +
                                  " is out of range (the matrix has outputs 0.." +
                                  std::to_string(outputs - 1) + ")");
    if (!seen.emplace(p.input, p.output).second)
      throw std::invalid_argument(name + ": input " + std::to_string(p.input) + " -> output " +
                                  std::to_string(p.output) +
                                  " is given twice (one path per pair; add the filters first)");
    if (p.taps.empty()) throw std::invalid_argument(name + ": no taps");
    if (!std::isfinite(p.gain_db))
      throw std::invalid_argument(name + ": gain_db is not a finite number");
    if (const std::size_t t = first_non_finite(p.taps); t != p.taps.size())
      throw std::invalid_argument(name + ": tap " + std::to_string(t) + " of " + p.source +
                                  " is not a finite number");
    if (p.taps.size() > max_taps)
      throw std::invalid_argument(name + ": " + std::to_string(p.taps.size()) +
                                  " taps exceed the maximum of " + std::to_string(max_taps));
    if (p.delay_frames > kMaxDelayFrames)
      throw std::invalid_argument(name + ": a delay of " + std::to_string(p.delay_frames) +
                                  " frames exceeds the maximum of " +
                                  std::to_string(kMaxDelayFrames));
    matrix.max_taps_ = std::max(matrix.max_taps_, p.delay_frames + p.taps.size());
    matrix.max_filter_taps_ = std::max(matrix.max_filter_taps_, p.taps.size());
    matrix.max_delay_frames_ = std::max(matrix.max_delay_frames_, p.delay_frames);
  }
  matrix.paths_ = std::move(paths);
  return matrix;
}

RoutingMatrix RoutingMatrix::diagonal(FilterBank bank) {
  std::vector<MatrixPath> paths(bank.channels());
  for (std::size_t c = 0; c < bank.channels(); ++c) {
    const auto taps = bank.taps(c);
    paths[c].input = c;
    paths[c].output = c;
    paths[c].taps.assign(taps.begin(), taps.end());
    paths[c].source = bank.source(c);
  }
  RoutingMatrix matrix = make(bank.channels(), bank.channels(), std::move(paths), bank.max_taps());
  matrix.diagonal_bank_ = std::make_shared<const FilterBank>(std::move(bank));
  return matrix;
}

std::shared_ptr<const FilterBank> RoutingMatrix::diagonal_bank() const {
  if (!is_diagonal()) {
    throw std::invalid_argument("the matrix (" + std::to_string(inputs_) + " -> " +
                                std::to_string(outputs_) + ", " + std::to_string(paths_.size()) +
                                " paths) is not diagonal (path c: input c -> output c)");
  }
  if (diagonal_bank_) return diagonal_bank_;
  std::vector<std::vector<float>> taps;
  taps.reserve(paths_.size());
  for (const MatrixPath& path : paths_) taps.push_back(path.effective_taps());
  const bool same = std::all_of(taps.begin(), taps.end(),
                                [&](const std::vector<float>& t) { return t == taps.front(); });
  if (same) {
    return std::make_shared<const FilterBank>(
        FilterBank::shared(std::move(taps.front()), paths_.size(), paths_.front().source));
  }
  std::vector<std::string> sources;
  sources.reserve(paths_.size());
  for (const MatrixPath& path : paths_) sources.push_back(path.source);
  return std::make_shared<const FilterBank>(
      FilterBank::per_channel(std::move(taps), std::move(sources)));
}

bool RoutingMatrix::is_diagonal() const {
  if (inputs_ != outputs_ || paths_.size() != inputs_) return false;
  for (std::size_t i = 0; i < paths_.size(); ++i) {
    if (paths_[i].input != i || paths_[i].output != i) return false;
  }
  return true;
}

FilterBank RoutingMatrix::path_bank() const {
  std::vector<std::vector<float>> taps;
  std::vector<std::string> sources;
  taps.reserve(paths_.size());
  for (std::size_t i = 0; i < paths_.size(); ++i) {
    taps.push_back(paths_[i].effective_taps());
    sources.push_back(describe_path(i, paths_[i]) + ": " + paths_[i].source);
  }
  return FilterBank::per_channel(std::move(taps), std::move(sources));
}

}  // namespace tapstream

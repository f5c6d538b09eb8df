#include "dsp/model/sharded_engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <stdexcept>
#include <utility>

#include "dsp/model/filter_bank.hpp"

namespace tapstream {

std::vector<OutputRange> split_outputs(const RoutingMatrix& matrix, std::size_t shards) {
  const std::size_t outputs = matrix.outputs();
  shards = std::max<std::size_t>(1, std::min(shards, outputs));
  std::vector<std::size_t> weight(outputs, 0);
  for (const MatrixPath& path : matrix.paths()) ++weight[path.output];
  std::size_t total = 0;
  for (std::size_t& w : weight) total += (w = std::max<std::size_t>(w, 1));
  std::vector<OutputRange> ranges;
  std::size_t first = 0, before = 0;  // `before`: the weight of outputs [0, first)
  for (std::size_t s = 0; s < shards; ++s) {
    const std::size_t left = shards - s - 1;  // ranges still to come, one output each at least
    std::size_t end = first + 1;
    std::size_t sum = before + weight[first];
    // Take outputs while the cumulative weight stays below this range's share.
    const std::size_t target = total * (s + 1) / shards;
    while (end < outputs - left && sum + weight[end] <= target) sum += weight[end++];
    if (s + 1 == shards) end = outputs, sum = total;
    ranges.push_back({first, end - first});
    first = end;
    before = sum;
  }
  return ranges;
}

RoutingMatrix matrix_part(const RoutingMatrix& matrix, const OutputRange& range,
                          std::vector<std::size_t>& inputs) {
  if (range.count == 0 || range.first + range.count > matrix.outputs()) {
    throw std::invalid_argument("outputs " + std::to_string(range.first) + " + " +
                                std::to_string(range.count) + " are not a part of the matrix's " +
                                std::to_string(matrix.outputs()));
  }
  const auto in_range = [&](std::size_t output) {
    return output >= range.first && output < range.first + range.count;
  };
  std::vector<bool> read(matrix.inputs(), false);
  for (const MatrixPath& path : matrix.paths()) {
    if (in_range(path.output)) read[path.input] = true;
  }
  inputs.clear();
  std::vector<std::size_t> renumbered(matrix.inputs(), 0);
  for (std::size_t i = 0; i < matrix.inputs(); ++i) {
    if (!read[i]) continue;
    renumbered[i] = inputs.size();
    inputs.push_back(i);
  }
  std::vector<MatrixPath> paths;
  for (const MatrixPath& path : matrix.paths()) {
    if (!in_range(path.output)) continue;
    MatrixPath part = path;
    part.input = renumbered[path.input];
    part.output = path.output - range.first;
    paths.push_back(std::move(part));
  }
  // An output range that no path reaches reads no input: give it input 0 so
  // that its engine has a channel to read (its paths are none, its outputs
  // silent).
  if (inputs.empty()) inputs.push_back(0);
  return RoutingMatrix::make(inputs.size(), range.count, std::move(paths),
                             std::max<std::size_t>(matrix.max_filter_taps(), 1));
}

namespace {

// The matrix's pairs, each with one tap: what check_matrix_swap compares.
std::unique_ptr<RoutingMatrix> skeleton_of(const RoutingMatrix& matrix) {
  std::vector<MatrixPath> paths;
  paths.reserve(matrix.paths().size());
  for (const MatrixPath& path : matrix.paths()) {
    MatrixPath token;
    token.input = path.input;
    token.output = path.output;
    token.delay_frames = path.delay_frames;
    token.taps = {1.0f};
    paths.push_back(std::move(token));
  }
  return std::make_unique<RoutingMatrix>(
      RoutingMatrix::make(matrix.inputs(), matrix.outputs(), std::move(paths), 1));
}

}  // namespace

ShardedEngine::ShardedEngine(const RoutingMatrix& matrix, std::size_t shards, const MakeShard& make)
    : inputs_(matrix.inputs()), outputs_(matrix.outputs()), skeleton_(skeleton_of(matrix)) {
  const std::vector<OutputRange> ranges = split_outputs(matrix, shards);
  shards_.resize(ranges.size());
  std::vector<std::size_t> paths_in(ranges.size(), 0);
  for (const MatrixPath& path : matrix.paths()) {
    std::size_t s = 0;
    while (path.output >= ranges[s].first + ranges[s].count) ++s;
    path_place_.push_back({s, paths_in[s]++});
  }
  std::vector<std::future<std::unique_ptr<MatrixEngine>>> made;
  for (std::size_t s = 0; s < ranges.size(); ++s) {
    Shard& shard = shards_[s];
    shard.range = ranges[s];
    RoutingMatrix part = matrix_part(matrix, shard.range, shard.inputs);
    made.push_back(std::async(std::launch::async,
                              [&make, s, part = std::move(part)] { return make(s, part); }));
  }
  // Every future is waited for before the first error is thrown, so that no
  // thread outlives the constructor.
  std::exception_ptr error;
  for (std::size_t s = 0; s < made.size(); ++s) {
    try {
      shards_[s].engine = made[s].get();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);

  const MatrixEngine& first = *shards_.front().engine;
  max_block_frames_ = first.max_block_frames();
  max_taps_ = first.max_taps();
  max_delay_frames_ = first.max_delay_frames();
  for (Shard& shard : shards_) {
    MatrixEngine& engine = *shard.engine;
    if (engine.max_block_frames() != max_block_frames_) {
      throw std::invalid_argument("the shards' engines take blocks of " +
                                  std::to_string(max_block_frames_) + " and " +
                                  std::to_string(engine.max_block_frames()) + " frames");
    }
    max_taps_ = std::min(max_taps_, engine.max_taps());
    max_delay_frames_ = std::min(max_delay_frames_, engine.max_delay_frames());
    shard.inputs_contiguous = shard.inputs.back() - shard.inputs.front() + 1 == shard.inputs.size();
    const std::size_t in_samples = shard.inputs.size() * max_block_frames_;
    const std::size_t out_samples = shard.range.count * max_block_frames_;
    shard.in_block = engine.staging_input();
    if (shard.in_block.size() < in_samples) {
      shard.own_in.assign(in_samples, 0.0f);
      shard.in_block = shard.own_in;
    }
    shard.out_block = engine.staging_output();
    if (shard.out_block.size() < out_samples) {
      shard.own_out.assign(out_samples, 0.0f);
      shard.out_block = shard.own_out;
    }
  }
}

std::span<const float> ShardedEngine::shard_input(Shard& shard, std::span<const float> in,
                                                  std::size_t frames, Layout layout) const {
  const std::size_t k = shard.inputs.size();
  if (k == inputs_) return in;  // every input, in order
  if (layout == Layout::planar && shard.inputs_contiguous) {
    return in.subspan(shard.inputs.front() * frames, k * frames);
  }
  float* to = shard.in_block.data();
  if (layout == Layout::planar) {
    for (std::size_t j = 0; j < k; ++j) {
      std::memcpy(to + j * frames, in.data() + shard.inputs[j] * frames, frames * sizeof(float));
    }
  } else if (shard.inputs_contiguous) {
    const float* from = in.data() + shard.inputs.front();
    for (std::size_t f = 0; f < frames; ++f) {
      std::memcpy(to + f * k, from + f * inputs_, k * sizeof(float));
    }
  } else {
    for (std::size_t f = 0; f < frames; ++f) {
      const float* frame = in.data() + f * inputs_;
      for (std::size_t j = 0; j < k; ++j) to[f * k + j] = frame[shard.inputs[j]];
    }
  }
  return shard.in_block.first(k * frames);
}

std::span<float> ShardedEngine::shard_output(Shard& shard, std::span<float> out, std::size_t frames,
                                             Layout layout, bool& scatter) const {
  scatter = layout != Layout::planar;
  if (!scatter) return out.subspan(shard.range.first * frames, shard.range.count * frames);
  return shard.out_block.first(shard.range.count * frames);
}

void ShardedEngine::scatter(const Shard& shard, std::span<float> out, std::size_t frames,
                            Layout) const {
  // Interleaved (planar outputs were written in place).
  const std::size_t j = shard.range.count;
  const float* from = shard.out_block.data();
  float* to = out.data() + shard.range.first;
  for (std::size_t f = 0; f < frames; ++f) {
    std::memcpy(to + f * outputs_, from + f * j, j * sizeof(float));
  }
}

void ShardedEngine::process(std::span<const float> in, std::span<float> out, std::size_t frames,
                            Layout layout) {
  if (frames == 0 || frames > max_block_frames_) {
    throw std::invalid_argument("sharded engine: block of " + std::to_string(frames) +
                                " frames, expected 1.." + std::to_string(max_block_frames_));
  }
  if (in.size() < inputs_ * frames || out.size() < outputs_ * frames) {
    throw std::invalid_argument(
        "sharded engine: " + std::to_string(frames) + " frames of " + std::to_string(inputs_) +
        " inputs and " + std::to_string(outputs_) + " outputs need " +
        std::to_string(inputs_ * frames) + " and " + std::to_string(outputs_ * frames) +
        " samples, got " + std::to_string(in.size()) + " and " + std::to_string(out.size()));
  }
  const auto start = std::chrono::steady_clock::now();
  bool scatter_any = false;
  std::size_t started = 0;
  try {
    for (Shard& shard : shards_) {
      bool scatter_this = false;
      const std::span<const float> shard_in = shard_input(shard, in, frames, layout);
      const std::span<float> shard_out = shard_output(shard, out, frames, layout, scatter_this);
      scatter_any = scatter_any || scatter_this;
      shard.engine->start_process(shard_in, shard_out, frames, layout);
      ++started;
    }
  } catch (...) {
    // Every started call is finished before the error goes on: no shard is
    // left with work in flight into memory the caller may reuse.
    for (std::size_t s = 0; s < started; ++s) {
      try {
        shards_[s].engine->finish_process();
      } catch (...) {
      }
    }
    throw;
  }
  const auto enqueued = std::chrono::steady_clock::now();
  std::exception_ptr error;
  for (Shard& shard : shards_) {
    try {
      shard.engine->finish_process();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  const auto finished = std::chrono::steady_clock::now();
  if (scatter_any) {
    for (const Shard& shard : shards_) scatter(shard, out, frames, layout);
  }
  // The host's part: the gathers and starts, and the scatter after the wait.
  last_call_host_us_ = std::chrono::duration<double, std::micro>(
                           (enqueued - start) + (std::chrono::steady_clock::now() - finished))
                           .count();
}

void ShardedEngine::set_matrix(const RoutingMatrix& matrix, bool crossfade) {
  // Checked whole first, so that no shard takes a part of a matrix that
  // another shard would refuse.
  check_matrix_swap(*skeleton_, matrix, max_taps_, max_delay_frames_);
  std::vector<RoutingMatrix> parts;
  parts.reserve(shards_.size());
  for (const Shard& shard : shards_) {
    std::vector<std::size_t> inputs;
    parts.push_back(matrix_part(matrix, shard.range, inputs));
    if (inputs != shard.inputs) {
      throw std::invalid_argument("the new matrix's outputs " + std::to_string(shard.range.first) +
                                  ".." + std::to_string(shard.range.first + shard.range.count - 1) +
                                  " read other inputs than the running one's");
    }
  }
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    shards_[s].engine->set_matrix(parts[s], crossfade);
  }
}

void ShardedEngine::set_paths(std::span<const PathTaps> paths, bool crossfade) {
  // Checked whole first (indices, lengths, values), so that no shard takes
  // its paths' taps when another's would be refused.
  check_path_taps(skeleton_->paths(), paths, max_taps_, max_delay_frames_);
  std::vector<std::vector<PathTaps>> parts(shards_.size());
  for (const PathTaps& update : paths) {
    const PathPlace place = path_place_[update.path];
    parts[place.shard].push_back({place.index, update.taps});
  }
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    if (!parts[s].empty()) shards_[s].engine->set_paths(parts[s], crossfade);
  }
}

void ShardedEngine::reset() {
  for (Shard& shard : shards_) shard.engine->reset();
}

std::string ShardedEngine::name() const {
  return shards_.front().engine->name();
}

std::string ShardedEngine::description() const {
  std::string text = "sharded by output over " + std::to_string(shards_.size()) + " engines";
  for (const Shard& shard : shards_) {
    text += "; outputs " + std::to_string(shard.range.first) + ".." +
            std::to_string(shard.range.first + shard.range.count - 1) + ": " +
            shard.engine->description();
  }
  return text;
}

}  // namespace tapstream

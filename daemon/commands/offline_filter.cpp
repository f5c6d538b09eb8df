#include "daemon/commands/offline_filter.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "daemon/config/matrix_config.hpp"
#include "dsp/files/coefficient_file.hpp"
#include "dsp/files/rate_file_name.hpp"

namespace tapstream {

RoutingMatrix load_offline_matrix(const FilterChoice& choice, int sample_rate) {
  MatrixFileOptions options;
  options.sample_rate = choice.ignore_rate ? 0 : sample_rate;
  options.max_taps = choice.max_taps;
  options.resample = choice.resample;
  RoutingMatrix matrix = load_matrix_file(choice.matrix, options);
  if (choice.gain_db == 0.0) return matrix;
  std::vector<MatrixPath> paths = matrix.paths();
  for (MatrixPath& path : paths) path.gain_db += choice.gain_db;
  return RoutingMatrix::make(matrix.inputs(), matrix.outputs(), std::move(paths), choice.max_taps);
}

OfflineFilter::OfflineFilter(const FilterChoice& choice, std::size_t channels, int sample_rate,
                             const std::string& input_name) {
  EngineOptions engine_options = choice.engine;
  engine_options.max_block_frames = choice.block_frames;
  engine_options.algorithm = choice.algorithm;
  if (!choice.matrix.empty()) {
    const RoutingMatrix matrix = load_offline_matrix(choice, sample_rate);
    if (matrix.inputs() != channels) {
      throw std::invalid_argument(input_name + " has " + std::to_string(channels) +
                                  " channels; the matrix " + choice.matrix.string() + " has " +
                                  std::to_string(matrix.inputs()) + " inputs");
    }
    spdlog::debug("matrix {}: {} -> {}, {} paths, {} taps at most", choice.matrix.string(),
                  matrix.inputs(), matrix.outputs(), matrix.paths().size(), matrix.max_taps());
    engine_ = make_engine(choice.backend, matrix, engine_options);
    max_taps_ = matrix.max_taps();
    gains_only_ =
        max_taps_ == 1 && matrix.paths().size() <= std::max(matrix.inputs(), matrix.outputs());
    return;
  }
  RateFile chosen;
  try {
    chosen = choose_rate_file(choice.taps, sample_rate, choice.resample);
  } catch (const RateFileError& e) {
    throw CoefficientFileError(std::string(e.what()) + " (--taps)");
  }
  CoefficientFileOptions taps_options;
  taps_options.resample = choice.resample;
  taps_options.named_rate = chosen.named_rate;
  taps_options.channels = channels;
  taps_options.max_taps = choice.max_taps;
  taps_options.sample_rate = sample_rate;
  taps_options.ignore_sample_rate = choice.ignore_rate;
  taps_options.strict = choice.strict;
  taps_options.damage = choice.damage;
  FilterBank bank = load_filter_bank(chosen.file, taps_options);
  if (choice.gain_db != 0.0) bank = bank.scaled(float(std::pow(10.0, choice.gain_db / 20.0)));
  spdlog::debug("taps {}: {} per channel at most, {}", chosen.file.string(), bank.max_taps(),
                bank.is_shared() ? "one filter for all channels" : "one filter per channel");
  engine_ = make_engine(choice.backend, RoutingMatrix::diagonal(bank), engine_options);
  max_taps_ = engine_->max_taps();
  gains_only_ = max_taps_ == 1;
}

std::size_t OfflineFilter::output_channels() const {
  return engine_->outputs();
}

std::size_t OfflineFilter::max_taps() const {
  return max_taps_;
}

std::string OfflineFilter::description() const {
  return engine_->description();
}

OfflineOptions OfflineFilter::options() const {
  OfflineOptions options;
  options.block_frames = engine_->max_block_frames();
  options.allocate = block_allocator(*engine_);
  // A gain per channel: filtering a block costs less than handing it from
  // a reader thread to the engine's.
  options.read_on_caller = gains_only_;
  return options;
}

std::vector<OfflineJobResult> OfflineFilter::run(std::span<const OfflineJob> jobs,
                                                 const OfflineOptions& options) {
  return run_offline_jobs(*engine_, jobs, options);
}

OfflineResult OfflineFilter::run(const ReadFrames& read, const WriteFrames& write,
                                 const OfflineOptions& options) {
  return run_offline(*engine_, read, write, options);
}

}  // namespace tapstream

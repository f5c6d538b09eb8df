#pragma once
// What `process` filters through, one file or a batch: the filter bank of
// --taps (one filter per channel, as many channels out as in) or the routing
// matrix of --matrix (its inputs in, its outputs out), each on the engine the
// backend names.

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "daemon/engine_factory.hpp"
#include "daemon/pipeline/offline_pipeline.hpp"
#include "dsp/model/engine.hpp"
#include "dsp/model/matrix_engine.hpp"

namespace tapstream {

// The user's choice of filters, as given on the command line.
struct FilterChoice {
  std::filesystem::path taps;    // --taps, or
  std::filesystem::path matrix;  // --matrix
  double gain_db = 0.0;          // added to every filter or path
  Backend backend = Backend::automatic;
  Algorithm algorithm = Algorithm::automatic;  // --taps only
  std::size_t block_frames = 0;                // 0: the engine factory's choice
  std::size_t max_taps = std::size_t(1) << 20;
  bool ignore_rate = false;
  // A filter made for another rate than the input's (its header says so, or
  // "$samplerate$" in its name has no file for the input's rate and the
  // nearest one's is taken) is resampled (--no-resample: refused).
  bool resample = true;
  bool strict = false;
  std::vector<std::string>* damage = nullptr;  // see CoefficientFileOptions
  EngineOptions engine;                        // its tuning (cpu, cuda): --engine-option
};

// Reads the matrix file of `choice` for input at `sample_rate` (0: no rate
// check; "$samplerate$" in a name takes the file nearest 48000 Hz), --gain
// added to every path. Throws naming the file, the path and
// the reason.
RoutingMatrix load_offline_matrix(const FilterChoice& choice, int sample_rate);

class OfflineFilter {
 public:
  // The filters of `choice` for input of `channels` channels at
  // `sample_rate`, and their engine. Throws naming the file and the reason: a
  // bad filter or path, or (for a matrix) an input channel count that is not
  // the matrix's inputs, naming both and `input_name`.
  OfflineFilter(const FilterChoice& choice, std::size_t channels, int sample_rate,
                const std::string& input_name = "the input");

  std::size_t output_channels() const;
  std::size_t max_taps() const;  // the longest filter or path (delay included)
  std::string description() const;
  // Block size and memory for the pipeline's rings.
  OfflineOptions options() const;

  std::vector<OfflineJobResult> run(std::span<const OfflineJob> jobs,
                                    const OfflineOptions& options);
  OfflineResult run(const ReadFrames& read, const WriteFrames& write,
                    const OfflineOptions& options);

 private:
  std::unique_ptr<MatrixEngine> engine_;  // --taps: the diagonal matrix of its bank
  std::size_t max_taps_ = 0;
  // Every path a gain (1 tap), at most one per channel: a multiply a sample.
  bool gains_only_ = false;
};

}  // namespace tapstream

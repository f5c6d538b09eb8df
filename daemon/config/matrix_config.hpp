#pragma once
// Routing-matrix files: the same TOML tables offline (`process --matrix`) and
// live. Channels count from 0, as in `ctl load`.
//
//   inputs = 2
//   outputs = 4
//   [[path]]
//   input = 0
//   output = 0
//   file = "woofer.txt"   # any coefficient file tapstream reads
//   channel = 0           # which channel of a multichannel IR file (default 0)
//   gain_db = -3.0        # default 0
//   delay_frames = 12     # default 0 (a delay, not filter length: see RoutingMatrix)
//   invert = false        # default false
//
// or one multichannel IR file whose channels are the paths, in a layout: the
// dense one (default) has channel k the path from input k % inputs to output
// k / inputs (all inputs of output 0, then all of output 1, ...); an
// all-zero channel is an absent path.
//
//   inputs = 16
//   outputs = 128
//   [dense]
//   file = "wfs.wav"
//   gain_db = 0.0         # optional, for every path
//   layout = "dense"      # or "true-stereo" (2 -> 2: LL, LR, RL, RR),
//                         # "hesuvi" (8 -> 2: HeSuVi's 14 channels)
//
// or a SOFA HRTF set rendering virtual sources binaurally (N -> 2, the
// measured direction nearest to each source, the set's own rate only):
//
//   inputs = 2
//   outputs = 2
//   [sofa]
//   file = "kemar.sofa"
//   gain_db = 0.0         # optional, for every path
//   interpolate = false   # true: the three nearest directions, inverse-angle weighted
//   [[sofa.source]]
//   input = 0
//   azimuth = 30          # degrees, counter-clockwise from ahead (SOFA's)
//   elevation = 0         # degrees up

#include <cstddef>
#include <filesystem>
#include <vector>

#include "daemon/config/toml_reader.hpp"
#include "dsp/model/routing_matrix.hpp"

namespace tapstream {

// "$samplerate$" in the matrix file's name or in any file it names is the
// rate in force (dsp/files/rate_file_name.hpp); a SOFA set is never resampled.
struct MatrixFileOptions {
  int sample_rate = 0;  // the signal's rate; every IR with a rate must match (0: no check)
  std::size_t max_taps = std::size_t(1) << 20;
  // An IR at another rate (or the nearest rate's file where the rate in force
  // has none) is resampled instead of refused (CoefficientFileOptions::resample).
  bool resample = false;
  // The rate of the files it names that do not say their own: the rate in the
  // matrix file's own name (0: none). Set by load_matrix_file.
  int named_rate = 0;
};

// Reads inputs/outputs and [[path]] or [dense] from `root`. Throws ConfigError
// naming the file, the path and the reason.
RoutingMatrix read_matrix(const toml_reading::Reader& reader, const toml::table& root,
                          const MatrixFileOptions& options);

// A whole matrix file (relative coefficient paths are relative to it); a
// "$samplerate$" in `file` is resolved for options.sample_rate first.
RoutingMatrix load_matrix_file(const std::filesystem::path& file, const MatrixFileOptions& options);

// Only a matrix file's inputs and outputs (its keys checked, its paths not
// read), for a configuration that names it (a "$samplerate$" in its name:
// the file of `sample_rate`, or the nearest one's; 0: any). Throws ConfigError
// naming the file and the key.
struct MatrixShape {
  std::size_t inputs = 0;
  std::size_t outputs = 0;
};
MatrixShape read_matrix_shape(const std::filesystem::path& file, int sample_rate = 0);

// The one filter of a coefficient file, for one path (`ctl load path`).
// Throws naming the file: unreadable, another rate, too long, or more than
// one channel.
std::vector<float> load_path_filter(const std::filesystem::path& file,
                                    const MatrixFileOptions& options);

}  // namespace tapstream

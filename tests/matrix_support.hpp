#pragma once
// Test support for routing matrices: paths made in one line, each output's
// float64 reference as the sum of its paths (gain, delay and polarity applied
// in float64, independently of MatrixPath::effective_taps), and a stream run
// through a MatrixEngine in blocks of random size.

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "dsp/model/matrix_engine.hpp"
#include "dsp/model/routing_matrix.hpp"
#include "reference.hpp"

namespace tapstream::testing {

inline MatrixPath make_path(std::size_t input, std::size_t output, std::vector<float> taps,
                            double gain_db = 0.0, std::size_t delay = 0, bool invert = false) {
  MatrixPath p;
  p.input = input;
  p.output = output;
  p.taps = std::move(taps);
  p.gain_db = gain_db;
  p.delay_frames = delay;
  p.invert = invert;
  p.source = "test";
  return p;
}

// Output o of the whole stream, in float64: the sum over the paths to o.
inline std::vector<double> reference_output(const RoutingMatrix& matrix,
                                            const std::vector<std::vector<float>>& inputs,
                                            std::size_t output) {
  const std::size_t frames = inputs[0].size();
  std::vector<double> sum(frames, 0.0);
  for (const MatrixPath& p : matrix.paths()) {
    if (p.output != output) continue;
    const std::vector<double> y = reference_convolution(inputs[p.input], p.taps);
    const double scale = std::pow(10.0, p.gain_db / 20.0) * (p.invert ? -1.0 : 1.0);
    for (std::size_t n = p.delay_frames; n < frames; ++n) sum[n] += scale * y[n - p.delay_frames];
  }
  return sum;
}

// Runs the stream through `filter` in blocks of random size (1..max_block),
// interleaved or planar, and returns each output channel.
inline std::vector<std::vector<float>> run_stream(MatrixEngine& filter,
                                                  const std::vector<std::vector<float>>& inputs,
                                                  std::mt19937_64& rng, Layout layout) {
  const std::size_t frames = inputs[0].size(), n_in = filter.inputs(), n_out = filter.outputs();
  std::vector<std::vector<float>> outputs(n_out, std::vector<float>(frames));
  std::uniform_int_distribution<std::size_t> block_size(1, filter.max_block_frames());
  std::vector<float> in, out;
  for (std::size_t start = 0; start < frames;) {
    const std::size_t n = std::min(block_size(rng), frames - start);
    in.assign(n_in * n, 0.0f);
    out.assign(n_out * n, 0.0f);
    for (std::size_t c = 0; c < n_in; ++c)
      for (std::size_t f = 0; f < n; ++f)
        in[layout == Layout::planar ? c * n + f : f * n_in + c] = inputs[c][start + f];
    filter.process(in, out, n, layout);
    for (std::size_t c = 0; c < n_out; ++c)
      for (std::size_t f = 0; f < n; ++f)
        outputs[c][start + f] = out[layout == Layout::planar ? c * n + f : f * n_out + c];
    start += n;
  }
  return outputs;
}

// 3 -> 5 with paths of 1 to 70001 taps, gains, delays, inverted paths, pairs
// absent and output 4 reached by no path; random taps from `seed`.
inline RoutingMatrix mixed_length_matrix(std::uint64_t seed) {
  std::vector<MatrixPath> paths;
  paths.push_back(make_path(0, 0, random_signal(1, seed + 1), -3.0));
  paths.push_back(make_path(1, 0, random_signal(4097, seed + 2), 0.0, 12, true));
  paths.push_back(make_path(2, 1, random_signal(70001, seed + 3), 6.0, 0));
  paths.push_back(make_path(0, 2, random_signal(300, seed + 4), -20.0, 1000, false));
  paths.push_back(make_path(2, 2, random_signal(17, seed + 5), 0.0, 3, true));
  paths.push_back(make_path(1, 3, random_signal(2048, seed + 6)));
  return RoutingMatrix::make(3, 5, std::move(paths));
}

// Two 2 -> 2 matrices with the same paths (one of 3000 taps) and other
// filters, gains, delays and polarities: a swap from the first to the second.
inline std::pair<RoutingMatrix, RoutingMatrix> swap_pair(std::uint64_t seed) {
  RoutingMatrix before = RoutingMatrix::make(
      2, 2,
      {make_path(0, 0, random_signal(3000, seed)), make_path(1, 0, random_signal(50, seed + 1)),
       make_path(1, 1, random_signal(700, seed + 2), -3.0, 5)});
  RoutingMatrix after =
      RoutingMatrix::make(2, 2,
                          {make_path(0, 0, random_signal(2900, seed + 3), 0.0, 0, true),
                           make_path(1, 0, random_signal(1, seed + 4)),
                           make_path(1, 1, random_signal(1200, seed + 5), 2.0, 40)});
  return {std::move(before), std::move(after)};
}

}  // namespace tapstream::testing

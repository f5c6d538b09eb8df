#include "dsp/cpu/cpu_matrix_plan.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

#include "dsp/cpu/cpu_cost_model.hpp"
#include "dsp/model/segment_delay.hpp"

namespace tapstream {
namespace {

std::size_t div_up(std::size_t n, std::size_t m) {
  return (n + m - 1) / m;
}

// What partition p does: per chunk of a call (the inputs' and outputs'
// transforms and the head products: the paths with no whole segment of
// delay) and per completed segment (the tails: every path's products with
// completed segments), counted in bins.
struct PartitionShape {
  double head_bins = 0.0;  // per chunk
  double tail_bins = 0.0;  // per segment
  double working_bytes = 0.0;
  std::size_t outputs_used = 0;
};

PartitionShape partition_shape(const CpuMatrixShape& m, std::size_t p) {
  PartitionShape shape;
  const double bins = double(p + 1);
  double spectra_bins = 0.0;
  std::size_t reach = 0;
  std::vector<bool> used(m.outputs, false);
  for (const CpuMatrixShape::Path& path : m.paths) {
    const std::size_t k = partitions_reached(path.delay_frames, path.taps, p);
    const bool head = path.delay_frames < p;
    shape.tail_bins += double(head ? k - 1 : k) * bins;
    shape.head_bins += head ? bins : 0.0;
    spectra_bins += double(k) * bins;
    reach = std::max(reach, k + path.delay_frames / p);  // delay line segments read
    used[path.output] = true;
  }
  shape.working_bytes = 8.0 * (spectra_bins + double(m.inputs * reach) * bins);
  shape.outputs_used = std::size_t(std::count(used.begin(), used.end(), true));
  return shape;
}

// The cost model's price of a chunk and of a segment's tails, in ns: FFT
// pairs by size, and a bin's multiply-add in or out of cache by what a
// segment's pass walks (every path's spectra and the inputs' delay line).
struct PartitionCosts {
  double chunk_ns = 0.0;
  double tails_ns = 0.0;
};

PartitionCosts partition_costs(const CpuMatrixShape& m, std::size_t p) {
  const PartitionShape shape = partition_shape(m, p);
  const double mac_ns = cpu_spectral_bin_ns(shape.working_bytes);
  return {double(m.inputs + m.outputs) * cpu_fft_pair_ns(2 * p) + shape.head_bins * mac_ns,
          shape.tail_bins * mac_ns};
}

// Average chunks per call of `block` frames (a call is cut at segment boundaries).
double chunks_per_call(std::size_t block, std::size_t p) {
  return double(div_up(block, p)) + (block % p != 0 && block > p ? 1.0 : 0.0);
}

// Average cost per frame of calls of `block` frames with partition p.
double cost_per_frame(const CpuMatrixShape& m, std::size_t block, std::size_t p) {
  const PartitionCosts costs = partition_costs(m, p);
  return (chunks_per_call(block, p) * costs.chunk_ns + double(block) / double(p) * costs.tails_ns) /
         double(block);
}

}  // namespace

CpuMatrixShape CpuMatrixShape::of(const RoutingMatrix& matrix) {
  CpuMatrixShape shape;
  shape.inputs = matrix.inputs();
  shape.outputs = matrix.outputs();
  shape.paths.reserve(matrix.paths().size());
  for (const MatrixPath& path : matrix.paths())
    shape.paths.push_back({path.input, path.output, path.taps.size(), path.delay_frames});
  return shape;
}

CpuMatrixWork cpu_matrix_work(const CpuMatrixShape& m, std::size_t block, std::size_t p,
                              double rate) {
  // Calls back to back from the stream's start, counted over one period of
  // their pattern (the least common multiple of the call and the segment):
  // chunks (a call is cut at segment boundaries) and completed segments.
  const std::size_t frames = std::lcm(block, p);
  std::size_t chunks = 0, segments = 0, position = 0, done = 0;
  for (; done < frames; done += block) {
    for (std::size_t left = block; left > 0;) {
      const std::size_t n = std::min(left, p - position);
      ++chunks;
      position += n;
      left -= n;
      if (position == p) {
        ++segments;
        position = 0;
      }
    }
  }
  const PartitionShape shape = partition_shape(m, p);
  const double per_second = rate / double(done);
  CpuMatrixWork work;
  work.forward_transforms = double(chunks * m.inputs) * per_second;
  work.inverse_transforms = double(chunks * shape.outputs_used) * per_second;
  work.bin_products =
      (double(chunks) * shape.head_bins + double(segments) * shape.tail_bins) * per_second;
  work.model_seconds = cost_per_frame(m, block, p) * rate * 1e-9;
  return work;
}

std::size_t cpu_matrix_partition(const CpuMatrixShape& m, std::size_t block) {
  std::size_t best = kCpuMatrixMinPartition;
  double best_cost = std::numeric_limits<double>::infinity();
  for (std::size_t p = kCpuMatrixMinPartition; p <= kCpuMatrixMaxPartition; p *= 2) {
    const double c = cost_per_frame(m, block, p);
    if (c < best_cost) {
      best_cost = c;
      best = p;
    }
  }
  return best;
}

double cpu_matrix_worst_call_ns(const CpuMatrixShape& m, std::size_t block, std::size_t p) {
  const PartitionCosts costs = partition_costs(m, p);
  return double(div_up(block, p) + 1) * costs.chunk_ns + double(div_up(block, p)) * costs.tails_ns;
}

}  // namespace tapstream

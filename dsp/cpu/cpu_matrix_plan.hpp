#pragma once
// The CPU matrix engine's plan (dsp/cpu/cpu_matrix_engine): which partition
// it runs a routing matrix with, what the CPU engines' cost model
// (dsp/cpu/cpu_cost_model) says a call costs with it, and the work it does,
// counted: transforms and a bin's complex multiply-adds per second of audio.
// The engine plans by it; the benchmarks and tests read it to see why a plan
// was chosen and where its time goes.

#include <cstddef>
#include <vector>

#include "dsp/model/routing_matrix.hpp"

namespace tapstream {

// The partitions the engine may run with: powers of two in this range.
inline constexpr std::size_t kCpuMatrixMinPartition = 16;
inline constexpr std::size_t kCpuMatrixMaxPartition = 65536;

// What the plan depends on: a matrix's paths without their taps' values.
struct CpuMatrixShape {
  struct Path {
    std::size_t input = 0, output = 0, taps = 0, delay_frames = 0;
  };
  std::size_t inputs = 0, outputs = 0;
  std::vector<Path> paths;

  static CpuMatrixShape of(const RoutingMatrix& matrix);
};

// What a stream of calls of `block` frames costs with partition P (FFTs of
// 2P points), per second of audio at `rate`.
struct CpuMatrixWork {
  double forward_transforms = 0.0;  // the inputs', one per input and chunk
  double inverse_transforms = 0.0;  // the outputs', one per output with a path and chunk
  double bin_products = 0.0;        // complex multiply-adds of a bin (head and tails)
  double model_seconds = 0.0;       // the cost model's price of the above, s per s of audio
};
CpuMatrixWork cpu_matrix_work(const CpuMatrixShape& shape, std::size_t block, std::size_t partition,
                              double rate);

// The partition the cost model finds cheapest for calls of `block` frames.
std::size_t cpu_matrix_partition(const CpuMatrixShape& shape, std::size_t block);

// The most a call of up to `block` frames costs with `partition` by the cost
// model, in ns: one chunk more than it fills (it may straddle a segment
// boundary) and the tails of every segment it completes.
double cpu_matrix_worst_call_ns(const CpuMatrixShape& shape, std::size_t block,
                                std::size_t partition);

}  // namespace tapstream

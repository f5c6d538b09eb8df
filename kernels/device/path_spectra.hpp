#pragma once
// Per-path updates of the CUDA routing matrix (MatrixEngine::set_paths): the
// new taps of a batch of paths, wherever they are on the device (the
// caller's arrays, or the engine's copy of host taps), become the time-domain
// partitions of their effective filters ([update][partition][2P]: P
// samples, then P zeros), a batched real FFT transforms them, and the
// spectra go into their places in H (kernels/device/matrix_mac.hpp), every
// partition of each named path (so a shorter filter clears the old tail).

#include <cuda_runtime.h>

#include "kernels/device/matrix_mac.hpp"

namespace tapstream::cuda {

// One path's new taps: `count` floats at `taps` (device memory), run as
// effective taps `delay` zeros then float(double(tap) * gain) (gain in
// linear units, the polarity's sign included), scaled by 1/(2P) as H holds
// them. H's place: input, output.
struct PathUpdate {
  const float* taps = nullptr;
  long long count = 0;
  long long delay = 0;
  double gain = 1.0;
  int input = 0, output = 0;
};

// Sets *bad (an int the device can write, INT_MAX before) to the smallest
// u among the `updates` entries of `update` (device memory) whose taps hold
// a NaN or an infinity; `longest` is the largest count.
void launch_find_non_finite_taps(const PathUpdate* update, int updates, long long longest, int* bad,
                                 cudaStream_t stream);

// time[u][j][0..2P) for the `updates` entries of `update` (device memory),
// partitions j < partitions.
void launch_expand_path_taps(const PathUpdate* update, int updates, int partitions, int partition,
                             float* time, cudaStream_t stream);

// H's entries of the `updates` paths, from their spectra
// ([u][j][bins], j < shape.partitions).
void launch_scatter_path_spectra(const PathUpdate* update, int updates, const float2* spectra,
                                 float2* h, const MatrixMacShape& shape, cudaStream_t stream);

}  // namespace tapstream::cuda

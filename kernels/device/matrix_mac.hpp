#pragma once
// The frequency-domain heart of the CUDA routing matrix: for every bin b and
// output o,
//   Y[o][b] = sum_j sum_i X_{s-j}[i][b] * H_j[i][o][b],
// per bin a vector-matrix product over k = (partition, input) pairs against
// the dense path spectra (an absent path is zero), memory bound on H.
//
// Layouts, shared with the cuBLAS variant (kernels/matrix/cublas_matrix_mac):
// - H is [bins][k][outputs_padded] with k = (partitions - 1 - j) * inputs + i,
//   outputs padded to an even count (zeros) so that a 16-byte load holds two
//   outputs' values: per bin one contiguous matrix, streamed once per block.
// - X is the mirrored delay line (kernels/device/matrix_chunks.hpp) of
//   `slots` segments (slots >= partitions): the window at positions
//   slot+1+slots-partitions .. slot+slots is [k][bins].
// - Delays (dsp/model/segment_delay.hpp): path i -> o's partition j meets
//   X_{s-q-j}, q its whole segments from `delays` ([inputs][outputs_padded]),
//   read q slots further back in the delay line (slots >= partitions + the
//   largest q). Null: no path has a whole segment of delay (the window is
//   shared by every output).
// - Only k >= k_first runs: the oldest partitions no path of the set reaches
//   (H zero there) cost nothing.
//
// The tiled kernel: a block of 256 threads per (bin, tile of 64 outputs,
// split of k); each thread holds two outputs (one float4 of H a step), the
// block's rows of threads stride over the split's k, and a deterministic
// tree in shared memory sums the rows. Splits over k (when bins alone do not
// fill the device) leave partial sums that a second launch adds in order.

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/device/matrix_chunks.hpp"

namespace tapstream::cuda {

struct MatrixMacShape {
  int inputs = 0, outputs = 0, bins = 0, partitions = 0;
  __host__ __device__ int outputs_padded() const { return outputs + (outputs & 1); }
  __host__ __device__ long long depth() const { return (long long)partitions * inputs; }  // k
  // Elements of H: bins * depth * outputs_padded.
  __host__ __device__ long long spectra_count() const {
    return (long long)bins * depth() * outputs_padded();
  }
};

// How many k-splits the tiled kernel uses for this shape (1: no second launch).
int matrix_mac_splits(const MatrixMacShape& shape);

struct MatrixMacArgs {
  MatrixMacShape shape;
  const float2* fdl = nullptr;         // mirrored delay line [2 * slots][inputs][bins]
  int slots = 0;                       // the delay line's segments (>= shape.partitions)
  const int* delays = nullptr;         // per path q, [inputs][outputs_padded]; null: all 0
  long long k_first = 0;               // first k a path of the set reaches
  const MatrixChunk* chunk = nullptr;  // device: the chunk's slot picks the window
  const float2* spectra = nullptr;     // H, scaled 1/(2P)
  float2* partial = nullptr;           // [splits][outputs][bins] (splits > 1)
  float2* out = nullptr;               // [outputs][bins]
  int splits = 1;
};

void launch_matrix_mac(const MatrixMacArgs& args, cudaStream_t stream);

// Packs partition j's spectra, as the filter transforms leave them
// ([inputs][outputs][bins]), into H's layout (see above). Padding outputs of
// H must be zeroed by the caller.
void launch_pack_spectra(const float2* partition_spectra, float2* spectra,
                         const MatrixMacShape& shape, int j, cudaStream_t stream);

}  // namespace tapstream::cuda

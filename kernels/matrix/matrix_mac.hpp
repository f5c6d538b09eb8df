#pragma once
// The frequency-domain heart of the CUDA routing matrix: for every bin b and
// output o,
//   Y[o][b] = sum_j sum_i X_{s-j}[i][b] * H_j[i][o][b],
// the input spectra of the current segment (j = 0) and of the delay line
// (j >= 1) against the dense path spectra (an absent path is zero). Per bin
// it is a vector-matrix product over inputs and partitions, memory bound on
// H; it runs in two launches so that it is parallel over partitions as well
// as over bins and outputs: partial sums per group of partitions, then their
// sum.

#include <cuda_runtime.h>

#include <cstddef>

namespace tapstream::cuda {

struct MatrixMacArgs {
  const float2* current = nullptr;  // [inputs][bins]: this segment's window spectra
  const float2* fdl = nullptr;      // [slots][inputs][bins]: completed segments' spectra
  const float2* spectra = nullptr;  // [partitions][inputs][outputs][bins], scaled 1/(2P)
  float2* partial = nullptr;        // [groups][outputs][bins]
  float2* out = nullptr;            // [outputs][bins]
  int inputs = 0, outputs = 0, bins = 0;
  int partitions = 0;  // K of the spectra
  int slots = 0;       // delay-line length (>= partitions)
  int slot = 0;        // the slot the current segment will be stored in
  int groups = 1;      // partitions are split into this many groups (<= partitions)
};

// How many partition groups keep the device busy for this shape.
int matrix_mac_groups(int inputs, int outputs, int bins, int partitions);

void launch_matrix_mac(const MatrixMacArgs& args, cudaStream_t stream);

}  // namespace tapstream::cuda

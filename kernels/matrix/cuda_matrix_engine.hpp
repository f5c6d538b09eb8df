#pragma once
// The CUDA engine's native routing matrix (see dsp/model/matrix_engine.hpp for the
// contract): uniformly partitioned overlap-save with one delay line per
// input and one inverse transform per output, the per-bin sum over inputs
// and partitions computed by the tiled kernel (kernels/device/matrix_mac) or
// by cuBLAS (kernels/matrix/cublas_matrix_mac). Plain C++ header.

#include <memory>

#include "dsp/model/engine.hpp"
#include "dsp/model/matrix_engine.hpp"

namespace tapstream {

// options.max_block_frames, max_taps (0: the matrix's longest path), device,
// cuda.matrix_kernel (which kernel computes the per-bin products; automatic:
// tiled, the faster on the H100) and cuda.matrix_graphs are used. Throws
// std::runtime_error naming the CUDA call on failure.
std::unique_ptr<MatrixEngine> make_cuda_matrix_engine(const RoutingMatrix& matrix,
                                                      const EngineOptions& options);

}  // namespace tapstream

#pragma once
// The CUDA engine's native routing matrix (see dsp/matrix_engine.hpp for the
// contract): uniformly partitioned overlap-save with one delay line per
// input and one inverse transform per output, the per-bin sum over inputs
// and partitions computed by the tiled kernel (kernels/matrix/matrix_mac) or
// by cuBLAS (kernels/matrix/cublas_matrix_mac). Plain C++ header.

#include <memory>

#include "dsp/engine.hpp"
#include "dsp/matrix_engine.hpp"

namespace tapstream {

// Which kernel computes the per-bin products. `automatic` reads the
// environment variable TAPSTREAM_MATRIX_MAC ("tiled" or "cublas"; unset or
// empty: tiled, the faster on the H100).
enum class CudaMatrixMac { automatic, tiled, cublas };

// options.max_block_frames, max_taps (0: the matrix's longest path) and
// device are used. Throws std::runtime_error naming the CUDA call on failure,
// std::invalid_argument for a bad TAPSTREAM_MATRIX_MAC.
std::unique_ptr<MatrixEngine> make_cuda_matrix_engine(const RoutingMatrix& matrix,
                                                      const EngineOptions& options,
                                                      CudaMatrixMac mac);
std::unique_ptr<MatrixEngine> make_cuda_matrix_engine(const RoutingMatrix& matrix,
                                                      const EngineOptions& options);

}  // namespace tapstream

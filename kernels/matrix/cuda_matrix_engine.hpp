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

// options.max_block_frames, max_taps (0: the matrix's longest filter),
// max_delay_frames, device, cuda.matrix_kernel (which kernel computes the
// per-bin products; automatic: tiled, the faster on the H100) and
// cuda.matrix_graphs are used. With the tiled kernel a path's delay is a
// delay (max_delay_frames() reaches max(options.max_delay_frames, the
// matrix's longest delay, 65536 frames), the
// 65536 frames of spare room shortened past 256 inputs to keep it within
// 256 MiB); with
// cuBLAS it is folded into the taps (max_taps() then bounds delay + taps:
// options.max_taps plus the matrix's longest delay). Throws
// std::runtime_error naming the CUDA call on failure.
std::unique_ptr<MatrixEngine> make_cuda_matrix_engine(const RoutingMatrix& matrix,
                                                      const EngineOptions& options);

}  // namespace tapstream

#pragma once
// The routing matrix's per-bin products through cuBLAS, the variant measured
// against the tiled kernel (kernels/device/matrix_mac.hpp, same layouts): one
// cublasCgemmBatched over bins, each bin Y(1 x outputs) = X(1 x k) * H(k x
// outputs), H read transposed from its [k][outputs_padded] rows. The window
// X moves with the delay-line slot, so the A operands are a device pointer
// array (written by launch_store_current) rather than a fixed stride, which
// keeps the call capturable in a CUDA graph.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/cuda_resources.hpp"
#include "kernels/device/matrix_mac.hpp"

namespace tapstream::cuda {

class CublasMatrixMac {
 public:
  CublasMatrixMac() = default;
  explicit CublasMatrixMac(const MatrixMacShape& shape);
  ~CublasMatrixMac();
  CublasMatrixMac(CublasMatrixMac&& other) noexcept;
  CublasMatrixMac& operator=(CublasMatrixMac&& other) noexcept;
  CublasMatrixMac(const CublasMatrixMac&) = delete;
  CublasMatrixMac& operator=(const CublasMatrixMac&) = delete;

  // Where launch_store_current writes the A pointers (bins of them).
  float2** window_pointers() const { return pointers_.get(); }
  // Fills the per-bin B and C pointers of `spectra` and `out` (once per pair
  // of buffers; `set` 0 or 1, for the running and the fading-out matrix).
  void bind(int set, const float2* spectra, float2* out, cudaStream_t stream);
  // out of set `set` = the per-bin products; capturable.
  void run(int set, cudaStream_t stream) const;

 private:
  MatrixMacShape shape_;
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer<char> workspace_;
  // [A: bins][B set 0: bins][C set 0: bins][B set 1: bins][C set 1: bins]
  DeviceBuffer<float2*> pointers_;
};

}  // namespace tapstream::cuda

#include "kernels/matrix/cublas_matrix_mac.hpp"

#include <stdexcept>
#include <string>
#include <utility>

namespace tapstream::cuda {
namespace {

void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(call) + " failed: " + cublasGetStatusString(status) +
                             " (cuBLAS status " + std::to_string(int(status)) + ")");
}

// cuBLAS's recommended workspace on Hopper; a workspace of our own keeps
// cuBLAS from allocating inside a graph capture.
constexpr std::size_t kWorkspaceBytes = 32u << 20;

}  // namespace

CublasMatrixMac::CublasMatrixMac(const MatrixMacShape& shape)
    : shape_(shape),
      workspace_(kWorkspaceBytes),
      pointers_(std::size_t(5) * std::size_t(shape.bins)) {
  check(cublasCreate(&handle_), "cublasCreate");
  check(cublasSetWorkspace(handle_, workspace_.get(), workspace_.bytes()), "cublasSetWorkspace");
  check(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");
}

CublasMatrixMac::~CublasMatrixMac() {
  if (handle_) cublasDestroy(handle_);
}

CublasMatrixMac::CublasMatrixMac(CublasMatrixMac&& other) noexcept
    : shape_(other.shape_),
      handle_(std::exchange(other.handle_, nullptr)),
      workspace_(std::move(other.workspace_)),
      pointers_(std::move(other.pointers_)) {}

CublasMatrixMac& CublasMatrixMac::operator=(CublasMatrixMac&& other) noexcept {
  std::swap(shape_, other.shape_);
  std::swap(handle_, other.handle_);
  std::swap(workspace_, other.workspace_);
  std::swap(pointers_, other.pointers_);
  return *this;
}

void CublasMatrixMac::bind(int set, const float2* spectra, float2* out, cudaStream_t stream) {
  const int bins = shape_.bins;
  float2** b = pointers_.get() + (1 + 2 * set) * bins;
  launch_fill_pointers(b, spectra, shape_.depth() * shape_.outputs_padded(), bins, stream);
  launch_fill_pointers(b + bins, out, 1, bins, stream);
}

void CublasMatrixMac::run(int set, cudaStream_t stream) const {
  const int bins = shape_.bins;
  float2* const* pointers = pointers_.get();
  const cuComplex one = make_cuComplex(1.0f, 0.0f), zero = make_cuComplex(0.0f, 0.0f);
  check(cublasSetStream(handle_, stream), "cublasSetStream");
  // Column-major: A is 1 x k with lda = bins (the window is [k][bins]); B,
  // transposed, is k x outputs from H's outputs_padded x k; C is 1 x outputs
  // with ldc = bins (Y is [outputs][bins]).
  check(cublasCgemmBatched(
            handle_, CUBLAS_OP_N, CUBLAS_OP_T, 1, shape_.outputs, int(shape_.depth()), &one,
            reinterpret_cast<const cuComplex* const*>(pointers), bins,
            reinterpret_cast<const cuComplex* const*>(pointers + (1 + 2 * set) * bins),
            shape_.outputs_padded(), &zero,
            reinterpret_cast<cuComplex* const*>(pointers + (2 + 2 * set) * bins), bins, bins),
        "cublasCgemmBatched");
}

}  // namespace tapstream::cuda

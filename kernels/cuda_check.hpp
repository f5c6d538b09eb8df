#pragma once
// Every CUDA runtime (and cuFFT) call goes through one of these checks: a
// failure becomes a std::runtime_error that names the call as written, the
// error string and the place, e.g.
//   "cudaMalloc(&ptr, bytes) failed: out of memory (kernels/cuda_resources.hpp:57)".

#include <cuda_runtime.h>
#include <cufft.h>

#include <stdexcept>
#include <string>

namespace tapstream::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t error, const char* call, const char* file,
                                          int line) {
  // Clear the runtime's last error (for non-sticky errors such as out of memory),
  // so that a later launch check does not report this failure again.
  cudaGetLastError();
  throw std::runtime_error(std::string(call) + " failed: " + cudaGetErrorString(error) + " (" +
                           file + ":" + std::to_string(line) + ")");
}

inline const char* cufft_error_string(cufftResult result) {
  switch (result) {
    case CUFFT_SUCCESS:
      return "success";
    case CUFFT_INVALID_PLAN:
      return "invalid plan";
    case CUFFT_ALLOC_FAILED:
      return "allocation failed (out of memory)";
    case CUFFT_INVALID_VALUE:
      return "invalid value";
    case CUFFT_INTERNAL_ERROR:
      return "internal error";
    case CUFFT_EXEC_FAILED:
      return "execution failed";
    case CUFFT_SETUP_FAILED:
      return "setup failed";
    case CUFFT_INVALID_SIZE:
      return "invalid size";
    case CUFFT_INVALID_DEVICE:
      return "invalid device";
    case CUFFT_NO_WORKSPACE:
      return "no workspace";
    case CUFFT_NOT_IMPLEMENTED:
      return "not implemented";
    case CUFFT_NOT_SUPPORTED:
      return "not supported";
    default:
      return "unknown cuFFT error";
  }
}

[[noreturn]] inline void throw_cufft_error(cufftResult result, const char* call, const char* file,
                                           int line) {
  throw std::runtime_error(std::string(call) + " failed: " + cufft_error_string(result) +
                           " (cuFFT error " + std::to_string(int(result)) + ", " + file + ":" +
                           std::to_string(line) + ")");
}

}  // namespace tapstream::cuda

// Checks a CUDA runtime call: TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(...));
#define TAPSTREAM_CUDA_CHECK(call)                                                           \
  do {                                                                                       \
    const cudaError_t tapstream_cuda_error_ = (call);                                        \
    if (tapstream_cuda_error_ != cudaSuccess)                                                \
      ::tapstream::cuda::throw_cuda_error(tapstream_cuda_error_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: reports a bad launch configuration (not errors that
// happen later while the kernel runs; those surface at the next checked call).
#define TAPSTREAM_CUDA_CHECK_LAUNCH(kernel_name)                                           \
  do {                                                                                     \
    const cudaError_t tapstream_cuda_error_ = cudaGetLastError();                          \
    if (tapstream_cuda_error_ != cudaSuccess)                                              \
      ::tapstream::cuda::throw_cuda_error(tapstream_cuda_error_, "launch of " kernel_name, \
                                          __FILE__, __LINE__);                             \
  } while (0)

// Checks a cuFFT call: TAPSTREAM_CUFFT_CHECK(cufftExecR2C(...));
#define TAPSTREAM_CUFFT_CHECK(call)                                                             \
  do {                                                                                          \
    const cufftResult tapstream_cufft_result_ = (call);                                         \
    if (tapstream_cufft_result_ != CUFFT_SUCCESS)                                               \
      ::tapstream::cuda::throw_cufft_error(tapstream_cufft_result_, #call, __FILE__, __LINE__); \
  } while (0)

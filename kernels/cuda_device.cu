// Whether a CUDA device can be used, and the plain sentences that say why not
// (declared in cuda_engine.hpp).

#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda_engine.hpp"
#include "kernels/device/architecture_probe.hpp"

namespace tapstream {

namespace {

std::string runtime_version_text() {
  int version = 0;
  cudaRuntimeGetVersion(&version);
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// One plain sentence per way a GPU can be missing, for a user who did not
// ask for the details of the CUDA runtime.
std::string unavailable_sentence(cudaError_t error) {
  switch (error) {
    case cudaErrorInsufficientDriver: {
      int driver = 0;
      cudaDriverGetVersion(&driver);
      if (driver == 0) return "no NVIDIA driver is installed or loaded";
      return "the NVIDIA driver is older than this build's CUDA " + runtime_version_text() +
             " needs (update the driver)";
    }
    case cudaErrorNoDevice:
      return "no NVIDIA GPU was found";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidDeviceFunction:
      return "the GPU is too old for the CUDA architectures this build was compiled for";
    case cudaErrorMemoryAllocation:
      return "the GPU is out of memory";
    default:
      return std::string("the GPU cannot be used (") + cudaGetErrorString(error) + ")";
  }
}

}  // namespace

bool cuda_device_available(std::string* reason) {
  try {
    int count = 0;
    cudaError_t error = cudaGetDeviceCount(&count);
    if (error == cudaSuccess && count == 0) error = cudaErrorNoDevice;
    if (error == cudaSuccess) {
      error = cuda::probe_architecture();
      if (error == cudaSuccess) return true;
    }
    if (reason) *reason = unavailable_sentence(error);
    cudaGetLastError();  // clear it so that later calls do not report it again
    return false;
  } catch (...) {
    if (reason) *reason = "the GPU cannot be used (the CUDA device query failed)";
    return false;
  }
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear it so that later calls do not report it again
    return 0;
  }
  return count;
}

std::string cuda_failure_sentence(const std::string& what) {
  // cudaGetErrorString(cudaErrorMemoryAllocation) is "out of memory".
  if (what.find("out of memory") != std::string::npos) {
    return unavailable_sentence(cudaErrorMemoryAllocation) + " (" + what + ")";
  }
  return "the CUDA engine failed to start (" + what + ")";
}

}  // namespace tapstream

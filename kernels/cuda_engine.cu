// Temporary stub so that the header's API links; the engine lands next.
#include <cuda_runtime.h>

#include <stdexcept>

#include "kernels/cuda_engine.hpp"

namespace tapstream {

bool cuda_device_available(std::string* reason) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    if (reason) *reason = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(error);
    cudaGetLastError();
    return false;
  }
  if (count == 0) {
    if (reason) *reason = "no CUDA device found";
    return false;
  }
  return true;
}

std::vector<std::string> cuda_kernel_variants() {
  return {"auto", "naive", "constant", "shared_tile", "cached_tile", "tuned"};
}

std::unique_ptr<CudaEngine> make_cuda_device_engine(const FilterBank&, const EngineOptions&) {
  throw std::runtime_error("CUDA engine: not implemented yet");
}

std::unique_ptr<Engine> make_cuda_engine(const FilterBank& bank, const EngineOptions& options) {
  return make_cuda_device_engine(bank, options);
}

}  // namespace tapstream

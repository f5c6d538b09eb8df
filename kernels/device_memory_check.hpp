#pragma once
// Pointers that callers hand an engine as device memory (process_device):
// checked before any kernel reads them, so that host memory or a stray
// pointer is refused by name instead of faulting on the device.

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace tapstream::cuda {

// Throws std::invalid_argument naming `what` unless `p` is device or managed memory.
inline void check_device_memory(const void* p, const char* what) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it for the next checked call
    throw std::invalid_argument(std::string(what) + " is not memory CUDA knows");
  }
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
    throw std::invalid_argument(std::string(what) +
                                " is not device memory (host memory goes through process())");
  }
}

}  // namespace tapstream::cuda

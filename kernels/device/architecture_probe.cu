// See architecture_probe.hpp.

#include "kernels/device/architecture_probe.hpp"

namespace tapstream::cuda {

namespace {

// Never launched: asking for its attributes tells whether this build holds
// code the device can run (cudaErrorNoKernelImageForDevice when it does not).
__global__ void architecture_probe() {}

}  // namespace

cudaError_t probe_architecture() {
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, architecture_probe);
}

}  // namespace tapstream::cuda

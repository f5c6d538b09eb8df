#pragma once
// Whether this build holds device code the current GPU can run.

#include <cuda_runtime.h>

namespace tapstream::cuda {

// cudaSuccess when the current device can run this build's kernels; else the
// error that asking for a (never launched) kernel's attributes gives, e.g.
// cudaErrorNoKernelImageForDevice for a GPU older than the build's
// architectures. Sets no sticky error.
cudaError_t probe_architecture();

}  // namespace tapstream::cuda

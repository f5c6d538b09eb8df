#pragma once
// Kernels that measure the device's ceilings for the benchmark's floors: the
// fp32 fused multiply-add rate (the direct form's arithmetic floor). The copy
// bandwidth needs no kernel of ours (cudaMemcpyAsync device to device).

#include <cuda_runtime.h>

namespace tapstream::bench {

// Independent FMA chains per thread in fma_loop: enough to hide the FMA
// latency (4 cycles) with a few warps per scheduler.
inline constexpr int fma_chains = 8;

// Launches blocks x threads threads, each doing `iterations` x fma_chains
// dependent-per-chain FMAs in registers and writing one float to `out`
// (blocks * threads floats) so nothing is optimised away.
void launch_fma_loop(float* out, int blocks, int threads, int iterations, cudaStream_t stream);

}  // namespace tapstream::bench

#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "kernels/device/spectral_mac.hpp"

namespace tapstream::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void complex_mac(float2& acc, float2 x, float2 h) {
  acc.x = fmaf(x.x, h.x, fmaf(-x.y, h.y, acc.x));
  acc.y = fmaf(x.x, h.y, fmaf(x.y, h.x, acc.y));
}

// One thread per (bin, channel) of one output segment; blockIdx.z walks the
// segments. Bins are innermost so that a warp reads 32 consecutive float2 of
// every spectrum it touches.
__global__ void spectral_mac_kernel(SpectralMacArgs a) {
  const std::size_t bin = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (bin >= a.bins) return;
  const std::size_t c = blockIdx.y;
  const std::size_t per_segment = a.channels * a.bins;
  const std::size_t within = c * a.bins + bin;
  const float2* h = a.filter + c * a.filter_channel_stride + bin;
  for (std::size_t t = blockIdx.z; t < a.segments; t += gridDim.z) {
    const std::int64_t segment = a.first_segment + std::int64_t(t);
    const std::size_t index = t * per_segment + within;

    if (a.new_spectra != nullptr && t >= a.store_from) {
      const std::size_t slot = std::size_t(segment) % a.ring_slots;
      a.ring[slot * per_segment + within] = a.new_spectra[index];
    }

    float2 acc = a.addend != nullptr ? a.addend[within] : make_float2(0.0f, 0.0f);
    // Spectra before the start of the stream are zero: stop at segment 0.
    const std::size_t end = std::min<std::size_t>(a.end_partition, std::size_t(segment) + 1);
#pragma unroll 4
    for (std::size_t j = a.first_partition; j < end; ++j) {
      const std::int64_t n = segment - std::int64_t(j);
      const float2 x = n >= a.first_segment
                           ? a.new_spectra[std::size_t(n - a.first_segment) * per_segment + within]
                           : a.ring[(std::size_t(n) % a.ring_slots) * per_segment + within];
      complex_mac(acc, x, h[j * a.filter_partition_stride]);
    }
    a.out[index] = acc;
  }
}

}  // namespace

void launch_spectral_mac(const SpectralMacArgs& args, cudaStream_t stream) {
  if (args.segments == 0 || args.channels == 0 || args.bins == 0) return;
  const dim3 grid(unsigned((args.bins + kThreads - 1) / kThreads), unsigned(args.channels),
                  unsigned(std::min<std::size_t>(args.segments, 65535)));
  spectral_mac_kernel<<<grid, kThreads, 0, stream>>>(args);
  TAPSTREAM_CUDA_CHECK_LAUNCH("spectral_mac_kernel");
}

}  // namespace tapstream::cuda

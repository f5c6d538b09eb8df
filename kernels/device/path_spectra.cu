#include "kernels/cuda_check.hpp"
#include "kernels/device/path_spectra.hpp"

namespace tapstream::cuda {
namespace {

constexpr int kThreads = 256;

// grid: x over the taps, y over updates.
__global__ void find_non_finite_taps_kernel(const PathUpdate* update, int* bad) {
  const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const int u = blockIdx.y;
  if (t < update[u].count && !isfinite(update[u].taps[t])) atomicMin(bad, u);
}

// grid: x over the 2P samples of a partition, y over partitions, z over updates.
__global__ void expand_path_taps_kernel(const PathUpdate* update, int partition, float* time) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const int j = blockIdx.y, u = blockIdx.z;
  if (t >= 2 * partition) return;
  const PathUpdate path = update[u];
  const long long e = (long long)j * partition + t;  // position in the effective taps
  float value = 0.0f;
  if (t < partition && e >= path.delay && e - path.delay < path.count) {
    const float tap = path.taps[e - path.delay];
    // As MatrixPath::effective_taps and the engine's upload round, to the bit.
    value = float(double(tap) * path.gain) * (1.0f / float(2 * partition));
  }
  time[((long long)u * gridDim.y + j) * 2 * partition + t] = value;
}

// grid: x over bins, y over partitions, z over updates.
__global__ void scatter_path_spectra_kernel(const PathUpdate* update, const float2* spectra,
                                            float2* h, MatrixMacShape s) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  const int j = blockIdx.y, u = blockIdx.z;
  if (b >= s.bins) return;
  const int i = update[u].input, o = update[u].output;
  const long long k = (long long)(s.partitions - 1 - j) * s.inputs + i;
  h[((long long)b * s.depth() + k) * s.outputs_padded() + o] =
      spectra[((long long)u * s.partitions + j) * s.bins + b];
}

}  // namespace

void launch_find_non_finite_taps(const PathUpdate* update, int updates, long long longest, int* bad,
                                 cudaStream_t stream) {
  if (updates == 0 || longest == 0) return;
  const dim3 grid(unsigned((longest + kThreads - 1) / kThreads), unsigned(updates));
  find_non_finite_taps_kernel<<<grid, kThreads, 0, stream>>>(update, bad);
  TAPSTREAM_CUDA_CHECK_LAUNCH("find_non_finite_taps_kernel");
}

void launch_expand_path_taps(const PathUpdate* update, int updates, int partitions, int partition,
                             float* time, cudaStream_t stream) {
  const dim3 grid(unsigned((2 * partition + kThreads - 1) / kThreads), unsigned(partitions),
                  unsigned(updates));
  expand_path_taps_kernel<<<grid, kThreads, 0, stream>>>(update, partition, time);
  TAPSTREAM_CUDA_CHECK_LAUNCH("expand_path_taps_kernel");
}

void launch_scatter_path_spectra(const PathUpdate* update, int updates, const float2* spectra,
                                 float2* h, const MatrixMacShape& shape, cudaStream_t stream) {
  const dim3 grid(unsigned((shape.bins + kThreads - 1) / kThreads), unsigned(shape.partitions),
                  unsigned(updates));
  scatter_path_spectra_kernel<<<grid, kThreads, 0, stream>>>(update, spectra, h, shape);
  TAPSTREAM_CUDA_CHECK_LAUNCH("scatter_path_spectra_kernel");
}

}  // namespace tapstream::cuda

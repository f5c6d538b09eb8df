#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "kernels/device/path_spectra.hpp"

namespace tapstream::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 32, kTileRows = 8;  // the transposes' tiles: 32 x 32, 8 rows of threads
constexpr int kFadeThreads = 128;

// grid: x over the taps, y over updates.
__global__ void find_non_finite_taps_kernel(const PathUpdate* update, int* bad) {
  const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const int u = blockIdx.y;
  if (t < update[u].count && !isfinite(update[u].taps[t])) atomicMin(bad, update[u].index);
}

// grid: x over the 2P samples of a partition, y over partitions, z over updates.
__global__ void expand_path_taps_kernel(const PathUpdate* update, int partition, float* time,
                                        int* bad) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const int j = blockIdx.y, u = blockIdx.z;
  if (t >= 2 * partition) return;
  const PathUpdate path = update[u];
  const long long e = (long long)j * partition + t;  // position in the effective taps
  float value = 0.0f;
  if (t < partition && e >= path.delay && e - path.delay < path.count) {
    const float tap = path.taps[e - path.delay];
    // Each tap is read here exactly once: the check costs no second pass.
    if (bad != nullptr && !isfinite(tap)) atomicMin(bad, path.index);
    // As MatrixPath::effective_taps and the engine's upload round, to the bit.
    value = float(double(tap) * path.gain) * (1.0f / float(2 * partition));
  }
  time[((long long)u * gridDim.y + j) * 2 * partition + t] = value;
}

__device__ inline long long h_index(const MatrixMacShape& s, int b, int j, int input, int output) {
  const long long k = (long long)(s.partitions - 1 - j) * s.inputs + input;
  return ((long long)b * s.depth() + k) * s.outputs_padded() + output;
}

// grid: x over tiles of 32 updates, y over tiles of 32 bins, z over
// partitions; block 32 x 8. The spectra are read along bins and H is
// written along updates (consecutive paths are consecutive in H).
__global__ void install_path_spectra_kernel(const PathUpdate* update, int updates,
                                            const float2* spectra, const float2* running,
                                            float2* spare, float2* delta, FadePath* fade,
                                            const int* bad, MatrixMacShape s) {
  if (*bad != kNoBadTap) return;  // the same for every thread of the block
  __shared__ float2 tile[kTile][kTile + 1];
  const int u0 = blockIdx.x * kTile, b0 = blockIdx.y * kTile, j = blockIdx.z;
  for (int r = threadIdx.y; r < kTile; r += kTileRows) {
    const int u = u0 + r, b = b0 + threadIdx.x;
    if (u < updates && b < s.bins)
      tile[r][threadIdx.x] = spectra[((long long)u * s.partitions + j) * s.bins + b];
  }
  __syncthreads();
  const int u = u0 + threadIdx.x;
  if (u < updates) {
    const int input = update[u].input, output = update[u].output;
    for (int r = threadIdx.y; r < kTile && b0 + r < s.bins; r += kTileRows) {
      const long long at = h_index(s, b0 + r, j, input, output);
      const float2 value = tile[threadIdx.x][r];
      if (delta != nullptr) {
        const float2 old = running[at];
        tile[threadIdx.x][r] = make_float2(old.x - value.x, old.y - value.y);
      }
      spare[at] = value;
    }
    if (delta != nullptr && j == 0 && blockIdx.y == 0 && threadIdx.y == 0)
      fade[update[u].slot] = FadePath{input, output, update[u].segments};
  }
  if (delta == nullptr) return;  // the same for every thread of the block
  __syncthreads();
  for (int r = threadIdx.y; r < kTile; r += kTileRows) {
    const int uu = u0 + r, b = b0 + threadIdx.x;
    if (uu < updates && b < s.bins)
      delta[((long long)update[uu].slot * s.partitions + j) * s.bins + b] = tile[r][threadIdx.x];
  }
}

// grid: x over tiles of 32 paths, y over tiles of 8 bins, z over partitions;
// block 32 x 8 (consecutive threads on consecutive paths, so on H).
__global__ void copy_path_spectra_kernel(const PathUpdate* path, int paths, const float2* from,
                                         float2* to, MatrixMacShape s) {
  const int u = blockIdx.x * kTile + threadIdx.x;
  const int b = blockIdx.y * kTileRows + threadIdx.y, j = blockIdx.z;
  if (u >= paths || b >= s.bins) return;
  const long long at = h_index(s, b, j, path[u].input, path[u].output);
  to[at] = from[at];
}

// grid: x over fade paths, y over bins in blocks of kFadeThreads.
__global__ void add_fade_delta_kernel(const FadePath* fade, const float2* delta, const float2* fdl,
                                      int slots, const MatrixChunk* chunk, MatrixMacShape s,
                                      float2* y_old) {
  const int u = blockIdx.x;
  const int b = blockIdx.y * kFadeThreads + threadIdx.x;
  if (b >= s.bins) return;
  const FadePath path = fade[u];
  const long long per_slot = (long long)s.inputs * s.bins;
  // Partition j's input spectrum for a path q segments late is at position
  // slot + slots - q - j of the mirrored line.
  const float2* x = fdl + (long long)(chunk->slot + slots - path.segments) * per_slot +
                    (long long)path.input * s.bins + b;
  const float2* d = delta + (long long)u * s.partitions * s.bins + b;
  float2 acc = make_float2(0.0f, 0.0f);
  for (int j = 0; j < s.partitions; ++j) {
    const float2 xv = x[-(long long)j * per_slot];
    const float2 dv = d[(long long)j * s.bins];
    acc.x = fmaf(xv.x, dv.x, fmaf(-xv.y, dv.y, acc.x));
    acc.y = fmaf(xv.x, dv.y, fmaf(xv.y, dv.x, acc.y));
  }
  float2* y = y_old + (long long)path.output * s.bins + b;
  atomicAdd(&y->x, acc.x);
  atomicAdd(&y->y, acc.y);
}

}  // namespace

void launch_find_non_finite_taps(const PathUpdate* update, int updates, long long longest, int* bad,
                                 cudaStream_t stream) {
  if (longest == 0) return;
  for (int first = 0; first < updates; first += 65535) {  // a grid's y dimension at most
    const dim3 grid(unsigned((longest + kThreads - 1) / kThreads),
                    unsigned(std::min(65535, updates - first)));
    find_non_finite_taps_kernel<<<grid, kThreads, 0, stream>>>(update + first, bad);
    TAPSTREAM_CUDA_CHECK_LAUNCH("find_non_finite_taps_kernel");
  }
}

void launch_expand_path_taps(const PathUpdate* update, int updates, int partitions, int partition,
                             float* time, int* bad, cudaStream_t stream) {
  const dim3 grid(unsigned((2 * partition + kThreads - 1) / kThreads), unsigned(partitions),
                  unsigned(updates));
  expand_path_taps_kernel<<<grid, kThreads, 0, stream>>>(update, partition, time, bad);
  TAPSTREAM_CUDA_CHECK_LAUNCH("expand_path_taps_kernel");
}

void launch_install_path_spectra(const PathUpdate* update, int updates, const float2* spectra,
                                 const float2* running, float2* spare, float2* delta,
                                 FadePath* fade, const int* bad, const MatrixMacShape& shape,
                                 cudaStream_t stream) {
  if (updates == 0) return;
  const dim3 grid(unsigned((updates + kTile - 1) / kTile),
                  unsigned((shape.bins + kTile - 1) / kTile), unsigned(shape.partitions));
  install_path_spectra_kernel<<<grid, dim3(kTile, kTileRows), 0, stream>>>(
      update, updates, spectra, running, spare, delta, fade, bad, shape);
  TAPSTREAM_CUDA_CHECK_LAUNCH("install_path_spectra_kernel");
}

void launch_copy_path_spectra(const PathUpdate* path, int paths, const float2* from, float2* to,
                              const MatrixMacShape& shape, cudaStream_t stream) {
  if (paths == 0) return;
  const dim3 grid(unsigned((paths + kTile - 1) / kTile),
                  unsigned((shape.bins + kTileRows - 1) / kTileRows), unsigned(shape.partitions));
  copy_path_spectra_kernel<<<grid, dim3(kTile, kTileRows), 0, stream>>>(path, paths, from, to,
                                                                        shape);
  TAPSTREAM_CUDA_CHECK_LAUNCH("copy_path_spectra_kernel");
}

void launch_add_fade_delta(const FadePath* fade, int count, const float2* delta, const float2* fdl,
                           int slots, const MatrixChunk* chunk, const MatrixMacShape& shape,
                           float2* y_old, cudaStream_t stream) {
  if (count == 0) return;
  const dim3 grid(unsigned(count), unsigned((shape.bins + kFadeThreads - 1) / kFadeThreads));
  add_fade_delta_kernel<<<grid, kFadeThreads, 0, stream>>>(fade, delta, fdl, slots, chunk, shape,
                                                           y_old);
  TAPSTREAM_CUDA_CHECK_LAUNCH("add_fade_delta_kernel");
}

}  // namespace tapstream::cuda

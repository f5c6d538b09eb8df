// One thread block per (window, channel); see fused_overlap_save.hpp. The
// window's transform, the real split, the fold and the inverse are the
// shared-memory FFT of shared_memory_fft.cuh; between split and fold the
// spectrum is multiplied by H in registers, so it never leaves the block.

#include <string>

#include "kernels/cuda_check.hpp"
#include "kernels/device/fused_overlap_save.hpp"
#include "kernels/device/shared_memory_fft.cuh"

namespace tapstream::cuda {
namespace {

using namespace shared_fft;

template <int M, int T>
__global__ void __launch_bounds__(T) fused_overlap_save_kernel(FusedOverlapSaveArgs a) {
  extern __shared__ float2 s[];
  constexpr int P = M;
  const std::size_t c = blockIdx.y;
  const std::size_t t = blockIdx.x;
  load_window<P, T>(s, a.in + c * a.in_stride, a.history + c * a.history_stride, t);
  fft_in_shared<M, T>(s);

  const float2* h = a.filter + c * a.filter_channel_stride;
  for (int k = int(threadIdx.x); k <= M / 2; k += T) {
    if (k == 0) {
      float x0, xp;
      split_dc(s[0], x0, xp);
      s[0] = fold_dc(x0 * __ldg(&h[0].x), xp * __ldg(&h[M].x));
      continue;
    }
    const int kk = M - k;
    const float2 w = split_twiddle<M>(k);
    float2 xk, xkk;
    split_pair(w, s[padded(k)], s[padded(kk)], xk, xkk);
    float2 zk, zkk;
    fold_pair(w, cmul(xk, __ldg(&h[k])), cmul(xkk, __ldg(&h[kk])), zk, zkk);
    s[padded(k)] = zk;
    s[padded(kk)] = zkk;
  }
  __syncthreads();
  fft_in_shared<M, T>(s);
  store_valid_outputs<P, T>(s, a.out + c * a.out_stride + t * P);
}

}  // namespace

bool fused_overlap_save_supports(std::size_t partition) {
  return shared_fft::supports(partition);
}

void prepare_fused_overlap_save(std::size_t partition) {
  for_partition(partition, [](auto size) {
    constexpr int M = decltype(size)::value;
    TAPSTREAM_CUDA_CHECK(cudaFuncSetAttribute(fused_overlap_save_kernel<M, threads_for<M>()>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              int(shared_bytes_for<M>())));
  });
}

void launch_fused_overlap_save(const FusedOverlapSaveArgs& args, cudaStream_t stream) {
  if (args.segments == 0 || args.channels == 0) return;
  for_partition(args.partition, [&](auto size) {
    constexpr int M = decltype(size)::value;
    const dim3 grid(unsigned(args.segments), unsigned(args.channels));
    fused_overlap_save_kernel<M, threads_for<M>()>
        <<<grid, threads_for<M>(), shared_bytes_for<M>(), stream>>>(args);
    TAPSTREAM_CUDA_CHECK_LAUNCH("fused_overlap_save_kernel");
  });
}

}  // namespace tapstream::cuda

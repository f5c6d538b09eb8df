#pragma once
// Batched one-dimensional real FFT plans (cuFFT) for the FFT path. The plans of
// one convolver run one after another on one stream, so they share a single
// work area instead of each allocating its own (cuFFT's default): the
// convolver sizes it once, from work_bytes(), before the first transform.

#include <cufft.h>
#include <cufftXt.h>

#include <cstddef>
#include <span>
#include <vector>

#include "kernels/cuda_check.hpp"
#include "kernels/cuda_resources.hpp"

namespace tapstream::cuda {

// A load or store callback (JIT LTO) linked into a plan's kernels: the symbol's
// name in `ltoir` (see kernels/device/fft_callbacks.hpp) and where it applies.
struct FftCallback {
  const char* symbol;
  cufftXtCallbackType type;
};

// A plan for `batch` transforms of `size` points, contiguous in both domains
// (real: `size` floats apart; complex: size / 2 + 1 bins apart), with no work
// area of its own until attach_work_area().
class RealFftPlan {
 public:
  RealFftPlan() = default;
  // type is CUFFT_R2C (forward) or CUFFT_C2R (inverse, unnormalised). With
  // callbacks, `caller_info` points to the device pointer they receive.
  RealFftPlan(std::size_t size, std::size_t batch, cufftType type,
              std::span<const FftCallback> callbacks = {}, const std::vector<char>* ltoir = nullptr,
              void** caller_info = nullptr) {
    long long n = static_cast<long long>(size);
    for (const FftCallback& callback : callbacks) {
      TAPSTREAM_CUFFT_CHECK(cufftXtSetJITCallback(plan_.get(), callback.symbol, ltoir->data(),
                                                  ltoir->size(), callback.type, caller_info));
    }
    TAPSTREAM_CUFFT_CHECK(cufftSetAutoAllocation(plan_.get(), 0));
    TAPSTREAM_CUFFT_CHECK(cufftMakePlanMany64(plan_.get(), 1, &n, nullptr, 1, 0, nullptr, 1, 0,
                                              type, static_cast<long long>(batch), &work_bytes_));
  }

  std::size_t work_bytes() const { return work_bytes_; }
  void attach_work_area(void* work) { TAPSTREAM_CUFFT_CHECK(cufftSetWorkArea(plan_.get(), work)); }

  // Enqueues the transform on `stream`; no host synchronisation.
  void forward(const float* in, float2* out, cudaStream_t stream) const {
    TAPSTREAM_CUFFT_CHECK(cufftSetStream(plan_.get(), stream));
    TAPSTREAM_CUFFT_CHECK(
        cufftExecR2C(plan_.get(), const_cast<float*>(in), reinterpret_cast<cufftComplex*>(out)));
  }
  // Note: cuFFT overwrites `in` (an out-of-place inverse real transform does).
  void inverse(float2* in, float* out, cudaStream_t stream) const {
    TAPSTREAM_CUFFT_CHECK(cufftSetStream(plan_.get(), stream));
    TAPSTREAM_CUFFT_CHECK(cufftExecC2R(plan_.get(), reinterpret_cast<cufftComplex*>(in), out));
  }

 private:
  FftPlan plan_;
  std::size_t work_bytes_ = 0;
};

}  // namespace tapstream::cuda

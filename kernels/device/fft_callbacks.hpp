#pragma once
// Fused overlap-save through cuFFT's link-time-optimised (JIT LTO) callbacks.
// The forward FFT of a run of whole segments loads its 2P-sample windows
// straight from the caller's input (and the stage's previous segment), the
// inverse FFT loads sum_j X_{s-j} H_j straight from the delay line and the
// filter spectra (the multiply-accumulate), and stores only the valid half of
// each window straight into the caller's output. That removes the window,
// multiply-accumulate and output passes through device memory of the plain path
// (kernels/device/overlap_save_windows, kernels/device/spectral_mac): about 26 instead of 77
// bytes per output sample.
//
// The callbacks are compiled once per process with NVRTC into LTO IR, which
// cuFFT links into its kernels when a plan is made. Their parameters live in
// one device struct (the plans' caller info), rewritten in stream order before
// each run by a one-thread kernel, since the plans fix the pointer at creation.

#include <cuda_runtime.h>
#include <cufftXt.h>

#include <cstdint>
#include <vector>

namespace tapstream::cuda {

// Identical field for field to the struct in the callbacks' source (all 8-byte
// fields, so both layouts agree).
struct FusedParams {
  const float* in;  // window loads: in[c * in_stride + frame]
  unsigned long long in_stride;
  const float* stage;          // [C][2P]: the segment before the run
  const float* window_base;    // the forward FFTs' (unread) input buffer, for batch indices
  const float2* product_base;  // the inverse FFTs' (unread) input buffer, for batch indices
  const float* time_base;      // the inverse FFTs' (unwritten) output buffer, for batch indices
  float* out;                  // output stores: out[c * out_stride + frame]
  unsigned long long out_stride;
  const float2* new_spectra;  // [S][C][bins]: the forward FFTs' output
  float2* ring;               // the delay line, as in SpectralMacArgs
  unsigned long long ring_slots;
  const float2* filter;
  unsigned long long filter_partition_stride;
  unsigned long long filter_channel_stride;
  long long first_segment;
  unsigned long long store_from;
  unsigned long long partitions;
  unsigned long long channels;
  unsigned long long partition;
  unsigned long long bins;
};

inline constexpr const char* kLoadWindowSymbol = "tapstream_load_window";
inline constexpr const char* kLoadProductSymbol = "tapstream_load_product";
inline constexpr const char* kStoreOutputSymbol = "tapstream_store_output";

// The callbacks' LTO IR for the current device; compiled on first use.
// Throws std::runtime_error naming the NVRTC step (and its log) on failure.
const std::vector<char>& fused_callbacks_ltoir();

// *device = value, in stream order.
void launch_set_fused_params(FusedParams* device, const FusedParams& value, cudaStream_t stream);

}  // namespace tapstream::cuda

#pragma once
// How kernels see a block's samples.

namespace tapstream::cuda {

// A strided view of a block's samples: sample (c, f) at
// data[c * channel_stride + f * frame_stride]. Interleaved and planar layouts are
// both such views, so kernels (de)interleave for free.
struct SampleView {
  const float* data = nullptr;
  long long channel_stride = 0;
  long long frame_stride = 1;
};

}  // namespace tapstream::cuda

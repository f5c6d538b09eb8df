#pragma once
// The fused complex multiply-accumulate of partitioned overlap-save: for each
// output segment, each channel and each bin, the sum over filter partitions j
// of X(segment - j) * H(j), accumulated in registers in one pass, each input
// spectrum and filter bin read once per output (float2, coalesced over bins).
//
// Spectra X(n) of the input windows come from two places: the segments
// transformed in this step (`new_spectra`, n >= first_segment) and the
// frequency-domain delay line, a ring of `ring_slots` older spectra (slot
// n mod ring_slots). The kernel also stores the new spectra that later steps
// need into the ring; the ring holds partitions - 1 + (most segments per step)
// slots, so no slot it writes is one that another output of the same launch
// still reads.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tapstream::cuda {

struct SpectralMacArgs {
  const float2* new_spectra = nullptr;  // [segments][channels][bins]; null in tail mode
  float2* ring = nullptr;               // [ring_slots][channels][bins]
  std::size_t ring_slots = 0;
  const float2* filter = nullptr;           // partition j, channel c at j * filter_partition_stride
  std::size_t filter_partition_stride = 0;  //   + c * filter_channel_stride
  std::size_t filter_channel_stride = 0;    // 0 when one filter is shared by every channel
  const float2* addend = nullptr;           // [channels][bins] added to every output, or null
  float2* out = nullptr;                    // [segments][channels][bins]
  std::int64_t first_segment = 0;           // stream index of the first output segment
  std::size_t segments = 0;                 // output segments
  std::size_t channels = 0;
  std::size_t bins = 0;
  std::size_t first_partition = 0;  // sum over partitions [first_partition, end_partition)
  std::size_t end_partition = 0;
  // new_spectra[t] for t >= store_from goes into the ring (segments: store none).
  std::size_t store_from = 0;
};

void launch_spectral_mac(const SpectralMacArgs& args, cudaStream_t stream);

}  // namespace tapstream::cuda

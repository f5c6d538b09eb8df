#pragma once
// Uniformly partitioned overlap-save for runs of whole segments with K > 1
// filter partitions, in three kernels built on the shared-memory FFT of the
// single-partition kernel (shared_memory_fft.cuh):
//   1. forward: one block per (segment, channel) reads the 2P-sample window
//      [previous segment | segment], transforms it in shared memory and writes
//      its spectrum X (P + 1 bins);
//   2. sliding MAC: Y_t = sum_{j<K} X_{t-j} H_j is, per (bin, channel), a
//      length-K convolution along the segments; one thread per (bin, channel,
//      chunk of consecutive segments) keeps H_0..H_{K-1} and the last K
//      spectra in registers, so each X and each H is read from device memory
//      once per thread instead of K times per output (spectral_mac.cu);
//   3. inverse: one block per (segment, channel) folds Y, transforms it in
//      shared memory and stores the P valid outputs.
// Spectra of segments before the run come from the delay-line ring (slot n mod
// ring_slots, as spectral_mac.hpp), and the run's last K - 1 spectra are
// stored into it, so later calls through the cuFFT path stay exact.
//
// Device memory per output sample, predicted (8 ch x 2^22 frames, 131072 taps,
// P = 8192, K = 16, 8 chunks of 64 segments): forward 4 read (+4 where the L2
// misses the previous segment: the windows overlap by half) and 8 written (X);
// MAC 8 x (1 + 15 / 64) = 9.9 read (X, with each chunk's warm-up of K - 1
// spectra), 2 read (H: 8 chunks x 16 x 8 ch x 8193 bins x 8 B = 67 MB) and 8
// written (Y); inverse 8 read, 4 written: about 44 bytes (48 with the L2
// misses), against about 124 for the cuFFT passes with 4 partitions of 32768.
// Measured: P = 4096, K = 32 is faster than that shape (the shorter transforms
// leave room for more blocks per SM; they, not the bytes, bound these
// kernels), and both are faster than the cuFFT passes (docs/performance.md,
// "Offline throughput").

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tapstream::cuda {

struct MultiPartitionArgs {
  // Segment t of channel c (t = 0..segments-1) starts at in + c * in_stride + t * P;
  // the segment before segment 0 at history + c * history_stride.
  const float* in = nullptr;
  std::size_t in_stride = 0;
  const float* history = nullptr;
  std::size_t history_stride = 0;
  // Scratch of segments x channels x (P + 1) float2 each: the run's spectra X
  // and products Y, [segment][channel][bin].
  float2* spectra = nullptr;
  float2* products = nullptr;
  // The frequency-domain delay line, [ring_slots][channels][P + 1]; see spectral_mac.hpp.
  float2* ring = nullptr;
  std::size_t ring_slots = 0;
  // Partition j, channel c at filter + j * filter_partition_stride + c * filter_channel_stride
  // (channel stride 0 for one shared filter); the inverse's 1/(2P) folded in.
  const float2* filter = nullptr;
  std::size_t filter_partition_stride = 0;
  std::size_t filter_channel_stride = 0;
  std::int64_t first_segment = 0;  // stream index of segment 0 of the run
  std::size_t store_from = 0;      // spectra of segments t >= store_from go into the ring
  // Output segment t of channel c at out + c * out_stride + t * P.
  float* out = nullptr;
  std::size_t out_stride = 0;
  std::size_t channels = 0;
  std::size_t partition = 0;   // P
  std::size_t partitions = 0;  // K
  std::size_t segments = 0;
  int multiprocessors = 1;  // the device's, to size the MAC's grid
};

// Whether the kernels are built for P (256..16384, powers of two) and K
// (2..16 and 32).
bool multi_partition_overlap_save_supports(std::size_t partition, std::size_t partitions);

// Makes the kernels for `partition` ready to launch on the current device
// (raises their dynamic shared-memory limit). Call once, off the per-block
// path; throws when the device cannot run them.
void prepare_multi_partition_overlap_save(std::size_t partition);

// Enqueues the three kernels on `stream`. The history is read by the first
// kernel only, so the caller may overwrite it after this returns (stream order).
void launch_multi_partition_overlap_save(const MultiPartitionArgs& args, cudaStream_t stream);

}  // namespace tapstream::cuda

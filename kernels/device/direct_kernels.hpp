#pragma once
// Direct-form FIR kernels of the CUDA engine and their typed launch wrappers.
//
// Every variant computes, for each channel c and frame f of a block,
//   y(c, f) = sum_{k < taps} h_c[k] * x(c, f - k),
// where x(c, j) for j >= 0 is the block's input and for j < 0 the channel's
// history (the input samples before the block, kept on the device). The variants
// differ only in where taps and samples are read from (the teaching variants of
// PMPP chapter 7 live in kernels/teaching/, kept for the benchmark and for
// teaching); all must pass the same exactness tests.

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "kernels/device/sample_view.hpp"

namespace tapstream::cuda {

enum class DirectKernel {
  naive,        // one thread per output, taps and samples from global memory
  constant,     // as naive, taps from __constant__ memory (broadcast to the warp)
  shared_tile,  // input tile plus halo staged in shared memory, tap chunk by tap chunk
  cached_tile,  // tile in shared memory, halo read through the read-only cache
  tuned,        // shared tiles, 8 outputs per thread in registers, float4 loads,
                // taps split over thread groups when a block has few outputs
};

// "auto" (= tuned) or one of the names above; throws std::invalid_argument naming it.
DirectKernel parse_direct_kernel(const std::string& name);
const char* direct_kernel_name(DirectKernel kernel);
std::vector<std::string> direct_kernel_names();  // "auto" first

// Two __constant__ banks of this many floats each (64 KiB in all): a new filter
// set goes to the bank that no in-flight kernel reads.
inline constexpr std::size_t kConstantBankFloats = 8192;

// Taps are stored with each channel's filter zero-padded to a multiple of this.
inline constexpr int kTapPadding = 8;

struct DirectArgs {
  SampleView in;
  // History: channel c's sample j (-history_len <= j < 0) at
  // history[c * history_stride + history_end + j]; history_end and
  // history_stride are multiples of 4 so that float4 loads stay aligned.
  const float* history = nullptr;
  long long history_stride = 0;
  int history_end = 0;
  int history_len = 0;
  // Output: sample (c, f) at out[c * out_channel_stride + f * out_frame_stride].
  float* out = nullptr;
  long long out_channel_stride = 0;
  long long out_frame_stride = 1;
  int channels = 0;
  int frames = 0;
  // Filter: `taps` taps, stored padded to `taps_padded`; channel c's taps start at
  // c * taps_channel_stride (0 when one filter is shared) in global_taps and, when
  // constant_bank >= 0, in that __constant__ bank too.
  int taps = 0;
  int taps_padded = 0;
  long long taps_channel_stride = 0;
  const float* global_taps = nullptr;
  int constant_bank = -1;
  // Crossfade (second pass): out = out * (1 - w) + y * w with
  // w = (blend_offset + f + 1) / blend_frames; off when blend is false.
  bool blend = false;
  long long blend_offset = 0;
  long long blend_frames = 1;
  int multiprocessors = 1;   // used to size the tuned kernel's grid
  bool stream_tiles = true;  // whether stream_tuned_kernel may take the block
  // When set, the history that follows this block is written there too (the
  // carry; see launch_carry_history): fused into the tuned kernel's launch (one
  // launch less per block), a separate launch after the other variants.
  float* carry_to = nullptr;
};

void launch_direct(DirectKernel kernel, const DirectArgs& args, cudaStream_t stream);

// A persistent tuned kernel for small calls: launched once, it serves call
// after call without a launch each (kernels/convolvers/persistent_direct.hpp is its host
// side). The call's input and output are mapped host memory; the host writes
// the input, then the doorbell; the kernel answers in `done`.
struct PersistentControl {
  // Host writes: call sequence number | frames << 32 | planar << 62 | history index << 63.
  unsigned long long doorbell = 0;
  unsigned int stop = 0;  // host writes: nonzero makes the kernel return
  // Kernel writes: sequence number of the last call served; on a line of its
  // own, apart from the words the kernel polls.
  alignas(128) unsigned int done = 0;
  // Kernel writes, when PersistentArgs::trace: %globaltimer (ns) of the last
  // call: block 0 saw the doorbell, staged its input, computed, was counted;
  // the last block wrote done.
  alignas(128) unsigned long long trace[5] = {};
};

struct PersistentArgs {
  // in.data / out: the mapped staging (device pointers, either layout); frames:
  // the most frames a call may have; history and carry_to unused (below); taps
  // from global_taps.
  DirectArgs direct;
  float* history[2] = {nullptr, nullptr};
  PersistentControl* control = nullptr;  // device pointer of the mapped control block
  // 4 device words, zero at launch: blocks done with the call, blocks done
  // with its carry, and (words 2-3) the doorbell as block 0 relays it.
  unsigned int* counters = nullptr;
  unsigned int served = 0;        // sequence number already served at launch
  long long idle_timeout_ns = 0;  // returns after this long without a call
  bool trace = false;             // fill PersistentControl::trace
  // Staging loads: 2 plain (the fence after the doorbell makes them see the
  // input), 0 ld.cv, 1 ld.relaxed.sys: both measured slower, the compute after
  // them too (docs/history.md, "Small calls: the persistent kernel").
  int input_loads = 2;
};

struct PersistentShape {
  int blocks = 0;  // 0: the kernel does not fit (too many blocks or shared memory)
  int tiles = 0, P = 0, K = 0;
  std::size_t shared_bytes = 0;
};

// The persistent kernel's grid for calls of up to args.frames frames: the
// tuned kernel's tiles, at most max_blocks of them.
PersistentShape persistent_tuned_shape(const DirectArgs& args, int max_blocks);
void launch_persistent_tuned(const PersistentArgs& args, const PersistentShape& shape,
                             cudaStream_t stream);

// Writes the history that follows a block of `frames` frames: the last
// history_len samples of (old history, block input), into new_history (same
// layout as the old one, a different buffer).
void launch_carry_history(const SampleView& in, const float* old_history, float* new_history,
                          long long history_stride, int history_end, int history_len, int channels,
                          int frames, cudaStream_t stream);

// dst(c, f) = src(c, f) for every channel and frame: (de)interleaving on the device.
void launch_copy_samples(const SampleView& src, float* dst, long long dst_channel_stride,
                         long long dst_frame_stride, int channels, int frames, cudaStream_t stream);

// Copies `count` floats of pinned host memory into __constant__ bank `bank`
// (asynchronously on `stream`).
void upload_constant_bank(int bank, const float* host_taps, std::size_t count, cudaStream_t stream);

}  // namespace tapstream::cuda

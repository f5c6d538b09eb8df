#pragma once
// The one interface of the CUDA engine's filtering paths (the layer between
// the engine's transport and the kernels, as CUB's dispatch layer sits between
// its device entry points and its kernels): the direct form
// (direct_convolver.hpp), the uniformly partitioned FFT (fft_convolver.hpp)
// and the non-uniformly partitioned streaming path (partitioned_convolver.hpp).
//
// A convolver is prepared for a filter bank, a channel count, a filter length
// and a largest block when it is constructed (each path's constructor), and
// then filters the stream block by block, every operation enqueued on the
// caller's stream without host synchronisation unless it says otherwise.
// Blocks must be issued in stream order (block k before block k + 1); the
// caller orders its streams so that block k's work precedes block k + 1's.
//
// The CUDA engine (kernels/cuda_engine.cu) keeps the transport (staging,
// zero-copy, streams, events) and holds one convolver, picked by the cost
// model (convolver_choice.hpp).

#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <string>

#include "dsp/model/engine.hpp"
#include "dsp/model/filter_bank.hpp"
#include "kernels/cuda_resources.hpp"
#include "kernels/device/sample_view.hpp"

namespace tapstream::cuda {

// A block, or a piece of one: `frames` frames of every channel, sample (c, f)
// read from `in` and written to out[c * out_channel_stride + f * out_frame_stride]
// (device memory, or mapped host memory where the convolver takes any view).
// A call may be cut into pieces: this piece is frames
// [call_offset, call_offset + frames) of a call of call_frames (only a
// crossfade after a swap looks at the call).
struct DeviceBlock {
  SampleView in;
  float* out = nullptr;
  long long out_channel_stride = 0;
  long long out_frame_stride = 1;
  std::size_t frames = 0;
  std::size_t call_offset = 0;
  std::size_t call_frames = 0;
  // Non-null: an event the caller will poll for the block's output. A
  // convolver that can record it inside its own work (recorded_output_done())
  // lets the caller skip its own record.
  cudaEvent_t output_done = nullptr;
};

// A planar block of device memory, a whole call: channel c's input at
// in + c * in_stride, its output at out + c * out_stride.
inline DeviceBlock planar_block(const float* in, std::size_t in_stride, float* out,
                                std::size_t out_stride, std::size_t frames) {
  DeviceBlock b;
  b.in = {in, (long long)in_stride, 1};
  b.out = out;
  b.out_channel_stride = (long long)out_stride;
  b.out_frame_stride = 1;
  b.frames = frames;
  b.call_offset = 0;
  b.call_frames = frames;
  return b;
}

class DeviceConvolver {
 public:
  virtual ~DeviceConvolver() = default;

  // True when process() takes any SampleView of device or mapped host memory
  // (interleaved, planar); false when it takes planar device memory only
  // (frame strides of 1), and the caller stages the rest.
  virtual bool takes_any_view() const = 0;

  // Filters `block` on `stream` (1..max_block_frames frames).
  virtual void process(const DeviceBlock& block, cudaStream_t stream) = 0;

  // True when the last process() recorded its block's output_done (else the
  // caller records it after process()).
  virtual bool recorded_output_done() const { return false; }

  // After the last piece of a call: a swap that call has taken is complete.
  virtual void end_call() {}

  // New filters (the bank's channels and at most the convolver's taps), taken
  // at the next call; with crossfade, that call's output fades linearly from
  // the old filters' to the new's. May block the calling thread (the FFT path
  // transforms the filters and synchronises the device); call it off the
  // per-block path, after the caller has joined its streams' work into the
  // stream the convolver was built to order its uploads on.
  virtual void set_filters(const FilterBank& bank, bool crossfade) = 0;

  // New filters for some channels (Engine::set_channel_filters: `path` is
  // the channel; checked by the caller), taken at the next call as
  // set_filters() would take the bank with those channels replaced, at a
  // cost of those channels only. Called as set_filters() is. False, having
  // done nothing, where the path cannot (the caller then hands over a
  // whole bank): by default.
  virtual bool set_channel_filters(std::span<const PathTaps> /*channels*/, bool /*crossfade*/) {
    return false;
  }

  // Forgets the stream's history (as if it started again); ordered after the
  // work enqueued on `stream`.
  virtual void reset(cudaStream_t stream) = 0;

  // Waits for the work the convolver enqueued on streams of its own (none for
  // most paths); throws naming the call on a device error.
  virtual void synchronize() {}

  // A resident kernel for small calls (the direct path's persistent kernel):
  // the call's input and output are the caller's mapped staging, handed over
  // at construction. resident_ready() starts it (after the work recorded in
  // `after`) unless it runs already, and is false when there is none or it
  // cannot take calls now; resident_call() filters one call of `frames`
  // frames and waits for its output, false when the kernel did not answer
  // (the call is not done; from then on the caller launches per call).
  // quiesce() returns the kernel before any other work touches the
  // convolver's state.
  virtual bool resident_ready(const Event& after) {
    (void)after;
    return false;
  }
  virtual bool resident_call(std::size_t frames, bool planar) {
    (void)frames;
    (void)planar;
    return false;
  }
  virtual void quiesce() {}
  // What serves small calls here ("" when nothing resident would).
  virtual std::string resident_description() const { return {}; }

  // Algorithm::direct or Algorithm::fft; the direct-form kernel variant
  // ("" for the FFT paths); where the taps live ("constant", "global", "fft").
  virtual Algorithm algorithm() const = 0;
  virtual std::string kernel() const { return {}; }
  virtual std::string taps_memory() const { return "fft"; }
  virtual std::string description() const = 0;
};

}  // namespace tapstream::cuda

// Non-uniformly partitioned convolution (see partitioned_convolver.hpp).
//
// Stream frames are counted from 0 on the host (position); samples, spectra
// and rings stay on the device. Ordering between the caller's stream (the
// "main" stream: head kernels) and each tail segment's stream:
// - a tail step reads the input ring up to the frame its block completes, so
//   the segment's stream waits for the call that wrote it (input_ready);
// - a call reads (and zeroes) the output ring for its frames, so the main
//   stream waits, per segment, for the last step whose output starts inside
//   the call; by the plan's slack (>= head size >= any call) that step was
//   launched in an earlier call, so the wait never points at work not yet
//   enqueued; segments add into the output ring with atomics, since their
//   steps may run at once;
// - uploads, swaps and resets run on the tail stream after joining every
//   segment's stream (they share the segments' scratch and transforms), and
//   the segments' streams wait for them;
// - rings are longer than the last segment's end plus one call, so a tail step
//   never writes a slot the main stream has yet to read for an earlier frame,
//   and the input a step reads is never overwritten before the step is done
//   (the main stream waits for that step before it gets that far).

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "dsp/model/channel_work.hpp"
#include "kernels/convolvers/partitioned_convolver.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/cuda_resources.hpp"
#include "kernels/cufft_plan.hpp"
#include "kernels/device/partitioned_kernels.hpp"

namespace tapstream::cuda {

namespace {

// Fitted to bench/cuda_partitioned_bench's step timings (docs/performance.md,
// "Cost models"): a tail step's device time is
//   kStepFixedNs + channels x P x (kTransformNsPerSample + count x kMacNsPerSample)
// (x kLongTransformFactor for 2P >= 65536-point transforms); fitted to the
// steps of >= 80 us over 1..4096 channels and P = 64..65536 within 15 %.
// kStepFixedNs is the step as one graph replay of 7 small kernels (un-graphed,
// the host's launches alone took longer than a small step's device work).
constexpr double kStepFixedNs = 12000.0;
constexpr double kTransformNsPerSample = 0.028;
constexpr double kMacNsPerSample = 0.0062;
constexpr double kLongTransformFactor = 1.3;
// The head kernel: a launch and its mapped reads, then multiply-adds at
// kHeadMacsPerNs once it has kHeadBlocksForFullRate blocks of 128 frames
// (the measured points: docs/performance.md, "Cost models"); fewer blocks get
// a proportional share.
constexpr double kHeadLaunchNs = 5000.0;
constexpr double kHeadMacsPerNs = 5000.0;
constexpr double kHeadBlocksForFullRate = 264.0;
// Tail partitions no longer than this (cuFFT 2P-point transforms).
constexpr std::size_t kMaxTailPartition = 65536;
// Calls as one graph: a call whose steps are due replays one captured graph
// (head, output event, the due steps as parallel branches) instead of a
// launch, events and a graph launch per step. The next call's graph starts
// only once this one's steps are done, so the mode is for banks whose longest
// step (the cost model) is far shorter than any period: 50 us is 4 % of a
// 64-frame period at 48 kHz and 60 % of one at 768 kHz.
constexpr double kGraphCallStepNs = 50000.0;
// Graphs kept (by view, frames, steps due, filters): a device's calls repeat
// one shape, so one per step pattern (segments + 1) in practice.
constexpr std::size_t kMaxCallGraphs = 64;

}  // namespace

double GpuPartitionCosts::head_ns(std::size_t block_frames, std::size_t partition_frames,
                                  std::size_t count) const {
  const double blocks = double(channels_) * double((block_frames + 127) / 128);
  const double rate = kHeadMacsPerNs * std::min(1.0, blocks / kHeadBlocksForFullRate);
  return kHeadLaunchNs +
         double(channels_) * double(block_frames) * double(partition_frames * count) / rate;
}

double GpuPartitionCosts::tail_step_ns(std::size_t P, std::size_t count) const {
  const double per_sample = kTransformNsPerSample + double(count) * kMacNsPerSample;
  const double factor = 2 * P >= 65536 ? kLongTransformFactor : 1.0;
  return kStepFixedNs + double(channels_) * double(P) * per_sample * factor;
}

std::size_t GpuPartitionCosts::min_slack_frames(std::size_t partition_frames,
                                                std::size_t head_frames) const {
  return std::max(partition_frames, head_frames);
}

PartitionPlan plan_gpu_partitions(std::size_t channels, std::size_t max_block_frames,
                                  std::size_t taps) {
  const GpuPartitionCosts costs(channels);
  return plan_partitions(std::bit_ceil(std::max<std::size_t>(max_block_frames, 1)), taps, costs,
                         kMaxTailPartition);
}

namespace {

// What one tail segment's steps read and write.
struct StepBuffers {
  std::size_t channels = 0, P = 0, count = 0, first_tap = 0, slots = 0;
  float* in_ring = nullptr;
  std::int64_t ring_len = 0;
  float* window = nullptr;
  float2* current = nullptr;     // the forward transform's output, channels x (P + 1)
  float2* delay_line = nullptr;  // the segment's slots x channels x (P + 1)
  float2* acc = nullptr;
  const RealFftPlan* forward = nullptr;
  const RealFftPlan* inverse = nullptr;
};

// Step j's input: the 2P-frame window ending at stream frame (j + 1) P,
// transformed into `current` (the multiply-accumulate stores it into its
// delay-line slot, j mod slots).
void enqueue_transform(const StepBuffers& b, StepIndex j, cudaStream_t t) {
  const std::int64_t P = std::int64_t(b.P);
  launch_gather_windows(b.in_ring, b.ring_len, -P, j, P, b.window, 2 * b.P, b.channels, t);
  b.forward->forward(b.window, b.current, t);
}

// Step j's output with the filter spectra `spectra` (the segment's): the
// multiply-accumulate (X_j from `current` when `with_current`, else all from
// the delay line), inverse transform and ring update into out_ring; frames
// before min_frame are left alone.
// With `list` (device memory, `rows` channels): those channels only, packed
// in acc and the window, through `inverse` (a plan of at least `rows`).
void enqueue_finish(const StepBuffers& b, StepIndex j, bool with_current, const float2* spectra,
                    float* out_ring, std::int64_t min_frame, cudaStream_t t,
                    const int* list = nullptr, std::size_t rows = 0,
                    const RealFftPlan* inverse = nullptr) {
  TailMacArgs m;
  m.delay_line = b.delay_line;
  m.slots = b.slots;
  m.step = j;
  m.current = with_current ? b.current : nullptr;
  m.spectra = spectra;
  m.count = b.count;
  m.channels = b.channels;
  m.bins = b.P + 1;
  m.acc = b.acc;
  m.channel_list = list;
  m.rows = rows;
  launch_tail_mac(m, t);
  (inverse != nullptr ? inverse : b.inverse)->inverse(b.acc, b.window, t);
  launch_accumulate_tail(b.window + b.P, 2 * b.P, b.P, list != nullptr ? rows : b.channels,
                         out_ring, b.ring_len, std::int64_t(b.first_tap), j, std::int64_t(b.P),
                         min_frame, t, list);
}

// A step as one graph: the transform, the multiply-accumulate, the ring
// update and the counter's advance, the step index read from *counter, so
// that a step costs the host one graph launch instead of seven launches (two
// of them cuFFT's, whose host time exceeded small steps' device time).
GraphExec capture_step(const StepBuffers& b, const float2* spectra, float* out_ring,
                       std::int64_t* counter, cudaStream_t t) {
  const StepIndex j{0, counter};
  TAPSTREAM_CUDA_CHECK(cudaStreamBeginCapture(t, cudaStreamCaptureModeThreadLocal));
  enqueue_transform(b, j, t);
  enqueue_finish(b, j, true, spectra, out_ring, 0, t);
  launch_advance_step(counter, t);
  return GraphExec::end_capture(t);
}

}  // namespace

struct PartitionedConvolver::State {
  // A tail segment: its own stream (smaller partitions more urgent), scratch,
  // transforms and step counter, so that a long step never holds a short one
  // up; each step replays a graph captured once per filter bank.
  struct Segment {
    std::size_t P = 0, count = 0, first_tap = 0;
    std::size_t slots = 0;           // delay-line depth
    std::size_t delay_offset = 0;    // float2 offset of its delay line
    std::size_t spectra_offset = 0;  // float2 offset of its filter spectra
    std::int64_t next_step = 0;      // steps taken (blocks of P completed)
    Stream stream;
    RealFftPlan forward, inverse;  // 2P points, batch channels
    // The filter spectra's transforms for uploads: `filter_batch` partitions of
    // every channel a transform (and the rest of `count`), out of the shared
    // filter_windows: a few calls per segment instead of two per partition.
    std::size_t filter_batch = 0;
    RealFftPlan filter_forward, filter_forward_rest;
    DeviceBuffer<char> fft_work;
    DeviceBuffer<float> window;
    DeviceBuffer<float2> current, acc;
    GraphExec step_graph[2][2];  // by filter set and output ring
    // Per-channel updates' transforms over a few of the channels (batch:
    // partitions x packed rows), made at the first update that needs them.
    struct CachedPlan {
      RealFftPlan plan;
      DeviceBuffer<char> work;
    };
    std::map<std::size_t, CachedPlan> packed_forward, packed_inverse;
    Event mark;
    // Steps launched and not yet waited for, in order (a ring).
    std::vector<Event> done;
    std::vector<std::int64_t> output_start;
    std::size_t pending_first = 0, pending_count = 0;

    explicit Segment(int priority) : stream(priority) {}
  };

  std::size_t channels = 0, max_taps = 0, max_block = 0, head_taps = 0;
  std::size_t taps_stride = 0;  // raw taps per channel row (>= the plan's last tap)
  PartitionPlan plan;
  std::vector<std::unique_ptr<Segment>> segments;
  std::int64_t ring_len = 0;

  Stream tail;  // uploads, swaps and resets, joined with every segment's stream
  DeviceBuffer<float> in_ring;
  DeviceBuffer<float> out_ring[2];
  int ring = 0;  // the output ring the current filters' tail adds into
  DeviceBuffer<float2> delay_line;
  DeviceBuffer<float2> spectra[2];
  DeviceBuffer<float> raw_taps[2];
  DeviceBuffer<std::int64_t> step_counters;  // one per segment
  int bank = 0;                              // the filters in use
  PinnedBuffer<float> staging;
  Event staging_free;
  DeviceBuffer<float> filter_windows;  // the uploads' zero-padded partitions
  DeviceBuffer<char> filter_fft_work;

  std::int64_t position = 0;
  // What the next call takes: nothing, a whole bank (set_filters) or the
  // channels of per-channel updates (set_channel_filters), in the spare set.
  enum class Pending { none, whole, channels };
  Pending pending = Pending::none;
  bool swap_crossfade = false;
  bool fading = false;                        // the current call is a swap's crossfade
  const unsigned char* fade_flags = nullptr;  // the call's fading channels (null: all)
  int old_bank = 0;

  // Per-channel updates (see the top of the header). `changed`: the pending
  // update's channels, each once (`is_changed`), their list on the device
  // in `changed_list`; `stale`: the channels where the spare set lags the
  // running one (all of them while `spare_stale_all`, after a whole swap
  // and at first); `faded`: the channels whose flags the last update's
  // crossfade set (`fading_list` on the device).
  std::vector<int> changed, stale;
  std::vector<char> is_changed;
  bool spare_stale_all = true;
  std::size_t faded = 0;
  DeviceBuffer<int> changed_list, fading_list, update_list, stale_list;
  DeviceBuffer<unsigned char> channel_flags;
  PinnedBuffer<int> list_staging;       // changed, this update's, stale: 3 x channels
  DeviceBuffer<float> update_taps;      // the update's rows, packed (taps_stride each)
  DeviceBuffer<float2> update_spectra;  // one batch of their partitions' spectra

  Event input_ready, main_mark, tail_mark;
  cudaStream_t last_main = nullptr;

  // Calls as one graph (see kGraphCallStepNs).
  struct CallGraph {
    const float* in = nullptr;
    long long in_cs = 0, in_fs = 0;
    float* out = nullptr;
    long long out_cs = 0, out_fs = 0;
    std::size_t frames = 0;
    std::uint64_t due = 0;  // bit i: segment i steps in the call
    int bank = 0, ring = 0;
    cudaEvent_t done = nullptr;
    GraphExec exec;
  };
  bool graph_calls = false;
  std::vector<CallGraph> call_graphs;
  DeviceBuffer<std::int64_t> frame_counter;  // the stream position the graphs' head reads
  bool frame_counter_current = false;        // equals `position` on the device
  bool recorded_done = false;                // by the last process()
  Stream capture_stream;
  std::vector<Stream> branch_streams;  // one per segment, for captures only
  Event capture_fork;
  std::vector<Event> capture_join;

  State(const FilterBank& bank_in, std::size_t max_taps_in, std::size_t max_block_in,
        PartitionPlan plan_in)
      : channels(bank_in.channels()),
        max_taps(max_taps_in),
        max_block(max_block_in),
        plan(std::move(plan_in)),
        tail(lowest_priority()) {
    plan.validate();
    if (plan.head_frames < max_block)
      throw std::invalid_argument("partitioned convolver: plan head " +
                                  std::to_string(plan.head_frames) + " is below the largest call " +
                                  std::to_string(max_block));
    if (plan.taps < max_taps)
      throw std::invalid_argument("partitioned convolver: plan covers " +
                                  std::to_string(plan.taps) + " taps, the engine holds " +
                                  std::to_string(max_taps));
    const PartitionSegment& head = plan.segments.front();
    head_taps = head.end_tap();
    const std::size_t end_tap = plan.segments.back().end_tap();
    taps_stride = end_tap;
    ring_len = std::int64_t(std::bit_ceil(end_tap + max_block + 1));

    int least = 0, greatest = 0;
    TAPSTREAM_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    std::size_t delay_total = 0, spectra_total = 0;
    for (std::size_t i = 1; i < plan.segments.size(); ++i) {
      const PartitionSegment& p = plan.segments[i];
      // The engine's streams have the greatest priority; the shortest tail
      // partitions (the nearest deadlines) the next, down to the least.
      auto s = std::make_unique<Segment>(std::min(least, greatest + int(i)));
      s->P = p.partition_frames;
      s->count = p.count;
      s->first_tap = p.first_tap;
      // A swap recomputes the steps whose output is still ahead: up to
      // first_tap / P + 1 of them, each reading count spectra back.
      s->slots = s->count + s->first_tap / s->P + 2;
      const std::size_t bins = s->P + 1;
      s->delay_offset = delay_total;
      delay_total += s->slots * channels * bins;
      s->spectra_offset = spectra_total;
      spectra_total += s->count * channels * bins;
      s->forward = RealFftPlan(2 * s->P, channels, CUFFT_R2C);
      s->inverse = RealFftPlan(2 * s->P, channels, CUFFT_C2R);
      s->fft_work = DeviceBuffer<char>(
          std::max<std::size_t>({s->forward.work_bytes(), s->inverse.work_bytes(), 1}));
      s->forward.attach_work_area(s->fft_work.get());
      s->inverse.attach_work_area(s->fft_work.get());
      s->window = DeviceBuffer<float>(channels * 2 * s->P);
      s->current = DeviceBuffer<float2>(channels * bins);
      s->acc = DeviceBuffer<float2>(channels * bins);
      const std::size_t most_pending = s->first_tap / s->P + 3;
      s->done.resize(most_pending);
      s->output_start.resize(most_pending);
      segments.push_back(std::move(s));
    }

    const std::size_t ring_samples = channels * std::size_t(ring_len);
    in_ring = DeviceBuffer<float>(ring_samples);
    for (auto& r : out_ring) r = DeviceBuffer<float>(ring_samples);
    delay_line = DeviceBuffer<float2>(delay_total);
    for (auto& s : spectra) s = DeviceBuffer<float2>(spectra_total);
    for (auto& t : raw_taps) t = DeviceBuffer<float>(channels * taps_stride);
    step_counters = DeviceBuffer<std::int64_t>(std::max<std::size_t>(segments.size(), 1));
    staging = PinnedBuffer<float>(channels * taps_stride);
    is_changed.assign(channels, 0);
    prepare_filter_transforms();

    for (std::size_t i = 0; i < segments.size(); ++i) capture_steps(i);
    const GpuPartitionCosts costs(channels);
    graph_calls = segments.size() < 64;
    for (const auto& sp : segments)
      graph_calls = graph_calls && costs.tail_step_ns(sp->P, sp->count) <= kGraphCallStepNs;
    frame_counter = DeviceBuffer<std::int64_t>(1);
    for (std::size_t i = 0; graph_calls && i < segments.size(); ++i) {
      branch_streams.emplace_back(0);
      capture_join.emplace_back();
    }
    clear(tail.get());
    upload(bank_in, 0);
    bank = 0;
    synchronize_all();
  }

  ~State() {
    for (auto& s : segments) cudaStreamSynchronize(s->stream.get());
    cudaStreamSynchronize(tail.get());
  }

  static int lowest_priority() {
    int least = 0, greatest = 0;
    TAPSTREAM_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    return least;
  }

  StepBuffers buffers(Segment& s) {
    StepBuffers b;
    b.channels = channels;
    b.P = s.P;
    b.count = s.count;
    b.first_tap = s.first_tap;
    b.slots = s.slots;
    b.in_ring = in_ring.get();
    b.ring_len = ring_len;
    b.window = s.window.get();
    b.current = s.current.get();
    b.delay_line = delay_line.get() + s.delay_offset;
    b.acc = s.acc.get();
    b.forward = &s.forward;
    b.inverse = &s.inverse;
    return b;
  }

  // Segment i's step graphs, one per filter bank (and its output ring).
  void capture_steps(std::size_t i) {
    Segment& s = *segments[i];
    for (int b = 0; b < 2; ++b)
      for (int r = 0; r < 2; ++r)
        s.step_graph[b][r] =
            capture_step(buffers(s), spectra[b].get() + s.spectra_offset, out_ring[r].get(),
                         step_counters.get() + i, s.stream.get());
  }

  // Orders every segment's stream after `stream`.
  void fork_from(cudaStream_t stream) {
    tail_mark.record(stream);
    for (auto& s : segments) tail_mark.wait_on(s->stream.get());
  }

  // Orders `stream` after every segment's stream.
  void join_into(cudaStream_t stream) {
    for (auto& s : segments) {
      s->mark.record(s->stream.get());
      s->mark.wait_on(stream);
    }
  }

  void synchronize_all() {
    for (auto& s : segments) s->stream.synchronize();
    tail.synchronize();
  }

  // On `stream`: the rings, the delay line and the step counters start again.
  void clear(cudaStream_t stream) {
    in_ring.zero(stream);
    for (auto& r : out_ring) r.zero(stream);
    delay_line.zero(stream);
    step_counters.zero(stream);
  }

  // Plans the uploads' batched transforms. An upload of 8 ch x 65536 taps in
  // 128-frame partitions (the GPU plan at 64-frame calls has 510 of them) took
  // several periods of the engine thread's time with a scatter and a transform
  // per partition: late periods at every swap (docs/history.md, "A swap's
  // upload").
  // The scratch is bounded, so many channels of long filters take a few
  // batches.
  void prepare_filter_transforms() {
    constexpr std::size_t kFilterWindowBytes = std::size_t(64) << 20;
    std::size_t window_floats = 0, work_bytes = 1;
    for (auto& sp : segments) {
      Segment& s = *sp;
      const std::size_t partition_floats = channels * 2 * s.P;
      s.filter_batch = std::clamp<std::size_t>(
          kFilterWindowBytes / (partition_floats * sizeof(float)), 1, s.count);
      s.filter_forward = RealFftPlan(2 * s.P, s.filter_batch * channels, CUFFT_R2C);
      work_bytes = std::max(work_bytes, s.filter_forward.work_bytes());
      if (const std::size_t rest = s.count % s.filter_batch; rest != 0) {
        s.filter_forward_rest = RealFftPlan(2 * s.P, rest * channels, CUFFT_R2C);
        work_bytes = std::max(work_bytes, s.filter_forward_rest.work_bytes());
      }
      window_floats = std::max(window_floats, s.filter_batch * partition_floats);
    }
    filter_windows = DeviceBuffer<float>(std::max<std::size_t>(window_floats, 1));
    filter_fft_work = DeviceBuffer<char>(work_bytes);
    for (auto& sp : segments) {
      sp->filter_forward.attach_work_area(filter_fft_work.get());
      if (sp->count % sp->filter_batch != 0)
        sp->filter_forward_rest.attach_work_area(filter_fft_work.get());
    }
  }

  // Packs `b`'s taps into the staging, then (on the tail stream, after the
  // last call and every step in flight) uploads them to raw_taps[slot] and
  // transforms every tail segment's partitions into spectra[slot] through the
  // segment's own plan and window, the inverse FFT's 1 / (2P) folded in.
  //
  // A bank with one filter for every channel (`ctl load all`) is packed and
  // sent once and copied to the other rows on the device: the host's share
  // of a swap runs on the engine thread between two periods, and packing 64
  // channels of 65536 taps (16 MiB) took longer than a 64-frame period
  // (docs/load-test.md, the swaps' line-up).
  void upload(const FilterBank& b, int slot) {
    staging_free.synchronize();
    float* dst = staging.get();
    const std::size_t packed = b.is_shared() ? 1 : channels;
    for (std::size_t c = 0; c < packed; ++c) {
      const auto taps = b.taps(c);
      std::copy(taps.begin(), taps.end(), dst + c * taps_stride);
      std::fill(dst + c * taps_stride + taps.size(), dst + (c + 1) * taps_stride, 0.0f);
    }
    cudaStream_t t = tail.get();
    if (last_main != nullptr) {
      main_mark.record(last_main);
      main_mark.wait_on(t);
    }
    join_into(t);
    float* rows = raw_taps[slot].get();
    TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(rows, dst, packed * taps_stride * sizeof(float),
                                         cudaMemcpyHostToDevice, t));
    // The shared row doubled into the rows after it: log2(channels) copies.
    for (std::size_t done = packed; done < channels; done *= 2) {
      const std::size_t n = std::min(done, channels - done);
      TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(rows + done * taps_stride, rows,
                                           n * taps_stride * sizeof(float),
                                           cudaMemcpyDeviceToDevice, t));
    }
    staging_free.record(t);
    for (auto& sp : segments) {
      Segment& s = *sp;
      for (std::size_t i = 0; i < s.count; i += s.filter_batch) {
        const std::size_t n = std::min(s.filter_batch, s.count - i);
        launch_scatter_partitions(raw_taps[slot].get(), taps_stride, channels,
                                  s.first_tap + i * s.P, s.P, n, 1.0f / float(2 * s.P),
                                  filter_windows.get(), t);
        (n == s.filter_batch ? s.filter_forward : s.filter_forward_rest)
            .forward(filter_windows.get(),
                     spectra[slot].get() + s.spectra_offset + i * channels * (s.P + 1), t);
      }
    }
    fork_from(t);
  }

  // Rows a per-channel update's transforms run over for `n` channels: a
  // power of two (few plans), at most every channel.
  std::size_t packed_rows(std::size_t n) const {
    return std::min(channels, std::bit_ceil(std::max<std::size_t>(n, 1)));
  }

  static const RealFftPlan& cached_plan(std::map<std::size_t, Segment::CachedPlan>& cache,
                                        std::size_t points, std::size_t batch, cufftType type) {
    auto found = cache.find(batch);
    if (found == cache.end()) {
      Segment::CachedPlan made;
      made.plan = RealFftPlan(points, batch, type);
      made.work = DeviceBuffer<char>(std::max<std::size_t>(made.plan.work_bytes(), 1));
      made.plan.attach_work_area(made.work.get());
      found = cache.emplace(batch, std::move(made)).first;
    }
    return found->second.plan;
  }

  // The per-channel updates' buffers, at the first one.
  void allocate_channel_updates(cudaStream_t t) {
    if (update_taps.size() != 0) return;
    std::size_t spectra_floats = 1;
    for (auto& sp : segments)
      spectra_floats = std::max(spectra_floats, sp->filter_batch * channels * (sp->P + 1));
    update_taps = DeviceBuffer<float>(channels * taps_stride);
    update_taps.zero(t);
    update_spectra = DeviceBuffer<float2>(spectra_floats);
    changed_list = DeviceBuffer<int>(channels);
    fading_list = DeviceBuffer<int>(channels);
    update_list = DeviceBuffer<int>(channels);
    stale_list = DeviceBuffer<int>(channels);
    channel_flags = DeviceBuffer<unsigned char>(channels);
    channel_flags.zero(t);
    list_staging = PinnedBuffer<int>(3 * channels);
  }

  // set_channel_filters (checked by the engine): the named channels' rows
  // of the spare set, after bringing its stale rows up to the running set
  // when no update is pending (see the top of the header).
  void update_channels(std::span<const PathTaps> updates, bool crossfade) {
    const std::size_t n = updates.size();
    if (n == 0) return;
    const bool fresh = pending == Pending::none;
    const int spare = 1 - bank;
    staging_free.synchronize();
    cudaStream_t t = tail.get();
    allocate_channel_updates(t);
    float* dst = staging.get();
    int* named = list_staging.get() + channels;
    for (std::size_t u = 0; u < n; ++u) {
      const auto taps = updates[u].taps;
      std::copy(taps.begin(), taps.end(), dst + u * taps_stride);
      std::fill(dst + u * taps_stride + taps.size(), dst + (u + 1) * taps_stride, 0.0f);
      named[u] = int(updates[u].path);
    }
    if (last_main != nullptr) {
      main_mark.record(last_main);
      main_mark.wait_on(t);
    }
    join_into(t);
    TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(update_taps.get(), dst, n * taps_stride * sizeof(float),
                                         cudaMemcpyHostToDevice, t));
    TAPSTREAM_CUDA_CHECK(
        cudaMemcpyAsync(update_list.get(), named, n * sizeof(int), cudaMemcpyHostToDevice, t));
    if (fresh) {
      if (spare_stale_all) {
        TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(raw_taps[spare].get(), raw_taps[bank].get(),
                                             raw_taps[bank].bytes(), cudaMemcpyDeviceToDevice, t));
        TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(spectra[spare].get(), spectra[bank].get(),
                                             spectra[bank].bytes(), cudaMemcpyDeviceToDevice, t));
      } else {
        // The stale rows this update does not write.
        for (std::size_t u = 0; u < n; ++u) is_changed[updates[u].path] |= 2;
        int* lagging = list_staging.get() + 2 * channels;
        std::size_t count = 0;
        for (const int c : stale)
          if ((is_changed[std::size_t(c)] & 2) == 0) lagging[count++] = c;
        for (std::size_t u = 0; u < n; ++u) is_changed[updates[u].path] &= 1;
        if (count > 0) {
          TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(stale_list.get(), lagging, count * sizeof(int),
                                               cudaMemcpyHostToDevice, t));
          launch_move_rows(raw_taps[bank].get(), channels, stale_list.get(), raw_taps[spare].get(),
                           channels, stale_list.get(), count, taps_stride, 1, t);
          for (auto& sp : segments) {
            const Segment& sg = *sp;
            launch_move_rows(
                reinterpret_cast<const float*>(spectra[bank].get() + sg.spectra_offset), channels,
                stale_list.get(),
                reinterpret_cast<float*>(spectra[spare].get() + sg.spectra_offset), channels,
                stale_list.get(), count, 2 * (sg.P + 1), sg.count, t);
          }
        }
      }
      spare_stale_all = false;
      stale.clear();
    }
    // The named rows: raw taps, then each segment's partitions, transformed
    // over the packed rows a batch of partitions at a time.
    launch_move_rows(update_taps.get(), n, nullptr, raw_taps[spare].get(), channels,
                     update_list.get(), n, taps_stride, 1, t);
    const std::size_t rows = packed_rows(n);
    for (auto& sp : segments) {
      Segment& sg = *sp;
      const std::size_t bins = sg.P + 1;
      for (std::size_t i = 0; i < sg.count; i += sg.filter_batch) {
        const std::size_t parts = std::min(sg.filter_batch, sg.count - i);
        launch_scatter_partitions(update_taps.get(), taps_stride, rows, sg.first_tap + i * sg.P,
                                  sg.P, parts, 1.0f / float(2 * sg.P), filter_windows.get(), t);
        cached_plan(sg.packed_forward, 2 * sg.P, parts * rows, CUFFT_R2C)
            .forward(filter_windows.get(), update_spectra.get(), t);
        launch_move_rows(reinterpret_cast<const float*>(update_spectra.get()), rows, nullptr,
                         reinterpret_cast<float*>(spectra[spare].get() + sg.spectra_offset +
                                                  i * channels * bins),
                         channels, update_list.get(), n, 2 * bins, parts, t);
      }
    }
    if (pending != Pending::whole) {
      // A pending whole bank fades every channel anyway; else the call that
      // takes these reads their list and recomputes their tails.
      for (std::size_t u = 0; u < n; ++u) {
        const std::size_t c = updates[u].path;
        if (is_changed[c]) continue;
        is_changed[c] = 1;
        changed.push_back(int(c));
      }
      int* list = list_staging.get();
      std::copy(changed.begin(), changed.end(), list);
      TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(changed_list.get(), list, changed.size() * sizeof(int),
                                           cudaMemcpyHostToDevice, t));
      for (auto& sp : segments)
        cached_plan(sp->packed_inverse, 2 * sp->P, packed_rows(changed.size()), CUFFT_C2R);
      pending = Pending::channels;
    }
    staging_free.record(t);
    fork_from(t);
    swap_crossfade = fresh ? crossfade : swap_crossfade || crossfade;
    count_transformed(n);
  }

  // The first call after set_channel_filters(): the running and spare sets
  // trade places; the changed channels' tails still ahead are recomputed
  // with their new spectra, their old ones kept in the other ring to fade
  // from (on the tail stream, after every step in flight).
  void take_channels(cudaStream_t stream) {
    cudaStream_t t = tail.get();
    main_mark.record(stream);
    main_mark.wait_on(t);
    join_into(t);
    const std::size_t n = changed.size();
    const std::size_t width = std::size_t(ring_len);
    if (swap_crossfade) {
      launch_set_channel_flags(fading_list.get(), faded, channel_flags.get(), 0, t);
      launch_set_channel_flags(changed_list.get(), n, channel_flags.get(), 1, t);
      launch_move_rows(out_ring[ring].get(), channels, changed_list.get(), out_ring[1 - ring].get(),
                       channels, changed_list.get(), n, width, 1, t);
    }
    launch_move_rows(nullptr, channels, nullptr, out_ring[ring].get(), channels, changed_list.get(),
                     n, width, 1, t);
    const int new_bank = 1 - bank;
    const std::size_t rows = packed_rows(n);
    for (auto& sp : segments) {
      Segment& sg = *sp;
      const std::int64_t P = std::int64_t(sg.P), a = std::int64_t(sg.first_tap);
      const std::int64_t first = std::max<std::int64_t>(0, (position - a) / P);
      const RealFftPlan& inverse = cached_plan(sg.packed_inverse, 2 * sg.P, rows, CUFFT_C2R);
      for (std::int64_t j = first; j < sg.next_step; ++j)
        enqueue_finish(buffers(sg), StepIndex{j, nullptr}, false,
                       spectra[new_bank].get() + sg.spectra_offset, out_ring[ring].get(), position,
                       t, changed_list.get(), n, &inverse);
      sg.pending_first = sg.pending_count = 0;  // the tail stream followed them all
    }
    tail_mark.record(t);
    tail_mark.wait_on(stream);
    fork_from(t);
    old_bank = bank;
    bank = new_bank;
    fading = swap_crossfade;
    fade_flags = channel_flags.get();
    if (swap_crossfade) {
      std::swap(fading_list, changed_list);
      faded = n;
      count_faded(n);
    }
    // The spare set (the old running one) now lags by these channels.
    for (const int c : changed) is_changed[std::size_t(c)] = 0;
    stale = std::move(changed);
    changed.clear();
    pending = Pending::none;
  }

  void take_step(std::size_t i) {
    Segment& s = *segments[i];
    const std::int64_t j = s.next_step++;
    s.step_graph[bank][ring].launch(s.stream.get());
    if (s.pending_count == s.done.size()) {  // cannot happen by the sizing; stay correct anyway
      s.done[s.pending_first].synchronize();
      s.pending_first = (s.pending_first + 1) % s.done.size();
      --s.pending_count;
    }
    const std::size_t k = (s.pending_first + s.pending_count) % s.done.size();
    s.done[k].record(s.stream.get());
    s.output_start[k] = std::int64_t(s.first_tap) + j * std::int64_t(s.P);
    ++s.pending_count;
  }

  // Makes `stream` wait for every tail step whose output starts before `end`.
  void wait_for_tail(std::int64_t end, cudaStream_t stream) {
    for (auto& sp : segments) {
      Segment& s = *sp;
      std::size_t due = 0;
      while (due < s.pending_count && s.output_start[(s.pending_first + due) % s.done.size()] < end)
        ++due;
      if (due == 0) continue;
      s.done[(s.pending_first + due - 1) % s.done.size()].wait_on(stream);
      s.pending_first = (s.pending_first + due) % s.done.size();
      s.pending_count -= due;
    }
  }

  // The first call after set_filters(): every tail output still ahead is
  // recomputed with the new filters into the other ring (on the tail stream,
  // after every step in flight; rare, so not a graph).
  void take_swap(cudaStream_t stream) {
    cudaStream_t t = tail.get();
    main_mark.record(stream);
    main_mark.wait_on(t);
    join_into(t);
    const int new_bank = 1 - bank, new_ring = 1 - ring;
    out_ring[new_ring].zero(t);
    for (auto& sp : segments) {
      Segment& s = *sp;
      const std::int64_t P = std::int64_t(s.P), a = std::int64_t(s.first_tap);
      const std::int64_t first = std::max<std::int64_t>(0, (position - a) / P);
      for (std::int64_t j = first; j < s.next_step; ++j)
        enqueue_finish(buffers(s), StepIndex{j, nullptr}, false,
                       spectra[new_bank].get() + s.spectra_offset, out_ring[new_ring].get(),
                       position, t);
      s.pending_first = s.pending_count = 0;  // the tail stream followed them all
    }
    tail_mark.record(t);
    tail_mark.wait_on(stream);
    fork_from(t);
    old_bank = bank;
    bank = new_bank;
    ring = new_ring;
    fading = swap_crossfade;
    fade_flags = nullptr;
    if (swap_crossfade) count_faded(channels);
    pending = Pending::none;
    // The spare set is now the old bank: it differs everywhere.
    spare_stale_all = true;
    stale.clear();
    for (const int c : changed) is_changed[std::size_t(c)] = 0;
    changed.clear();
  }

  // The steps a call ending at stream frame `end` takes, as bits by segment;
  // false when a segment would take more than one (a call longer than a
  // partition) or there are too many segments for the bits.
  bool steps_due(std::int64_t end, std::uint64_t& due) const {
    due = 0;
    if (segments.size() >= 64) return false;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      const Segment& s = *segments[i];
      const std::int64_t n = end / std::int64_t(s.P) - s.next_step;
      if (n > 1) return false;
      if (n == 1) due |= std::uint64_t(1) << i;
    }
    return true;
  }

  // The call's graph: the head (its position read from frame_counter), the
  // output event, the position's advance, and each due step on a branch of
  // its own after the head, as take_step() would launch it.
  GraphExec capture_call(const HeadArgs& head, std::uint64_t due, cudaEvent_t done) {
    cudaStream_t cs = capture_stream.get();
    TAPSTREAM_CUDA_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
    try {
      launch_partitioned_head(head, cs);
      TAPSTREAM_CUDA_CHECK(cudaEventRecordWithFlags(done, cs, cudaEventRecordExternal));
      launch_add_to_counter(frame_counter.get(), head.frames, cs);
      if (due != 0) capture_fork.record(cs);
      for (std::size_t i = 0; i < segments.size(); ++i) {
        if ((due >> i & 1) == 0) continue;
        Segment& s = *segments[i];
        cudaStream_t b = branch_streams[i].get();
        capture_fork.wait_on(b);
        std::int64_t* counter = step_counters.get() + i;
        const StepIndex j{0, counter};
        enqueue_transform(buffers(s), j, b);
        enqueue_finish(buffers(s), j, true, spectra[bank].get() + s.spectra_offset,
                       out_ring[ring].get(), 0, b);
        launch_advance_step(counter, b);
        capture_join[i].record(b);
        capture_join[i].wait_on(cs);
      }
    } catch (...) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(cs, &partial);
      if (partial != nullptr) cudaGraphDestroy(partial);
      throw;
    }
    return GraphExec::end_capture(cs);
  }

  // A whole call as one graph launch, when the mode allows it and the call's
  // steps are one per segment at most; false: process() launches it.
  bool graph_call(const HeadArgs& head, cudaEvent_t done, cudaStream_t stream) {
    const std::int64_t end = position + std::int64_t(head.frames);
    std::uint64_t due = 0;
    if (!steps_due(end, due)) return false;
    CallGraph* graph = nullptr;
    for (auto& g : call_graphs) {
      if (g.in == head.in.data && g.in_cs == head.in.channel_stride &&
          g.in_fs == head.in.frame_stride && g.out == head.out &&
          g.out_cs == head.out_channel_stride && g.out_fs == head.out_frame_stride &&
          g.frames == std::size_t(head.frames) && g.due == due && g.bank == bank &&
          g.ring == ring && g.done == done) {
        graph = &g;
        break;
      }
    }
    if (graph == nullptr) {
      if (call_graphs.size() >= kMaxCallGraphs) call_graphs.clear();
      CallGraph g;
      g.in = head.in.data;
      g.in_cs = head.in.channel_stride;
      g.in_fs = head.in.frame_stride;
      g.out = head.out;
      g.out_cs = head.out_channel_stride;
      g.out_fs = head.out_frame_stride;
      g.frames = std::size_t(head.frames);
      g.due = due;
      g.bank = bank;
      g.ring = ring;
      g.done = done;
      g.exec = capture_call(head, due, done);
      call_graphs.push_back(std::move(g));
      graph = &call_graphs.back();
    }
    if (!frame_counter_current) {
      // Steps launched on the segments' streams finish before the graph's
      // (they share the segments' scratch), and the graph's head reads the
      // position from the device.
      wait_for_tail(std::numeric_limits<std::int64_t>::max(), stream);
      launch_set_counter(frame_counter.get(), position, stream);
      frame_counter_current = true;
    }
    graph->exec.launch(stream);
    for (std::size_t i = 0; i < segments.size(); ++i)
      if ((due >> i & 1) != 0) ++segments[i]->next_step;
    position = end;
    return true;
  }

  void process(const SampleView& in, float* out, long long out_cs, long long out_fs,
               std::size_t frames, std::size_t call_offset, std::size_t call_frames,
               cudaEvent_t output_done, cudaStream_t stream) {
    recorded_done = false;
    if (call_offset == 0 && pending == Pending::whole) take_swap(stream);
    if (call_offset == 0 && pending == Pending::channels) take_channels(stream);
    last_main = stream;
    // Calls of the largest size only: a device's calls (one graph per step
    // pattern), not a stream cut at random (a capture per call).
    if (graph_calls && output_done != nullptr && !fading && call_offset == 0 &&
        frames == call_frames && frames == max_block) {
      HeadArgs h;
      h.in = in;
      h.channels = int(channels);
      h.frames = int(frames);
      h.first_frame_counter = frame_counter.get();
      h.in_ring = in_ring.get();
      h.tail_ring = out_ring[ring].get();
      h.ring_len = ring_len;
      h.taps = raw_taps[bank].get();
      h.taps_channel_stride = std::int64_t(taps_stride);
      h.head_taps = int(head_taps);
      h.out = out;
      h.out_channel_stride = out_cs;
      h.out_frame_stride = out_fs;
      if (graph_call(h, output_done, stream)) {
        recorded_done = true;
        return;
      }
    }
    frame_counter_current = false;
    const std::int64_t end = position + std::int64_t(frames);
    wait_for_tail(end, stream);
    HeadArgs h;
    h.in = in;
    h.channels = int(channels);
    h.frames = int(frames);
    h.first_frame = position;
    h.in_ring = in_ring.get();
    h.tail_ring = out_ring[ring].get();
    h.ring_len = ring_len;
    h.taps = raw_taps[bank].get();
    h.taps_channel_stride = std::int64_t(taps_stride);
    h.head_taps = int(head_taps);
    if (fading) {
      h.old_taps = raw_taps[old_bank].get();
      h.old_tail_ring = out_ring[1 - ring].get();
      h.fade_channels = fade_flags;
      h.blend_offset = std::int64_t(call_offset);
      h.blend_frames = std::int64_t(call_frames);
    }
    h.out = out;
    h.out_channel_stride = out_cs;
    h.out_frame_stride = out_fs;
    launch_partitioned_head(h, stream);
    position = end;
    if (call_offset + frames >= call_frames) fading = false;

    bool ordered = false;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      Segment& s = *segments[i];
      while ((s.next_step + 1) * std::int64_t(s.P) <= end) {
        if (!ordered) {
          input_ready.record(stream);
          ordered = true;
        }
        input_ready.wait_on(s.stream.get());
        take_step(i);
      }
    }
  }

  void reset(cudaStream_t stream) {
    cudaStream_t t = tail.get();
    main_mark.record(stream);
    main_mark.wait_on(t);
    join_into(t);
    clear(t);
    tail_mark.record(t);
    tail_mark.wait_on(stream);
    fork_from(t);
    position = 0;
    frame_counter_current = false;
    for (auto& s : segments) {
      s->next_step = 0;
      s->pending_first = s->pending_count = 0;
    }
    fading = false;
    last_main = stream;
  }
};

PartitionedConvolver::PartitionedConvolver(const FilterBank& bank, std::size_t max_taps,
                                           std::size_t max_block_frames, PartitionPlan plan)
    : state_(std::make_unique<State>(bank, max_taps, max_block_frames, std::move(plan))) {}

PartitionedConvolver::~PartitionedConvolver() = default;

void PartitionedConvolver::process(const DeviceBlock& block, cudaStream_t stream) {
  state_->process(block.in, block.out, block.out_channel_stride, block.out_frame_stride,
                  block.frames, block.call_offset, block.call_frames, block.output_done, stream);
}

bool PartitionedConvolver::recorded_output_done() const {
  return state_->recorded_done;
}

void PartitionedConvolver::set_filters(const FilterBank& bank, bool crossfade) {
  State& s = *state_;
  if (bank.channels() != s.channels || bank.max_taps() > s.max_taps)
    throw std::invalid_argument("partitioned convolver: the bank does not fit (" +
                                std::to_string(bank.channels()) + " channels, " +
                                std::to_string(bank.max_taps()) + " taps)");
  // A swap not yet taken is replaced: its slot is the spare one still.
  s.upload(bank, 1 - s.bank);
  s.pending = State::Pending::whole;
  s.swap_crossfade = crossfade;
  for (const int c : s.changed) s.is_changed[std::size_t(c)] = 0;
  s.changed.clear();
  count_transformed(s.channels);
}

bool PartitionedConvolver::set_channel_filters(std::span<const PathTaps> channels, bool crossfade) {
  state_->update_channels(channels, crossfade);
  return true;
}

void PartitionedConvolver::reset(cudaStream_t stream) {
  state_->reset(stream);
}

void PartitionedConvolver::synchronize() {
  state_->synchronize_all();
}

const PartitionPlan& PartitionedConvolver::plan() const {
  return state_->plan;
}

std::string PartitionedConvolver::description() const {
  std::ostringstream d;
  d << "non-uniformly partitioned FFT (" << state_->plan.describe() << "; head of "
    << state_->head_taps
    << " taps in direct form per call, each tail segment a graph on a stream of its own"
    << (state_->graph_calls ? "; a small call and its due steps one graph" : "") << ")";
  return d.str();
}

namespace {

// Times `reps` back-to-back repetitions of `enqueue` on `stream` after two
// warm-up ones.
template <typename Enqueue>
StepTiming time_repeated(int reps, cudaStream_t stream, Enqueue enqueue) {
  for (int i = 0; i < 2; ++i) enqueue(i);
  Event start(true), stop(true);
  start.record(stream);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) enqueue(i + 2);
  const auto t1 = std::chrono::steady_clock::now();
  stop.record(stream);
  stop.synchronize();
  float ms = 0.0f;
  TAPSTREAM_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  StepTiming t;
  t.gpu_us = 1000.0 * double(ms) / double(reps);
  t.host_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / double(reps);
  return t;
}

}  // namespace

StepTiming measure_tail_step(std::size_t channels, std::size_t P, std::size_t count, int reps) {
  Stream stream;
  StepBuffers b;
  b.channels = channels;
  b.P = P;
  b.count = count;
  b.first_tap = 2 * P;
  b.slots = count + 2;
  b.ring_len = std::int64_t(4 * P);
  const std::size_t bins = P + 1;
  DeviceBuffer<float> in_ring(channels * 4 * P), out_ring(channels * 4 * P);
  DeviceBuffer<float> window(channels * 2 * P);
  DeviceBuffer<float2> delay_line(b.slots * channels * bins), spectra(count * channels * bins);
  DeviceBuffer<float2> current(channels * bins), acc(channels * bins);
  DeviceBuffer<std::int64_t> counter(1);
  for (auto* z : {&in_ring, &out_ring, &window}) z->zero(stream.get());
  for (auto* z : {&delay_line, &spectra, &current, &acc}) z->zero(stream.get());
  counter.zero(stream.get());
  RealFftPlan forward(2 * P, channels, CUFFT_R2C), inverse(2 * P, channels, CUFFT_C2R);
  DeviceBuffer<char> work(std::max<std::size_t>({forward.work_bytes(), inverse.work_bytes(), 1}));
  forward.attach_work_area(work.get());
  inverse.attach_work_area(work.get());
  b.in_ring = in_ring.get();
  b.window = window.get();
  b.current = current.get();
  b.delay_line = delay_line.get();
  b.acc = acc.get();
  b.forward = &forward;
  b.inverse = &inverse;
  const GraphExec step =
      capture_step(b, spectra.get(), out_ring.get(), counter.get(), stream.get());
  return time_repeated(reps, stream.get(), [&](int) { step.launch(stream.get()); });
}

StepTiming measure_head(std::size_t channels, std::size_t frames, std::size_t head_taps, int reps) {
  Stream stream;
  const std::int64_t ring_len = std::int64_t(std::bit_ceil(head_taps + frames + 1));
  DeviceBuffer<float> in(channels * frames), out(channels * frames), taps(channels * head_taps);
  DeviceBuffer<float> in_ring(channels * std::size_t(ring_len)),
      tail_ring(channels * std::size_t(ring_len));
  for (auto* z : {&in, &out, &taps, &in_ring, &tail_ring}) z->zero(stream.get());
  HeadArgs h;
  h.in = SampleView{in.get(), (long long)frames, 1};
  h.channels = int(channels);
  h.frames = int(frames);
  h.in_ring = in_ring.get();
  h.tail_ring = tail_ring.get();
  h.ring_len = ring_len;
  h.taps = taps.get();
  h.taps_channel_stride = std::int64_t(head_taps);
  h.head_taps = int(head_taps);
  h.out = out.get();
  h.out_channel_stride = (long long)frames;
  h.out_frame_stride = 1;
  return time_repeated(reps, stream.get(), [&](int i) {
    h.first_frame = std::int64_t(i) * std::int64_t(frames);
    launch_partitioned_head(h, stream.get());
  });
}

}  // namespace tapstream::cuda

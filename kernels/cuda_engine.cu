// The CUDA engine's device entry (see cuda_engine.hpp): the transport only.
// It owns the streams, the pinned staging (mapped for zero-copy small calls),
// the per-stream device slots and the events that order them, and hands every
// block to one convolver (kernels/convolvers/device_convolver.hpp: the
// direct form, the uniformly or the non-uniformly partitioned FFT), picked by
// the cost model (kernels/convolvers/convolver_choice.hpp).
//
// Ordering: the only chain between blocks is "block k's filtering before
// block k + 1's" (the chain_ event, recorded after each block on the stream
// that filtered it); copies in and out of different blocks overlap freely on
// the streams. Filter swaps and resets are enqueued on stream 0 after that
// chain, so after every block already enqueued.
//
// Threads: an engine is used by one thread at a time (dsp/model/engine.hpp).

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "dsp/model/engine_tuning.hpp"
#include "kernels/convolvers/convolver_choice.hpp"
#include "kernels/convolvers/device_convolver.hpp"
#include "kernels/convolvers/direct_convolver.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/cuda_engine.hpp"
#include "kernels/cuda_resources.hpp"
#include "kernels/device/direct_kernels.hpp"

namespace tapstream {

namespace {

using cuda::DeviceBlock;
using cuda::DeviceBuffer;
using cuda::DeviceConvolver;
using cuda::DeviceGuard;
using cuda::DirectKernel;
using cuda::Event;
using cuda::PinnedBuffer;
using cuda::SampleView;
using cuda::Stream;

std::size_t round_up(std::size_t n, std::size_t m) {
  return (n + m - 1) / m * m;
}

// EngineOptions::kernel naming the non-uniformly partitioned path (forced,
// whatever the cost model says).
constexpr const char* kPartitionedKernel = "partitioned";
// Larger calls are cut into chunks of at least this many samples, pipelined over
// the streams.
constexpr std::size_t kMinChunkSamples = 65536;
// Device staging per stream holds at most this many frames per channel.
constexpr std::size_t kMaxSlotFrames = 131072;

// How a small call (zero-copy) reaches the device and is waited for.
// EngineOptions::cuda.small_calls picks one (for measurements); persistent is
// the default: the fastest of the three at every small shape measured, since
// no driver call sits on a call's path (docs/performance.md, "Small calls").
// Calls the convolver's resident kernel cannot take (another path than the
// tuned direct form, a swap's crossfade, too much work for its few blocks)
// fall back to a launch with a spin wait.
using SmallCalls = CudaSmallCalls;
constexpr SmallCalls kDefaultSmallCalls = SmallCalls::persistent;

std::string device_name(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return "device " + std::to_string(device);
  return prop.name;
}

class CudaEngineImpl final : public CudaEngine {
 public:
  CudaEngineImpl(const FilterBank& bank, const EngineOptions& options)
      : channels_(bank.channels()),
        max_block_frames_(options.max_block_frames),
        max_taps_(options.max_taps ? options.max_taps : bank.max_taps()),
        device_(options.device),
        force_partitioned_(options.kernel == kPartitionedKernel),
        kernel_(cuda::parse_direct_kernel(force_partitioned_ ? "auto" : options.kernel)),
        tuning_(options.cuda) {
    if (max_block_frames_ == 0) throw std::invalid_argument("max_block_frames must be at least 1");
    if (options.streams < 1 || options.streams > 16)
      throw std::invalid_argument("streams must be 1..16, got " + std::to_string(options.streams));
    if (max_taps_ < bank.max_taps())
      throw std::invalid_argument("max_taps " + std::to_string(max_taps_) +
                                  " is below the bank's " + std::to_string(bank.max_taps()) +
                                  " taps");
    if (max_taps_ > (std::size_t(1) << 30) || max_block_frames_ > (std::size_t(1) << 30))
      throw std::invalid_argument("max_taps and max_block_frames must be below 2^30");
    check_cuda_options(tuning_);
    if (tuning_.small_calls != SmallCalls::automatic) small_calls_ = tuning_.small_calls;

    int count = 0;
    TAPSTREAM_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (device_ < 0 || device_ >= count)
      throw std::invalid_argument("CUDA device " + std::to_string(device_) + " does not exist (" +
                                  std::to_string(count) + " found)");
    DeviceGuard guard(device_);
    // chain_ was made with the members, on the calling thread's device: an
    // engine on another GPU (a batch lane, a shard) needs it on its own, or
    // recording it on the engine's streams fails ("invalid resource handle").
    chain_ = Event();
    caller_ready_ = Event();
    staged_done_ = Event();
    TAPSTREAM_CUDA_CHECK(
        cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, device_));
    device_name_ = device_name(device_);

    // The engine's streams run ahead of the partitioned path's tail stream.
    int least_priority = 0, greatest_priority = 0;
    TAPSTREAM_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
    for (int s = 0; s < options.streams; ++s) streams_.emplace_back(greatest_priority);
    output_stream_ = Stream(greatest_priority);
    stream_priority_ = greatest_priority;
    slot_frames_ = std::min(max_block_frames_, kMaxSlotFrames);
    const std::size_t block_samples = channels_ * max_block_frames_;
    pinned_in_ = PinnedBuffer<float>(block_samples, /*mapped=*/true);
    pinned_out_ = PinnedBuffer<float>(block_samples, /*mapped=*/true);
    for (std::size_t s = 0; s < streams_.size(); ++s) {
      slot_in_.emplace_back(channels_ * slot_frames_);
      slot_out_.emplace_back(channels_ * slot_frames_);
      done_.emplace_back();
    }
    for (std::size_t i = 0; i < 2 * streams_.size() + 2; ++i) chunk_done_.emplace_back();

    cuda::ConvolverRequest request;
    request.channels = channels_;
    request.max_block_frames = max_block_frames_;
    request.max_taps = max_taps_;
    request.algorithm = options.algorithm;
    request.force_partitioned = force_partitioned_;
    request.tuning = tuning_;
    cuda::ConvolverChoice choice = cuda::choose_convolver(bank, request, [&] {
      return std::make_unique<cuda::DirectConvolver>(bank, direct_setup());
    });
    convolver_ = std::move(choice.convolver);
    resident_possible_ = !convolver_->resident_description().empty();
    choice_note_ = std::move(choice.note);

    if (!convolver_->takes_any_view()) {
      for (std::size_t s = 0; s < streams_.size(); ++s) {
        planar_in_.emplace_back(channels_ * slot_frames_);
        planar_out_.emplace_back(channels_ * slot_frames_);
      }
    }
    chain_.record(streams_[0].get());
    chain_stream_ = 0;
    synchronize();
  }

  ~CudaEngineImpl() override {
    // A device error at teardown cannot be handled here; the resources'
    // destructors still release what they hold.
    try {
      convolver_->quiesce();  // stops a resident kernel
    } catch (...) {
    }
    for (auto& s : streams_) cudaStreamSynchronize(s.get());
    try {
      convolver_->synchronize();  // a convolver's own streams
    } catch (...) {
    }
  }

  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout layout) override {
    start_process(in, out, frames, layout);
    finish_process();
  }

  // process() up to the wait for the device (Engine::start_process): a small
  // call through the resident kernel is whole here (its answer comes within
  // microseconds); a launched small call or a chunked call leaves its wait
  // and copy-out to finish_process().
  void start_process(std::span<const float> in, std::span<float> out, std::size_t frames,
                     Layout layout) override {
    finish_process();  // a call started and never finished
    check_frames(frames);
    const std::size_t n = channels_ * frames;
    if (in.size() < n || out.size() < n)
      throw std::invalid_argument("process: " + std::to_string(frames) + " frames of " +
                                  std::to_string(channels_) + " channels need " +
                                  std::to_string(n) + " samples, got " + std::to_string(in.size()) +
                                  " in and " + std::to_string(out.size()) + " out");
    const auto call_start = std::chrono::steady_clock::now();
    DeviceGuard guard(device_);
    const bool in_staged = in.data() == pinned_in_.get();
    const bool out_staged = out.data() == pinned_out_.get();

    if (n <= tuning_.zero_copy_samples) {
      if (!in_staged) std::memcpy(pinned_in_.get(), in.data(), n * sizeof(float));
      // A resident kernel starts after the chain: record it first.
      if (small_calls_ == SmallCalls::persistent && resident_possible_) flush_chain();
      if (small_calls_ == SmallCalls::persistent && convolver_->resident_ready(chain_)) {
        note_enqueued(call_start);
        if (convolver_->resident_call(frames, layout == Layout::planar)) {
          if (!out_staged) std::memcpy(out.data(), pinned_out_.get(), n * sizeof(float));
          return;
        }
        // From now on a launch per call (below).
      }
      convolver_->quiesce();
      const SampleView x = view(pinned_in_.device_pointer(), layout, frames, 0);
      const SampleView y = view(pinned_out_.device_pointer(), layout, frames, 0);
      // The convolver may record done_[0] inside its own work (a call as one
      // graph); else it is recorded here, after the call's work.
      if (!filter(0, x, const_cast<float*>(y.data), y.channel_stride, y.frame_stride, frames, 0,
                  frames, /*mapped=*/true, done_[0].get()))
        done_[0].record(streams_[0].get());
      convolver_->end_call();
      note_enqueued(call_start);
      pending_.kind = PendingCall::Kind::small;
      pending_.out = out_staged ? nullptr : out.data();
      pending_.n = n;
      return;
    }
    convolver_->quiesce();

    // Chunks pipelined over the streams: chunk i on stream i % S, its own device
    // slot; chunk i - E is drained (waited for and copied out) before chunk i is
    // enqueued so that host copies overlap device work too. The caller's own
    // page-locked buffers are copied from and to directly; pageable ones go
    // through the pinned staging, so that the copies stay asynchronous.
    const float* host_in = in_staged || is_page_locked(in.data()) ? in.data() : pinned_in_.get();
    float* host_out = out_staged || is_page_locked(out.data()) ? out.data() : pinned_out_.get();
    const bool stage_in = host_in != in.data();
    const bool stage_out = host_out != out.data();
    const std::size_t S = streams_.size();
    std::size_t chunk =
        std::max((frames + 2 * S - 1) / (2 * S), (kMinChunkSamples + channels_ - 1) / channels_);
    chunk = std::min(round_up(chunk, 64), slot_frames_);
    const std::size_t chunks = (frames + chunk - 1) / chunk;
    const std::size_t E = chunk_done_.size();
    PendingCall call;
    call.kind = PendingCall::Kind::chunks;
    call.out = out.data();
    call.n = n;
    call.layout = layout;
    call.frames = frames;
    call.chunk = chunk;
    call.chunks = chunks;
    call.stage_out = stage_out;
    for (std::size_t i = 0; i < chunks; ++i) {
      if (i >= E) drain_chunk(call);
      const std::size_t a = i * chunk, b = std::min(frames, a + chunk);
      const std::size_t m = b - a;
      const std::size_t s = i % S;
      cudaStream_t stream = streams_[s].get();
      if (stage_in) copy_host(pinned_in_.get(), in.data(), layout, frames, a, b);
      copy_2d(slot_in_[s].get(), host_in, layout, frames, a, m, cudaMemcpyHostToDevice, stream);
      const SampleView x = view(slot_in_[s].get(), layout, m, 0);
      const SampleView y = view(slot_out_[s].get(), layout, m, 0);
      filter(s, x, slot_out_[s].get(), y.channel_stride, y.frame_stride, m, a, frames, false);
      copy_2d(host_out, slot_out_[s].get(), layout, frames, a, m, cudaMemcpyDeviceToHost, stream);
      chunk_done_[i % E].record(stream);
    }
    convolver_->end_call();
    note_enqueued(call_start);
    pending_ = call;
  }

  // The rest of the call start_process() began: its wait for the device and
  // its copy out of the staging.
  void finish_process() override {
    PendingCall call = pending_;
    pending_ = {};
    switch (call.kind) {
      case PendingCall::Kind::none:
        return;
      case PendingCall::Kind::small:
        if (small_calls_ == SmallCalls::event)
          done_[0].synchronize();
        else
          spin_until(done_[0]);
        if (call.out != nullptr) std::memcpy(call.out, pinned_out_.get(), call.n * sizeof(float));
        return;
      case PendingCall::Kind::chunks:
        while (call.drained < call.chunks) drain_chunk(call);
        return;
    }
  }

  void process_device(const float* d_in, float* d_out, std::size_t frames,
                      std::size_t channel_stride) override {
    begin_device_call(frames, channel_stride);
    DeviceGuard guard(device_);
    filter_device(d_in, d_out, frames, channel_stride);
  }

  // A small call (within the zero-copy size) goes the way of a host one: its
  // block is copied on the device into stream 0's slot and filtered from
  // there, so that the convolver sees the same pointers every call and can
  // run it as one graph (it cannot hold a caller's pointers, which change
  // from call to call), then copied out; the wait is the small calls' spin.
  // The copy out runs on a stream of its own after the output's event: on
  // stream 0 it would wait for the whole graph, the tail steps the call
  // starts included, which a host call does not wait for either.
  void process_device_after(const float* d_in, float* d_out, std::size_t frames,
                            std::size_t channel_stride, CUstream_st* after) override {
    begin_device_call(frames, channel_stride);
    DeviceGuard guard(device_);
    cudaStream_t stream = streams_[0].get();
    // After what the caller enqueued, on the device: no host wait.
    caller_ready_.record(after);
    caller_ready_.wait_on(stream);
    if (channels_ * frames > tuning_.zero_copy_samples || frames > slot_frames_) {
      filter_device(d_in, d_out, frames, channel_stride);
      synchronize();
      return;
    }
    // Copies as kernels: a small device-to-device cudaMemcpy2DAsync waits for a
    // copy engine, several microseconds each way.
    const auto stride = (long long)channel_stride, n = (long long)frames;
    cuda::launch_copy_samples({d_in, stride, 1}, slot_in_[0].get(), n, 1, int(channels_),
                              int(frames), stream);
    convolver_->quiesce();
    const SampleView x{slot_in_[0].get(), (long long)frames, 1};
    if (!filter(0, x, slot_out_[0].get(), (long long)frames, 1, frames, 0, frames, false,
                staged_done_.get()))
      staged_done_.record(stream);
    convolver_->end_call();
    cudaStream_t out_stream = output_stream_.get();
    staged_done_.wait_on(out_stream);
    cuda::launch_copy_samples({slot_out_[0].get(), n, 1}, d_out, stride, 1, int(channels_),
                              int(frames), out_stream);
    done_[0].record(out_stream);
    if (small_calls_ == SmallCalls::event)
      done_[0].synchronize();
    else
      spin_until(done_[0]);
  }

  void set_filters(const FilterBank& bank, bool crossfade) override {
    finish_process();
    if (bank.channels() != channels_)
      throw std::invalid_argument("set_filters: the bank has " + std::to_string(bank.channels()) +
                                  " channels, the engine " + std::to_string(channels_));
    if (bank.max_taps() > max_taps_)
      throw std::invalid_argument("set_filters: the bank has " + std::to_string(bank.max_taps()) +
                                  " taps, the engine holds at most " + std::to_string(max_taps_));
    DeviceGuard guard(device_);
    convolver_->quiesce();
    // After every block enqueued so far (the convolver uploads on stream 0).
    wait_chain(0);
    convolver_->set_filters(bank, crossfade);
    chain_.record(streams_[0].get());
    chain_stream_ = 0;
    chain_pending_ = false;
  }

  bool set_channel_filters(std::span<const PathTaps> channels, bool crossfade) override {
    finish_process();
    check_channel_taps("cuda engine", channels, channels_, max_taps_);
    DeviceGuard guard(device_);
    convolver_->quiesce();
    // After every block enqueued so far, as set_filters.
    wait_chain(0);
    const bool taken = convolver_->set_channel_filters(channels, crossfade);
    chain_.record(streams_[0].get());
    chain_stream_ = 0;
    return taken;
  }

  void reset() override {
    finish_process();
    DeviceGuard guard(device_);
    convolver_->quiesce();
    cudaStream_t stream = streams_[0].get();
    wait_chain(0);
    convolver_->reset(stream);
    chain_.record(stream);
    chain_stream_ = 0;
    chain_pending_ = false;
  }

  void synchronize() override {
    DeviceGuard guard(device_);
    for (auto& s : streams_) s.synchronize();
    convolver_->synchronize();
  }

  CUstream_st* stream() const override { return streams_[0].get(); }
  double last_call_host_us() const override { return last_call_host_us_; }

  std::span<float> pinned_input() override { return {pinned_in_.get(), pinned_in_.size()}; }
  std::span<float> pinned_output() override { return {pinned_out_.get(), pinned_out_.size()}; }

  std::size_t channels() const override { return channels_; }
  std::size_t max_block_frames() const override { return max_block_frames_; }
  std::size_t max_taps() const override { return max_taps_; }
  std::string name() const override { return "cuda"; }
  Algorithm algorithm() const override { return convolver_->algorithm(); }
  std::string kernel() const override { return convolver_->kernel(); }
  std::string taps_memory() const override { return convolver_->taps_memory(); }

  std::string description() const override {
    std::ostringstream d;
    d << "cuda (" << device_name_ << "): " << convolver_->description();
    d << ", " << streams_.size() << " streams, zero-copy up to " << tuning_.zero_copy_samples
      << " samples per call (" << small_calls_description() << ")";
    if (!choice_note_.empty()) d << "; " << choice_note_;
    return d.str();
  }

 private:
  void check_frames(std::size_t frames) const {
    if (frames == 0 || frames > max_block_frames_)
      throw std::invalid_argument("process: " + std::to_string(frames) + " frames, expected 1.." +
                                  std::to_string(max_block_frames_));
  }

  // A call start_process() left for finish_process(): a launched small call
  // (its event, then the copy out of the mapped staging unless `out` is
  // null: the caller's out was the staging) or chunks still to drain.
  struct PendingCall {
    enum class Kind { none, small, chunks };
    Kind kind = Kind::none;
    float* out = nullptr;
    std::size_t n = 0;  // samples of the call
    Layout layout = Layout::interleaved;
    std::size_t frames = 0, chunk = 0, chunks = 0, drained = 0;
    bool stage_out = false;  // chunks come back through the pinned staging
  };

  // Waits for the oldest chunk of `call` not yet drained and copies it out.
  void drain_chunk(PendingCall& call) {
    const std::size_t i = call.drained++;
    const std::size_t a = i * call.chunk, b = std::min(call.frames, a + call.chunk);
    chunk_done_[i % chunk_done_.size()].synchronize();
    if (call.stage_out) copy_host(call.out, pinned_out_.get(), call.layout, call.frames, a, b);
  }

  // What the direct form needs of the engine: its variant and tuning, stream
  // 0 for uploads, and the mapped staging and stream priority for its
  // persistent kernel.
  cuda::DirectConvolver::Setup direct_setup() const {
    cuda::DirectConvolver::Setup d;
    d.kernel = kernel_;
    d.max_taps = max_taps_;
    d.max_block_frames = max_block_frames_;
    d.multiprocessors = multiprocessors_;
    d.stream_tiles = tuning_.stream_tiles;
    d.stream = streams_[0].get();
    d.mapped_in = pinned_in_.device_pointer();
    d.mapped_out = pinned_out_.device_pointer();
    d.priority = stream_priority_;
    d.persistent_idle = tuning_.persistent_idle;
    d.persistent_diagnostics = cuda::PersistentDirect::Diagnostics{
        tuning_.persistent_answer, tuning_.persistent_trace, tuning_.persistent_loads};
    return d;
  }

  // Waits for `event` by polling it: no sleep and wake-up in the driver.
  static void spin_until(const Event& event) {
    for (;;) {
      const cudaError_t state = cudaEventQuery(event.get());
      if (state == cudaSuccess) return;
      if (state != cudaErrorNotReady)
        cuda::throw_cuda_error(state, "cudaEventQuery(small call's event)", __FILE__, __LINE__);
    }
  }

  std::string small_calls_description() const {
    switch (small_calls_) {
      case SmallCalls::persistent: {
        const std::string resident = convolver_->resident_description();
        return "small calls: " +
               (resident.empty() ? std::string("a launch each, spin wait") : resident);
      }
      case SmallCalls::spin:
        return "small calls: a launch each, spin wait";
      case SmallCalls::event:
        return "small calls: a launch each, event wait";
      case SmallCalls::automatic:
        break;  // resolved in the constructor
    }
    return "?";
  }

  // A device call's checks, after any host call still pending.
  void begin_device_call(std::size_t frames, std::size_t channel_stride) {
    finish_process();
    check_frames(frames);
    if (channel_stride < frames && channels_ > 1)
      throw std::invalid_argument("process_device: channel_stride " +
                                  std::to_string(channel_stride) + " is below frames " +
                                  std::to_string(frames));
  }

  // A device call filtered where its block is (planar, `channel_stride` apart), on stream 0.
  void filter_device(const float* d_in, float* d_out, std::size_t frames,
                     std::size_t channel_stride) {
    convolver_->quiesce();
    const SampleView x{d_in, (long long)channel_stride, 1};
    filter(0, x, d_out, (long long)channel_stride, 1, frames, 0, frames, false);
    convolver_->end_call();
  }

  void note_enqueued(std::chrono::steady_clock::time_point call_start) {
    last_call_host_us_ =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - call_start)
            .count();
  }

  void wait_chain(std::size_t s) {
    if (chain_stream_ == s) return;
    flush_chain();
    chain_.wait_on(streams_[s].get());
  }

  // Records the chain a small call left pending, on the stream it ran on.
  void flush_chain() {
    if (!chain_pending_) return;
    chain_.record(streams_[chain_stream_].get());
    chain_pending_ = false;
  }

  // True for memory from cudaHostAlloc/cudaMallocHost or cudaHostRegister.
  static bool is_page_locked(const void* p) {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it so later checks do not see it
      return false;
    }
    return attributes.type == cudaMemoryTypeHost;
  }

  SampleView view(const float* base, Layout layout, std::size_t frames, std::size_t) const {
    if (layout == Layout::interleaved) return {base, 1, (long long)channels_};
    return {base, (long long)frames, 1};
  }

  // Host copy of frames [a, b) of a call of `frames` frames between user memory
  // and the pinned staging (same layout, same offsets).
  void copy_host(float* dst, const float* src, Layout layout, std::size_t frames, std::size_t a,
                 std::size_t b) const {
    if (layout == Layout::interleaved) {
      std::memcpy(dst + a * channels_, src + a * channels_, (b - a) * channels_ * sizeof(float));
    } else {
      for (std::size_t c = 0; c < channels_; ++c)
        std::memcpy(dst + c * frames + a, src + c * frames + a, (b - a) * sizeof(float));
    }
  }

  // Copies frames [a, a + m) of a host buffer laid out as the call (`frames`
  // frames: the pinned staging or the caller's page-locked buffer)
  // to or from a device slot holding just those m frames, in the same layout.
  void copy_2d(float* dst, const float* src, Layout layout, std::size_t frames, std::size_t a,
               std::size_t m, cudaMemcpyKind kind, cudaStream_t stream) const {
    const bool to_device = kind == cudaMemcpyHostToDevice;
    if (layout == Layout::interleaved) {
      const std::size_t offset = a * channels_;
      TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(to_device ? dst : dst + offset,
                                           to_device ? src + offset : src,
                                           m * channels_ * sizeof(float), kind, stream));
    } else {
      const std::size_t host_pitch = frames * sizeof(float), slot_pitch = m * sizeof(float);
      TAPSTREAM_CUDA_CHECK(cudaMemcpy2DAsync(
          to_device ? dst : dst + a, to_device ? slot_pitch : host_pitch, to_device ? src + a : src,
          to_device ? host_pitch : slot_pitch, m * sizeof(float), channels_, kind, stream));
    }
  }

  // Filters one chunk (frames [offset, offset + frames) of a call of call_frames)
  // on stream s, after the previous chunk's filtering; records the chain.
  // `mapped`: x and y are the mapped host staging. `output_done` (optional):
  // the event the caller polls; true when the convolver recorded it.
  bool filter(std::size_t s, const SampleView& x, float* y, long long y_channel_stride,
              long long y_frame_stride, std::size_t frames, std::size_t offset,
              std::size_t call_frames, bool mapped, cudaEvent_t output_done = nullptr) {
    cudaStream_t stream = streams_[s].get();
    wait_chain(s);
    DeviceBlock block;
    block.in = x;
    block.out = y;
    block.out_channel_stride = y_channel_stride;
    block.out_frame_stride = y_frame_stride;
    block.frames = frames;
    block.call_offset = offset;
    block.call_frames = call_frames;
    block.output_done = output_done;
    bool recorded = false;
    if (convolver_->takes_any_view()) {
      convolver_->process(block, stream);
      recorded = output_done != nullptr && convolver_->recorded_output_done();
    } else {
      process_planar(s, block, mapped, stream);
    }
    // A small call stays on stream 0: the chain is recorded only when a later
    // call moves to another stream (wait_chain), not on every call.
    if (mapped) {
      chain_pending_ = true;
    } else {
      chain_.record(stream);
      chain_pending_ = false;
    }
    chain_stream_ = s;
    return recorded;
  }

  // For a convolver that takes planar device memory only: (de)interleaves (or
  // reads the mapped host staging) through slot s's planar scratch where the
  // block is not.
  void process_planar(std::size_t s, const DeviceBlock& block, bool mapped, cudaStream_t stream) {
    const bool stage_in = mapped || block.in.frame_stride != 1;
    const bool stage_out = mapped || block.out_frame_stride != 1;
    const long long frames = (long long)block.frames;
    DeviceBlock planar = block;
    if (stage_in) {
      cuda::launch_copy_samples(block.in, planar_in_[s].get(), frames, 1, int(channels_),
                                int(frames), stream);
      planar.in = {planar_in_[s].get(), frames, 1};
    }
    if (stage_out) {
      planar.out = planar_out_[s].get();
      planar.out_channel_stride = frames;
      planar.out_frame_stride = 1;
    }
    convolver_->process(planar, stream);
    if (stage_out)
      cuda::launch_copy_samples({planar.out, frames, 1}, block.out, block.out_channel_stride,
                                block.out_frame_stride, int(channels_), int(frames), stream);
  }

  std::size_t channels_;
  std::size_t max_block_frames_;
  std::size_t max_taps_;
  int device_;
  bool force_partitioned_;
  DirectKernel kernel_;
  CudaEngineOptions tuning_;
  int multiprocessors_ = 1;
  std::string device_name_;
  SmallCalls small_calls_ = kDefaultSmallCalls;
  int stream_priority_ = 0;
  double last_call_host_us_ = 0.0;
  std::string choice_note_;
  PendingCall pending_;

  std::vector<Stream> streams_;
  Event chain_;
  std::size_t chain_stream_ = 0;
  bool chain_pending_ = false;      // chain_ not yet recorded after a small call
  bool resident_possible_ = false;  // the convolver has a resident kernel for small calls
  std::vector<Event> done_;
  std::vector<Event> chunk_done_;
  Event caller_ready_;  // process_device_after: the caller's stream, recorded
  Event staged_done_;   // process_device_after: the convolver's output (inside its graph)
  Stream output_stream_;  // process_device_after: the copy out
  std::size_t slot_frames_ = 0;
  PinnedBuffer<float> pinned_in_, pinned_out_;
  std::vector<DeviceBuffer<float>> slot_in_, slot_out_;
  // Planar scratch per stream, for a convolver that takes planar device memory only.
  std::vector<DeviceBuffer<float>> planar_in_, planar_out_;

  // The filtering path: direct form, uniformly or non-uniformly partitioned FFT.
  std::unique_ptr<DeviceConvolver> convolver_;
};

}  // namespace

std::vector<std::string> cuda_kernel_variants() {
  return cuda::direct_kernel_names();
}

std::unique_ptr<CudaEngine> make_cuda_device_engine(const FilterBank& bank,
                                                    const EngineOptions& options) {
  return std::make_unique<CudaEngineImpl>(bank, options);
}

std::unique_ptr<Engine> make_cuda_engine(const FilterBank& bank, const EngineOptions& options) {
  return make_cuda_device_engine(bank, options);
}

}  // namespace tapstream

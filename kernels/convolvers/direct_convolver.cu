// The direct-form path (see direct_convolver.hpp).

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "kernels/convolvers/direct_convolver.hpp"
#include "kernels/cuda_check.hpp"

namespace tapstream::cuda {

namespace {

std::size_t round_up(std::size_t n, std::size_t m) {
  return (n + m - 1) / m * m;
}

// The persistent kernel holds this many blocks (one SM each at most) while
// the stream runs, and takes a call only when each block's share of the
// multiply-adds stays near a microsecond (2^18 at ~64 per clock is 2 us);
// larger work is faster spread over a whole grid by a launch.
constexpr int kPersistentMaxBlocks = 16;
constexpr long long kPersistentMaxMacsPerBlock = 1 << 18;

}  // namespace

DirectConvolver::DirectConvolver(const FilterBank& bank, const Setup& setup)
    : channels_(bank.channels()), setup_(setup) {
  history_len_ = int(setup_.max_taps - 1);
  history_end_ = int(round_up(std::size_t(history_len_), 4));
  for (auto& h : history_) {
    h = DeviceBuffer<float>(channels_ * std::size_t(history_end_));
    h.zero(setup_.stream);
  }
  const std::size_t capacity = channels_ * round_up(setup_.max_taps, kTapPadding);
  for (auto& b : banks_) {
    b.global = DeviceBuffer<float>(capacity);
    b.staging = PinnedBuffer<float>(capacity);
  }
  upload(bank, 0);
  active_ = 0;
  pending_.reset();
}

DirectConvolver::~DirectConvolver() {
  persistent_.reset();  // stops the kernel
}

void DirectConvolver::process(const DeviceBlock& block, cudaStream_t stream) {
  const bool fading = pending_ && crossfade_;
  const int bank = pending_ ? *pending_ : active_;
  float* carry_to = history_len_ > 0 ? history_[1 - history_index_].get() : nullptr;
  if (fading) {
    launch_direct(setup_.kernel,
                  direct_args(block.in, block.out, block.out_channel_stride, block.out_frame_stride,
                              block.frames, active_),
                  stream);
  }
  DirectArgs a = direct_args(block.in, block.out, block.out_channel_stride, block.out_frame_stride,
                             block.frames, bank);
  if (fading) {
    a.blend = true;
    a.blend_offset = (long long)block.call_offset;
    a.blend_frames = (long long)block.call_frames;
  }
  a.carry_to = carry_to;  // fused into the (last) filter launch
  launch_direct(setup_.kernel, a, stream);
  if (carry_to) history_index_ = 1 - history_index_;
}

void DirectConvolver::end_call() {
  if (pending_) {
    active_ = *pending_;
    pending_.reset();
    crossfade_ = false;
  }
}

void DirectConvolver::set_filters(const FilterBank& bank, bool crossfade) {
  // A swap not yet taken by a block is replaced; its bank is the one to reuse.
  const int b = pending_ ? *pending_ : 1 - active_;
  upload(bank, b);
  pending_ = b;
  crossfade_ = crossfade;
}

void DirectConvolver::reset(cudaStream_t stream) {
  for (auto& h : history_) h.zero(stream);
}

// Packs `bank` into staging, then uploads it (global copy, constant bank when
// it fits) on setup_.stream, which the caller has ordered after every kernel
// enqueued so far.
void DirectConvolver::upload(const FilterBank& bank, int b) {
  TapBank& tb = banks_[b];
  tb.uploaded.synchronize();  // the previous upload from this staging is done
  const std::size_t padded = round_up(bank.max_taps(), kTapPadding);
  const std::size_t rows = bank.is_shared() ? 1 : channels_;
  float* dst = tb.staging.get();
  std::fill(dst, dst + rows * padded, 0.0f);
  for (std::size_t r = 0; r < rows; ++r) {
    const auto taps = bank.taps(r);
    std::copy(taps.begin(), taps.end(), dst + r * padded);
  }
  tb.taps = int(bank.max_taps());
  tb.taps_padded = int(padded);
  tb.channel_stride = bank.is_shared() ? 0 : (long long)padded;
  tb.in_constant = rows * padded <= kConstantBankFloats;
  cudaStream_t stream = setup_.stream;
  TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(tb.global.get(), dst, rows * padded * sizeof(float),
                                       cudaMemcpyHostToDevice, stream));
  if (tb.in_constant) upload_constant_bank(b, dst, rows * padded, stream);
  tb.uploaded.record(stream);
}

// Starts the persistent kernel for small calls unless it runs already; false
// when small calls take a launch each instead (another kernel variant than
// the tuned one, a swap to crossfade, too much work for its blocks, or a
// kernel that did not answer before).
bool DirectConvolver::resident_ready(const Event& after) {
  if (persistent_failed_) return false;
  if (setup_.kernel != DirectKernel::tuned || pending_) return false;
  if (persistent_ && persistent_->running()) return true;
  const SampleView x{setup_.mapped_in, 1, (long long)channels_};
  DirectArgs a =
      direct_args(x, setup_.mapped_out, 1, (long long)channels_, setup_.max_block_frames, active_);
  const PersistentShape shape = persistent_tuned_shape(a, kPersistentMaxBlocks);
  const long long macs_per_block = (long long)shape.P * 8 * (long long)banks_[active_].taps_padded;
  if (shape.blocks == 0 || macs_per_block > kPersistentMaxMacsPerBlock) return false;
  if (!persistent_)
    persistent_ = std::make_unique<PersistentDirect>(setup_.priority, setup_.persistent_idle,
                                                     setup_.persistent_diagnostics);
  persistent_->start(a, shape, history_[0].get(), history_[1].get(), after);
  return true;
}

bool DirectConvolver::resident_call(std::size_t frames, bool planar) {
  if (persistent_->call(int(frames), planar, history_index_)) {
    if (history_len_ > 0) history_index_ = 1 - history_index_;
    return true;
  }
  persistent_failed_ = true;  // from now on a launch per call
  return false;
}

// Before any other work: the persistent kernel returns (after its last
// carry), so that nothing else runs beside it on the history.
void DirectConvolver::quiesce() {
  if (persistent_) persistent_->stop();
}

std::string DirectConvolver::resident_description() const {
  if (persistent_failed_) return "the persistent kernel did not answer; a launch each";
  if (persistent_) return persistent_->description();
  return setup_.kernel == DirectKernel::tuned ? "persistent kernel where its blocks fit" : "";
}

std::string DirectConvolver::kernel() const {
  return direct_kernel_name(setup_.kernel);
}

std::string DirectConvolver::taps_memory() const {
  const int b = pending_ ? *pending_ : active_;
  return banks_[b].in_constant && setup_.kernel != DirectKernel::naive ? "constant" : "global";
}

std::string DirectConvolver::description() const {
  std::ostringstream d;
  d << "direct form, kernel " << kernel() << ", taps in " << taps_memory() << " memory";
  if (taps_memory() == "global" && setup_.kernel != DirectKernel::naive)
    d << " (" << channels_ << " ch x " << setup_.max_taps << " taps exceed a constant bank of "
      << kConstantBankFloats << " floats)";
  return d.str();
}

DirectArgs DirectConvolver::direct_args(const SampleView& x, float* y, long long y_channel_stride,
                                        long long y_frame_stride, std::size_t frames,
                                        int bank) const {
  const TapBank& tb = banks_[bank];
  DirectArgs a;
  a.in = x;
  a.history = history_len_ > 0 ? history_[history_index_].get() : nullptr;
  a.history_stride = history_end_;
  a.history_end = history_end_;
  a.history_len = history_len_;
  a.out = y;
  a.out_channel_stride = y_channel_stride;
  a.out_frame_stride = y_frame_stride;
  a.channels = int(channels_);
  a.frames = int(frames);
  a.taps = tb.taps;
  a.taps_padded = tb.taps_padded;
  a.taps_channel_stride = tb.channel_stride;
  a.global_taps = tb.global.get();
  a.constant_bank = tb.in_constant ? bank : -1;
  a.multiprocessors = setup_.multiprocessors;
  a.stream_tiles = setup_.stream_tiles;
  return a;
}

}  // namespace tapstream::cuda

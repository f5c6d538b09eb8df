// The CPU engine. Two algorithms behind one streaming state machine:
//
// Direct form: each channel keeps a contiguous history (the last max_taps - 1
// input samples followed by the current block) and the taps back to front, so
// y[n] = sum_j reversed[j] * history[n + j] is a run of unit-stride SIMD
// multiply-adds across 64 outputs at once (dsp/cpu/cpu_simd).
//
// Partitioned FFT: uniformly partitioned overlap-save with partition size P
// (FFT size 2P) and a frequency-domain delay line (FDL) holding the spectra of
// the 2P-sample input windows that end at the last completed segments. For
// segment s, y_s = IFFT(X_s H_0 + tail_s), where tail_s = sum_{j>=1} X_{s-j} H_j
// depends only on completed segments, so it is computed once, when segment
// s-1 completes. A call that fills only part of the current segment FFTs the
// window with the not-yet-seen samples still zero, adds tail_s, and emits only
// the new positions: causal outputs are unaffected by the zeroed future, so no
// latency is added whatever the call size. Calls are split at segment
// boundaries; a call covering a whole aligned segment is plain UPOLS.
//
// The algorithm and P are fixed at construction from max_block_frames and
// max_taps by the CPU cost model (dsp/cpu/cpu_cost_model, constants measured on
// the development machine, docs/cpu-engine.md); set_filters() can therefore swap banks without
// reallocating the stream state. A crossfade call runs the old and the new
// filters on the same input state (history / FDL are filter independent; each
// bank has its own tails) and blends the outputs:
//   out[i] = old[i] + w_i * (new[i] - old[i]),  w_i = (i + 1) / frames,
// so the last frame of the crossfade block is entirely the new filter's.
//
// Per-channel updates (set_channel_filters) cost their channels only: each
// channel's filter (its reversed taps or its partitions' spectra) is shared,
// so the filters an update makes share every other channel's with the
// running ones and transform only the named channels; they mark which
// channels changed, and the call that installs them computes the tails of
// and crossfades those channels only, the others playing on bit for bit.
// The tails belong to the engine (one per channel, and a second for the
// channels fading out), not to the filters, so that nothing is done for a
// channel that did not change.
//
// Threads: channels are independent, so a call with enough work (see
// kCpuParallelCallNs) hands its channels out over a WorkerPool (dsp/cpu/cpu_worker_pool.hpp)
// of min(channels, cores) threads, the caller included, each channel to whichever
// thread claims it first; each thread has its own scratch and a channel's state
// is touched by one thread per call. EngineOptions::cpu.threads caps the
// thread count (1: single-threaded). Small calls (live audio) stay on the caller.
//
// A gain (an engine of 1 tap whose one filter serves every channel: an
// identity or --gain run of `process`) is a scaled copy of the whole buffer,
// whatever its layout: the same direct_fir over the samples as they lie, so
// the output is bit for bit the general path's, without staging, history or
// a pass per channel (docs/performance.md, the 2-core development VM).

#include "dsp/cpu/cpu_engine.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dsp/cpu/cpu_cost_model.hpp"
#include "dsp/cpu/cpu_simd.hpp"
#include "dsp/cpu/cpu_worker_pool.hpp"
#include "dsp/cpu/fftw_plan.hpp"
#include "dsp/model/channel_work.hpp"

namespace tapstream {
namespace {

using fftw::AlignedFloats;

constexpr std::size_t kDirectPad = 64;  // direct_fir computes outputs in runs of 64

std::size_t round_up(std::size_t n, std::size_t m) {
  return (n + m - 1) / m * m;
}
std::size_t div_up(std::size_t n, std::size_t m) {
  return (n + m - 1) / m;
}

std::size_t thread_limit(const CpuEngineOptions& options) {
  if (options.threads >= 1) return options.threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

class CpuEngine final : public CpuHeadEngine {
 public:
  // head_threads > 0: no worker pool of its own, scratch for calls split over
  // that many threads by the caller (the in-call head of the non-uniform
  // engine, which spreads its channels itself).
  CpuEngine(const FilterBank& bank, const EngineOptions& options, std::size_t head_threads = 0);

  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout layout) override;
  void set_filters(const FilterBank& bank, bool crossfade) override;
  bool set_channel_filters(std::span<const PathTaps> channels, bool crossfade) override;
  void reset() override;
  std::unique_ptr<PreparedHeadFilters> prepare_filters(const FilterBank& bank) const override;
  std::unique_ptr<PreparedHeadFilters> prepare_channel_filters(const PreparedHeadFilters& base,
                                                               std::span<const PathTaps> channels,
                                                               bool base_pending) const override;
  std::unique_ptr<PreparedHeadFilters> install_filters(std::unique_ptr<PreparedHeadFilters> filters,
                                                       bool crossfade) noexcept override;
  void begin_call(std::size_t frames) noexcept override;
  void call_channel(std::size_t channel, const float* x, float* y,
                    std::size_t thread) noexcept override;
  void end_call() noexcept override;

  std::size_t channels() const override { return channels_; }
  std::size_t max_block_frames() const override { return max_block_; }
  std::size_t max_taps() const override { return max_taps_; }
  std::string name() const override { return "cpu"; }
  std::string description() const override;

 private:
  // One filter, prepared; immutable, shared by the filters that hold it.
  struct Channel {
    std::size_t taps = 0;
    // direct form: taps back to front, padded
    AlignedFloats reversed;
    // FFT: spectra of its partitions, scaled by 1/N, block by block: block b
    // of partition j at b * partitions * 64 + j * 64
    std::size_t partitions = 0;
    AlignedFloats spectra;
  };
  // Everything that depends on one filter bank. History, FDL and tails do
  // not, so an engine can run two banks over the same stream state during a
  // crossfade.
  struct Filters final : PreparedHeadFilters {
    std::vector<std::shared_ptr<const Channel>> stored;  // per stored filter (one when shared)
    bool shared = false;
    // Per channel, nonzero where these filters differ from those they
    // replace (a per-channel update); empty: every channel (a whole bank).
    std::vector<unsigned char> changed;
    std::size_t filter_of(std::size_t channel) const { return shared ? 0 : channel; }
    const Channel& of(std::size_t channel) const { return *stored[filter_of(channel)]; }
    bool changes(std::size_t channel) const { return changed.empty() || changed[channel] != 0; }
  };

  // Per-thread working memory.
  struct Scratch {
    AlignedFloats spectrum;  // interleaved (re, im), padded bins, for FFTW
    AlignedFloats time;      // 2P samples
    AlignedFloats y;         // one channel's output (direct form pads to 64)
    AlignedFloats old;       // one channel's output of the old bank during a crossfade
  };

  // process() computes the tails of the filters' channels when they become active.
  std::unique_ptr<Filters> make_filters(const FilterBank& bank) const;
  // `base` with the named channels' filters replaced (checked by the
  // caller), marked changed: on top of base's marks when `base` has not
  // played yet (a pending update), else on none.
  std::unique_ptr<Filters> make_channel_filters(const Filters& base,
                                                std::span<const PathTaps> channels,
                                                bool base_pending) const;
  std::shared_ptr<const Channel> make_channel(std::span<const float> taps) const;
  void check_bank(const FilterBank& bank, const char* what) const;
  // The tail of `channel` with `f`'s filter for the segment in `slot`, into `tail`.
  void update_tails(const Filters& f, std::size_t channel, std::size_t slot, float* tail) const;
  float* tail_of(std::size_t channel) {
    return tails_.data() + channel * blocks_ * simd::kBlockFloats;
  }
  float* old_tail_of(std::size_t channel) {
    return old_tails_.data() + channel * blocks_ * simd::kBlockFloats;
  }

  // Filters one channel of one call of process() (staging it for interleaved
  // layouts), between begin_call() and end_call().
  void process_channel(std::size_t ch, std::span<const float> in, Layout layout,
                       std::span<float> out, std::size_t thread);
  void direct_channel(std::size_t ch, const float* x, std::size_t frames, float* y,
                      const Filters* fade_from, Scratch& scratch);
  void fft_channel(std::size_t ch, const float* x, std::size_t frames, float* y,
                   const Filters* fade_from, Scratch& scratch);
  // y = fade_from's output + w * (y - fade_from's output), old output in `old`.
  static void blend(const float* old, float* y, std::size_t frames);
  // True when a call of process() can be the scaled copy: one 1-tap filter
  // for every channel and no filters to install or fade from.
  bool scaled_copy_call() const;
  // y[i] = the shared tap * x[i] for the n samples, through direct_fir.
  void scaled_copy(const float* x, float* y, std::size_t n);

  std::size_t channels_;
  std::size_t max_block_;
  std::size_t max_taps_;
  Algorithm algorithm_;

  std::unique_ptr<Filters> active_;
  std::unique_ptr<Filters> pending_;  // set_filters() -> next process()
  bool pending_crossfade_ = false;
  std::unique_ptr<Filters> retired_;  // freed in set_filters(), never on the audio path

  // The call between begin_call() and end_call(): its frames, whether it
  // installs pending filters (their tails computed channel by channel), and
  // the filters it crossfades from.
  std::size_t call_frames_ = 0;
  bool installing_ = false;
  std::unique_ptr<Filters> fade_from_;

  // direct form
  std::size_t history_stride_ = 0;
  AlignedFloats history_;  // per channel: max_taps - 1 past samples, then the block

  // FFT
  std::size_t partition_ = 0;  // P
  std::size_t blocks_ = 0;     // 32-bin blocks of a half spectrum (P + 1 bins)
  std::size_t fdl_slots_ = 0;  // K, partitions of the longest filter
  std::shared_ptr<const fftw::RealFftPair> fft_;
  AlignedFloats windows_;     // per channel: 2P samples, previous and current segment
  AlignedFloats fdl_;         // per channel, block b of slot s at b * K * 64 + s * 64
  std::size_t position_ = 0;  // frames already in the current segment
  std::size_t slot_ = 0;      // FDL slot of the current segment
  // Per channel, tail_s = sum_{j>=1} X_{s-j} H_j for the current segment with
  // the active filter (contiguous blocks); old_tails_: with the filter it
  // fades from, in a crossfade call.
  AlignedFloats tails_, old_tails_;

  // staging
  AlignedFloats stage_in_;   // per channel, for interleaved input
  AlignedFloats stage_out_;  // per channel, for interleaved output

  double ns_per_sample_ = 0.0;    // cost model's estimate, to decide on threads
  std::vector<Scratch> scratch_;  // one per thread
  std::unique_ptr<WorkerPool> pool_;
};

CpuEngine::CpuEngine(const FilterBank& bank, const EngineOptions& options, std::size_t head_threads)
    : channels_(bank.channels()),
      max_block_(options.max_block_frames),
      max_taps_(options.max_taps == 0 ? bank.max_taps() : options.max_taps),
      algorithm_(options.algorithm) {
  if (max_block_ == 0) throw std::invalid_argument("cpu engine: max_block_frames is 0");
  if (bank.max_taps() > max_taps_) {
    throw std::invalid_argument("cpu engine: the bank's longest filter has " +
                                std::to_string(bank.max_taps()) + " taps, more than max_taps " +
                                std::to_string(max_taps_));
  }
  const std::size_t best_p = cpu_best_partition(max_block_, max_taps_);
  const double direct_ns = cpu_direct_cost_ns(max_block_, max_taps_);
  const double fft_ns = cpu_fft_cost_ns(max_block_, max_taps_, best_p);
  if (algorithm_ == Algorithm::automatic) {
    algorithm_ = direct_ns <= fft_ns ? Algorithm::direct : Algorithm::fft;
  }
  ns_per_sample_ = algorithm_ == Algorithm::direct ? direct_ns : fft_ns;
  if (algorithm_ == Algorithm::direct) {
    history_stride_ = round_up(max_taps_ - 1 + round_up(max_block_, kDirectPad), 16);
    history_ = AlignedFloats(channels_ * history_stride_);
  } else {
    partition_ = best_p;
    fft_ = fftw::RealFftPair::get(2 * partition_);
    blocks_ = div_up(partition_ + 1, simd::kBlockBins);
    fdl_slots_ = div_up(max_taps_, partition_);
    windows_ = AlignedFloats(channels_ * 2 * partition_);
    fdl_ = AlignedFloats(channels_ * blocks_ * fdl_slots_ * simd::kBlockFloats);
    tails_ = AlignedFloats(channels_ * blocks_ * simd::kBlockFloats);
    old_tails_ = AlignedFloats(channels_ * blocks_ * simd::kBlockFloats);
  }
  stage_in_ = AlignedFloats(channels_ * max_block_);
  stage_out_ = AlignedFloats(channels_ * max_block_);

  // Threads only where a full block is worth splitting.
  std::size_t threads = std::min(channels_, thread_limit(options.cpu));
  if (ns_per_sample_ * double(max_block_ * channels_) < kCpuParallelCallNs) threads = 1;
  scratch_.resize(head_threads > 0 ? head_threads : threads);
  for (Scratch& sc : scratch_) {
    sc.y = AlignedFloats(round_up(max_block_, kDirectPad));
    sc.old = AlignedFloats(round_up(max_block_, kDirectPad));
    if (algorithm_ == Algorithm::fft) {
      sc.spectrum = AlignedFloats(blocks_ * simd::kBlockFloats);
      sc.time = AlignedFloats(2 * partition_);
    }
  }
  active_ = make_filters(bank);  // a fresh stream: its tails are zero
  if (head_threads == 0 && threads > 1) pool_ = std::make_unique<WorkerPool>(threads - 1);
}

void CpuEngine::check_bank(const FilterBank& bank, const char* what) const {
  if (bank.channels() != channels_) {
    throw std::invalid_argument(std::string("cpu engine: ") + what + ": the bank has " +
                                std::to_string(bank.channels()) + " channels, the engine " +
                                std::to_string(channels_));
  }
  if (bank.max_taps() > max_taps_) {
    throw std::invalid_argument(
        std::string("cpu engine: ") + what + ": a filter of " + std::to_string(bank.max_taps()) +
        " taps is longer than the engine's max_taps " + std::to_string(max_taps_));
  }
}

std::shared_ptr<const CpuEngine::Channel> CpuEngine::make_channel(
    std::span<const float> taps) const {
  auto c = std::make_shared<Channel>();
  c->taps = taps.size();
  if (algorithm_ == Algorithm::direct) {
    c->reversed = AlignedFloats(round_up(taps.size(), 16));
    std::reverse_copy(taps.begin(), taps.end(), c->reversed.data());
    return c;
  }
  const std::size_t p = partition_, n = 2 * p;
  const std::size_t k = div_up(taps.size(), p);
  c->partitions = k;
  c->spectra = AlignedFloats(blocks_ * k * simd::kBlockFloats);
  AlignedFloats padded(n), spectrum(blocks_ * simd::kBlockFloats);
  const float scale = 1.0f / float(n);  // FFTW's inverse is unnormalised
  for (std::size_t j = 0; j < k; ++j) {
    padded.zero();
    const std::size_t count = std::min(p, taps.size() - j * p);
    for (std::size_t t = 0; t < count; ++t) padded.data()[t] = taps[j * p + t] * scale;
    fft_->forward(padded.data(), spectrum.data());
    simd::to_blocks(spectrum.data(), c->spectra.data() + j * simd::kBlockFloats,
                    k * simd::kBlockFloats, blocks_);
  }
  return c;
}

std::unique_ptr<CpuEngine::Filters> CpuEngine::make_filters(const FilterBank& bank) const {
  auto f = std::make_unique<Filters>();
  f->shared = bank.is_shared();
  const std::size_t stored = f->shared ? 1 : channels_;
  for (std::size_t i = 0; i < stored; ++i) f->stored.push_back(make_channel(bank.taps(i)));
  count_transformed(stored);
  return f;
}

std::unique_ptr<CpuEngine::Filters> CpuEngine::make_channel_filters(
    const Filters& base, std::span<const PathTaps> channels, bool base_pending) const {
  auto f = std::make_unique<Filters>();
  f->stored = base.stored;  // shared, not copied
  // A pending whole bank stays whole (every channel changes).
  if (base_pending) f->changed = base.changed;
  if (!base_pending) f->changed.assign(channels_, 0);
  for (const PathTaps& update : channels) {
    f->stored[update.path] = make_channel(update.taps);
    if (!f->changed.empty()) f->changed[update.path] = 1;  // empty: every channel changes
  }
  count_transformed(channels.size());
  return f;
}

// tail for the segment in `slot`: sum_{j=1}^{K_f-1} X_{slot-j} H_j.
void CpuEngine::update_tails(const Filters& f, std::size_t ch, std::size_t slot,
                             float* tail) const {
  const Channel& h = f.of(ch);
  const std::size_t k = h.partitions;
  const float* fdl = fdl_.data() + ch * blocks_ * fdl_slots_ * simd::kBlockFloats;
  // Terms j = 1 .. k-1: slots slot-1, slot-2, ... against partitions 1, 2, ...
  simd::delay_line_products(
      fdl, fdl_slots_ * simd::kBlockFloats, fdl_slots_, (slot + fdl_slots_ - 1) % fdl_slots_,
      h.spectra.data() + simd::kBlockFloats, k * simd::kBlockFloats, k - 1, tail, blocks_);
}

void CpuEngine::set_filters(const FilterBank& bank, bool crossfade) {
  check_bank(bank, "set_filters");
  retired_.reset();
  pending_ = make_filters(bank);  // tails are computed when it becomes active
  pending_crossfade_ = crossfade;
}

bool CpuEngine::set_channel_filters(std::span<const PathTaps> channels, bool crossfade) {
  check_channel_taps("cpu engine", channels, channels_, max_taps_);
  const Filters& base = pending_ ? *pending_ : *active_;
  // One filter for every channel is one filter, not one per channel: a whole bank.
  if (base.shared) return false;
  std::unique_ptr<Filters> next = make_channel_filters(base, channels, pending_ != nullptr);
  pending_crossfade_ = pending_ ? pending_crossfade_ || crossfade : crossfade;
  retired_.reset();
  pending_ = std::move(next);
  return true;
}

std::unique_ptr<PreparedHeadFilters> CpuEngine::prepare_filters(const FilterBank& bank) const {
  check_bank(bank, "set_filters");
  return make_filters(bank);
}

std::unique_ptr<PreparedHeadFilters> CpuEngine::prepare_channel_filters(
    const PreparedHeadFilters& base, std::span<const PathTaps> channels, bool base_pending) const {
  check_channel_taps("cpu engine", channels, channels_, max_taps_);
  const auto& filters = static_cast<const Filters&>(base);
  if (filters.shared) return nullptr;
  return make_channel_filters(filters, channels, base_pending);
}

std::unique_ptr<PreparedHeadFilters> CpuEngine::install_filters(
    std::unique_ptr<PreparedHeadFilters> filters, bool crossfade) noexcept {
  // A pending bank that never played goes back instead of the retired one
  // (which then waits for the next install).
  std::unique_ptr<PreparedHeadFilters> unused =
      pending_ ? std::unique_ptr<PreparedHeadFilters>(std::move(pending_))
               : std::unique_ptr<PreparedHeadFilters>(std::move(retired_));
  pending_.reset(static_cast<Filters*>(filters.release()));
  pending_crossfade_ = crossfade;
  return unused;
}

void CpuEngine::reset() {
  history_.zero();
  windows_.zero();
  fdl_.zero();
  tails_.zero();
  old_tails_.zero();
  position_ = 0;
  slot_ = 0;
}

void CpuEngine::blend(const float* old, float* y, std::size_t frames) {
  const float step = 1.0f / float(frames);
  for (std::size_t i = 0; i < frames; ++i) {
    const float w = float(i + 1) * step;
    y[i] = old[i] + w * (y[i] - old[i]);
  }
}

void CpuEngine::direct_channel(std::size_t ch, const float* x, std::size_t frames, float* y,
                               const Filters* fade_from, Scratch& scratch) {
  float* h = history_.data() + ch * history_stride_;
  const std::size_t keep = max_taps_ - 1;
  std::memcpy(h + keep, x, frames * sizeof(float));
  auto run = [&](const Filters& f, float* dst) {
    const Channel& c = f.of(ch);
    simd::direct_fir(h + (max_taps_ - c.taps), c.reversed.data(), c.taps, dst, frames);
  };
  run(*active_, scratch.y.data());
  if (fade_from) {
    run(*fade_from, scratch.old.data());
    blend(scratch.old.data(), scratch.y.data(), frames);
  }
  std::memcpy(y, scratch.y.data(), frames * sizeof(float));
  std::memmove(h, h + frames, keep * sizeof(float));
}

void CpuEngine::fft_channel(std::size_t ch, const float* x, std::size_t frames, float* y,
                            const Filters* fade_from, Scratch& scratch) {
  const std::size_t p = partition_;
  float* window = windows_.data() + ch * 2 * p;
  float* fdl = fdl_.data() + ch * blocks_ * fdl_slots_ * simd::kBlockFloats;
  const std::size_t fdl_stride = fdl_slots_ * simd::kBlockFloats;
  float* spectrum = scratch.spectrum.data();
  float* time = scratch.time.data();
  std::size_t q = position_, slot = slot_, done = 0;

  float* tail = tail_of(ch);
  float* old_tail = old_tail_of(ch);
  auto emit = [&](const Filters& f, const float* tail_now, const float* x_slot, float* dst,
                  std::size_t q0, std::size_t n) {
    const Channel& h = f.of(ch);
    simd::multiply_add(x_slot, fdl_stride, h.spectra.data(), h.partitions * simd::kBlockFloats,
                       tail_now, spectrum, blocks_);
    fft_->inverse(spectrum, time);
    std::memcpy(dst, time + p + q0, n * sizeof(float));
  };

  while (done < frames) {
    const std::size_t n = std::min(frames - done, p - q);
    std::memcpy(window + p + q, x + done, n * sizeof(float));
    float* x_slot = fdl + slot * simd::kBlockFloats;
    fft_->forward(window, spectrum);
    simd::to_blocks(spectrum, x_slot, fdl_stride, blocks_);
    emit(*active_, tail, x_slot, y + done, q, n);
    if (fade_from) emit(*fade_from, old_tail, x_slot, scratch.old.data() + done, q, n);
    q += n;
    done += n;
    if (q == p) {  // segment complete: X_s stays in the FDL, the next segment starts
      std::memcpy(window, window + p, p * sizeof(float));
      std::memset(window + p, 0, p * sizeof(float));
      slot = (slot + 1) % fdl_slots_;
      q = 0;
      update_tails(*active_, ch, slot, tail);
      if (fade_from) update_tails(*fade_from, ch, slot, old_tail);
    }
  }
  if (fade_from) blend(scratch.old.data(), y, frames);
}

bool CpuEngine::scaled_copy_call() const {
  return algorithm_ == Algorithm::direct && max_taps_ == 1 && !pending_ && active_->shared &&
         active_->stored[0]->taps == 1;
}

void CpuEngine::scaled_copy(const float* x, float* y, std::size_t n) {
  const float* tap = active_->stored[0]->reversed.data();
  // direct_fir works in runs of 64 outputs: the whole runs in place, the
  // rest through a padded scratch run (scratch y holds at least 64 floats).
  const std::size_t whole = n / kDirectPad * kDirectPad;
  if (whole > 0) simd::direct_fir(x, tap, 1, y, whole);
  const std::size_t rest = n - whole;
  if (rest == 0) return;
  float* padded = scratch_[0].y.data();
  float* result = scratch_[0].old.data();
  std::memcpy(padded, x + whole, rest * sizeof(float));
  std::memset(padded + rest, 0, (kDirectPad - rest) * sizeof(float));
  simd::direct_fir(padded, tap, 1, result, rest);
  std::memcpy(y + whole, result, rest * sizeof(float));
}

void CpuEngine::begin_call(std::size_t frames) noexcept {
  call_frames_ = frames;
  installing_ = pending_ != nullptr;
  if (pending_) {
    if (pending_crossfade_) fade_from_ = std::move(active_);
    retired_ = std::move(active_);
    active_ = std::move(pending_);
  }
}

void CpuEngine::call_channel(std::size_t ch, const float* x, float* y,
                             std::size_t thread) noexcept {
  Scratch& scratch = scratch_[thread];
  // Only a channel the installed filters change fades, and has its tail made.
  const bool changed = installing_ && active_->changes(ch);
  const Filters* fade_from = changed ? fade_from_.get() : nullptr;
  if (fade_from) count_faded(1);
  if (algorithm_ == Algorithm::direct) {
    direct_channel(ch, x, call_frames_, y, fade_from, scratch);
  } else {
    if (changed) {
      // The filter it fades from keeps its tail for the current segment.
      if (fade_from)
        std::memcpy(old_tail_of(ch), tail_of(ch), blocks_ * simd::kBlockFloats * sizeof(float));
      update_tails(*active_, ch, slot_, tail_of(ch));
    }
    fft_channel(ch, x, call_frames_, y, fade_from, scratch);
  }
}

void CpuEngine::end_call() noexcept {
  if (algorithm_ == Algorithm::fft) {
    const std::size_t total = position_ + call_frames_;
    slot_ = (slot_ + total / partition_) % fdl_slots_;
    position_ = total % partition_;
  }
  installing_ = false;
  if (fade_from_) retired_ = std::move(fade_from_);
}

void CpuEngine::process_channel(std::size_t ch, std::span<const float> in, Layout layout,
                                std::span<float> out, std::size_t thread) {
  const std::size_t frames = call_frames_;
  if (layout == Layout::planar) {
    call_channel(ch, in.data() + ch * frames, out.data() + ch * frames, thread);
    return;
  }
  float* staged = stage_in_.data() + ch * max_block_;
  for (std::size_t f = 0; f < frames; ++f) staged[f] = in[f * channels_ + ch];
  // interleaved by process() afterwards
  call_channel(ch, staged, stage_out_.data() + ch * max_block_, thread);
}

void CpuEngine::process(std::span<const float> in, std::span<float> out, std::size_t frames,
                        Layout layout) {
  check_process_call("cpu engine", in, out, frames, channels_, max_block_);
  if (scaled_copy_call()) {
    scaled_copy(in.data(), out.data(), frames * channels_);
    return;
  }
  begin_call(frames);
  const bool parallel =
      pool_ &&
      ns_per_sample_ * double(frames * channels_) * (fade_from_ ? 2.0 : 1.0) >= kCpuParallelCallNs;
  auto channel = [&](std::size_t ch, std::size_t thread) {
    process_channel(ch, in, layout, out, thread);
  };
  if (parallel) {
    pool_->run(channel, channels_);
  } else {
    for (std::size_t ch = 0; ch < channels_; ++ch) channel(ch, 0);
  }
  if (layout == Layout::interleaved) {
    for (std::size_t ch = 0; ch < channels_; ++ch) {
      const float* y = stage_out_.data() + ch * max_block_;
      for (std::size_t f = 0; f < frames; ++f) out[f * channels_ + ch] = y[f];
    }
  }
  end_call();
}

std::string CpuEngine::description() const {
  if (algorithm_ == Algorithm::direct && max_taps_ == 1) {
    return "cpu: direct form, 1 tap (a scaled copy where one filter serves every channel)";
  }
  if (algorithm_ == Algorithm::direct) {
    return "cpu: direct form, up to " + std::to_string(max_taps_) + " taps" +
           (pool_ ? ", " + std::to_string(pool_->threads()) + " threads for large blocks" : "");
  }
  const std::string threads =
      pool_ ? ", " + std::to_string(pool_->threads()) + " threads for large blocks" : "";
  return "cpu: partitioned FFT, " + std::to_string(partition_) + "-frame partitions (" +
         std::to_string(2 * partition_) + "-point FFT), " + std::to_string(fdl_slots_) +
         " partitions" + threads;
}

}  // namespace

std::unique_ptr<CpuHeadEngine> make_cpu_head_engine(const FilterBank& bank,
                                                    const EngineOptions& options,
                                                    std::size_t threads) {
  return std::make_unique<CpuEngine>(bank, options, std::max<std::size_t>(1, threads));
}

std::unique_ptr<Engine> make_cpu_engine(const FilterBank& bank, const EngineOptions& options) {
  if (options.algorithm == Algorithm::automatic && options.max_block_frames > 0 &&
      options.max_block_frames <= kMaxHeadFrames) {
    const std::size_t taps = options.max_taps == 0 ? bank.max_taps() : options.max_taps;
    // At least 16: FFTW plans start at 32 points (a head of 1 to 8 frames
    // would ask for transforms of 2 to 16); calls may be shorter than the head.
    const std::size_t head = std::max<std::size_t>(16, std::bit_ceil(options.max_block_frames));
    const CpuPartitionCosts costs(bank.channels());
    const PartitionPlan plan = plan_partitions(head, taps, costs);
    // Non-uniform where it has tails and the model says it costs less than
    // the best uniform engine at this call size; large (offline) blocks keep
    // the uniform engine, which the worker pool spreads over the cores.
    // In an audio callback, always: its swaps are prepared off the audio
    // thread, and a plan without tails is the uniform engine on the caller.
    if (options.realtime_calls ||
        (plan.segments.size() > 1 &&
         plan.cost_ns_per_frame(costs) <
             cpu_uniform_cost_ns_per_frame(options.max_block_frames, taps))) {
      return make_cpu_nonuniform_engine(bank, options, plan);
    }
  }
  return std::make_unique<CpuEngine>(bank, options);
}

}  // namespace tapstream

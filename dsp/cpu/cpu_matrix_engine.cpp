// Uniformly partitioned overlap-save over a routing matrix, with partition P
// and FFT size 2P. Input i keeps a window of its last 2P samples (previous
// and current segment) and a delay line of the spectra of its completed
// windows. For segment s, output o is
//   y_s = IFFT( tail_s + sum_{paths p -> o} X_{in(p), s} H_{p,0} ),
//   tail_s = sum_{paths p -> o} sum_{j>=1} X_{in(p), s-j} H_{p,j},
// where the tail depends only on completed segments and is computed once,
// when segment s-1 completes. A call that fills only part of a segment
// transforms the window with the samples not yet seen still zero and emits
// only the new positions, so no latency is added whatever the call size.
//
// Each output's sum is formed in registers over all its terms and written
// once (simd::complex_products). A call that spans two or more whole segments
// from a segment's start (offline calls) transforms them all first, then
// forms each output's sums for all of them in one pass over its filter
// spectra, the next segment's tail included (run_segments): the spectra,
// which a delay's remainder doubles, are read from memory once a call rather
// than once (or twice) a segment.
//
// A path's delay d = q P + r is a delay, not filter length: the path reads
// its input's delay line q segments further back (its partition j meets
// X_{s-q-j}), and only the remainder r < P becomes leading zeros of its
// taps, so a delay costs at most one partition, whatever its length. A path
// with q >= 1 has no head term: all of it is in the tail. The delay line
// holds enough segments for the longest delay the engine was sized for.
//
// A crossfade call runs the old and the new bank over the same windows and
// delay lines (they do not depend on the filters or delays; each bank has
// its own tails) and blends: out = old + w (new - old), w = (i + 1) / frames.
//
// Swaps, and the face for an audio callback (RealtimeMatrixEngine). A call
// does all of its work itself (no threads), so the engine can run inside an
// audio callback as it is; what must change is how a new bank reaches the
// call. It is the scheme of the non-uniform CPU engine's face
// (dsp/cpu/cpu_nonuniform_engine.cpp): the bank is built off the audio
// thread, handed over by an atomic pointer exchange, taken at a call
// boundary and crossfaded over that call, and the bank it replaces goes back
// to be freed off the audio thread. Here the caller of set_matrix/post_matrix
// (set_paths/post_paths) builds the bank itself (transforming the paths
// takes milliseconds on the pipeline's background swap thread, so no
// preparer thread of its own) and publishes it in `posted_`; the call takes
// it with an exchange, computes its tails and pushes the bank it replaced
// onto `retired_`, a stack (release CAS by the one caller of process,
// acquire exchange of the whole stack by the one poster: no ABA), whose
// banks the next post frees. The audio thread thus never allocates or frees:
// no bank, and no shared spectrum's last reference, is dropped there. A bank
// posted before the last one was taken supersedes it (the poster frees it);
// a per-path update builds on the latest posted filters, so nothing posted
// is lost, and keeps the crossfade of one it supersedes, as set_paths did.
//
// Whether it runs in the callback (realtime() with
// EngineOptions::realtime_calls): when the cost model's worst call (one
// that crosses a segment boundary: every path's tail products and the
// transforms of two chunks), doubled for a crossfade call (both banks), is
// at most half the call's duration at the stream's rate, the other half being
// the device's, the server's and the other clients'. Otherwise realtime() is
// null and the live pipeline hands its periods to its engine thread. The
// placement is made once, for the matrix the engine starts with; a later
// matrix or path update (longer paths, up to max_taps, or delays whose
// remainders add a partition) may cost more a call, so in the callback each
// one is priced the same way when it is posted and refused, naming the
// numbers, where its worst call does not fit: it would make the callback
// miss its deadline at every segment boundary. Sizing the placement for
// max_taps instead would move matrices that never grow (the default
// max_taps is 2048, SOFA's paths 512 taps) out of the callback.

#include "dsp/cpu/cpu_matrix_engine.hpp"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsp/cpu/cpu_matrix_plan.hpp"
#include "dsp/cpu/cpu_simd.hpp"
#include "dsp/cpu/fftw_plan.hpp"
#include "dsp/model/segment_delay.hpp"

namespace tapstream {
namespace {

using fftw::AlignedFloats;

std::size_t div_up(std::size_t n, std::size_t m) {
  return (n + m - 1) / m;
}

// The share of a call's duration the engine may take inside an audio
// callback (see the top), and the stream's rate when the options give none.
constexpr double kCallbackShare = 0.5;
constexpr double kDefaultRate = 48000.0;

// The partition: EngineOptions::cpu.matrix_partition where given (a power of
// two in the plan's range, checked here where it is read), else the cost
// model's choice.
std::size_t chosen_partition(const RoutingMatrix& matrix, const EngineOptions& options) {
  const std::size_t forced = options.cpu.matrix_partition;
  if (forced == 0)
    return cpu_matrix_partition(CpuMatrixShape::of(matrix), options.max_block_frames);
  if (forced < kCpuMatrixMinPartition || forced > kCpuMatrixMaxPartition ||
      (forced & (forced - 1)) != 0)
    throw std::invalid_argument("cpu matrix engine: matrix_partition " + std::to_string(forced) +
                                " is not a power of two in " +
                                std::to_string(kCpuMatrixMinPartition) + ".." +
                                std::to_string(kCpuMatrixMaxPartition) + " (0: by the cost model)");
  return forced;
}

// Whole segments a call filters together (see run_segments): enough for the
// filters' spectra, read once for all of them, to cost a fraction of the
// products; each costs a spectrum of delay line per input.
constexpr std::size_t kMaxBatchSegments = 16;
// Bins of a stretch of run_segments' products: the stretch of every term's
// filter spectrum (8 KiB for 4 terms) stays in L1 across the batch's segments.
constexpr std::size_t kStretchBins = 256;

class CpuMatrixEngine final : public MatrixEngine, private RealtimeMatrixEngine {
 public:
  CpuMatrixEngine(const RoutingMatrix& matrix, const EngineOptions& options);
  ~CpuMatrixEngine() override;

  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout layout) override;
  void set_matrix(const RoutingMatrix& matrix, bool crossfade) override {
    post_matrix(matrix, crossfade);
  }
  void set_paths(std::span<const PathTaps> paths, bool crossfade) override {
    post_paths(paths, crossfade);
  }
  void reset() override;

  std::size_t inputs() const override { return n_in_; }
  std::size_t outputs() const override { return n_out_; }
  std::size_t max_block_frames() const override { return max_block_; }
  std::size_t max_taps() const override { return max_taps_; }
  std::size_t max_delay_frames() const override { return max_delay_; }
  std::string name() const override { return "cpu"; }
  std::string description() const override;
  RealtimeMatrixEngine* realtime() override { return in_callback_ ? this : nullptr; }

 private:
  bool process_by(std::span<const float> in, std::span<float> out, std::size_t frames,
                  Layout layout, const timespec& deadline) noexcept override;
  void post_matrix(const RoutingMatrix& matrix, bool crossfade) override;
  void post_paths(std::span<const PathTaps> paths, bool crossfade) override;
  // The poster builds the bank itself: nothing is left to prepare once a post returns.
  bool preparing_matrix() const override { return false; }

  // One matrix's filters. A per-path update (set_paths) shares every other
  // path's spectra with the filters it builds on and transforms only the
  // named paths.
  struct Filters {
    // The paths' routing, gains, delays and polarities (what set_matrix
    // checks a new matrix against); the taps of paths set_paths replaced
    // since are in `spectra` only.
    std::shared_ptr<const RoutingMatrix> matrix;
    std::vector<std::size_t> partitions;  // per path
    std::vector<std::size_t> skipped;     // per path: whole segments of its delay (q)
    CpuMatrixShape shape;                 // what the calls cost, set_paths' taps included
    // Per path: partition j at j * stride_, scaled 1/N.
    std::vector<std::shared_ptr<const AlignedFloats>> spectra;
  };
  // Filters as the calls run them.
  struct Bank {
    Filters filters;
    AlignedFloats tails;           // per output, stride_ floats: tail of the current segment
    bool crossfade = false;        // how it takes over from the bank before it
    Bank* next_retired = nullptr;  // its link in retired_
  };

  Filters make_filters(const RoutingMatrix& m) const;
  std::unique_ptr<Bank> make_bank(Filters filters, bool crossfade) const;
  // The partitions' spectra of `taps` on `path`'s gain, polarity and the
  // remainder of its delay (the taps MatrixPath::effective_taps gives, to
  // the bit); `time` is 2P floats of scratch.
  std::shared_ptr<const AlignedFloats> path_spectra(const MatrixPath& path,
                                                    std::span<const float> taps,
                                                    AlignedFloats& time) const;

  // --- the caller of process (inside the callback: the audio thread) ----
  // process() without its checks; allocates, frees and locks nothing.
  void run_call(std::span<const float> in, std::span<float> out, std::size_t frames,
                Layout layout) noexcept;
  void compute_tails(Bank& bank);
  // Output positions [position_, position_ + n) of the current segment for
  // every output of `bank`, into planar `dst` (frames per channel) at `done`.
  void emit(Bank& bank, float* dst, std::size_t done, std::size_t n, std::size_t frames);
  // `segments` (>= 2) whole segments from position 0 of the current one, of
  // the staged input at `done`, with the active bank and no crossfade: every
  // input's transforms first, then each output's products for all of them
  // at once (each filter spectrum read from memory once, not once a
  // segment), then the inverse transforms. The same sums as emit and
  // compute_tails segment by segment, so the output does not depend on it.
  void run_segments(std::size_t segments, std::size_t done, std::size_t frames);
  // The terms of output `o`'s sum for the segment in delay-line slot
  // `segment`: pointers to the input spectra and to the filter spectra they
  // meet, into xs and hs; returns their count (at most max_terms_). `which`:
  // the head (partition 0 of undelayed paths; their input spectrum in
  // `current` when not null, per input at stride_, else in the delay line),
  // the tail (every other term) or all of them.
  enum class Terms { head, tail, all };
  std::size_t gather_terms(const Filters& filters, std::size_t o, std::size_t segment, Terms which,
                           const float* current, const float** xs, const float** hs) const;
  const float* fdl_slot(std::size_t input, std::size_t slot) const {
    return fdl_.data() + (input * fdl_slots_ + slot) * stride_;
  }
  // Hands a bank no call will run again to the poster, which frees it.
  void retire(Bank* bank) noexcept;

  // --- the poster (set_matrix, set_paths, post_matrix, post_paths) -------
  // Frees the banks the calls retired.
  void free_retired();
  // In the callback: throws std::invalid_argument, naming the numbers, where
  // a call of `shape` would not fit the callback's share of a call.
  void check_fits_callback(const CpuMatrixShape& shape) const;
  // Makes `bank` the one the next call takes; one posted and not yet taken
  // is freed (`merge_crossfade`: a crossfade it asked for carries over).
  void publish(std::unique_ptr<Bank> bank, bool merge_crossfade);

  const std::size_t max_block_, max_taps_, max_delay_;
  const std::size_t n_in_, n_out_, n_paths_;
  std::size_t partition_ = 0, stride_ = 0, bins_ = 0, fdl_slots_ = 0;
  std::size_t batch_segments_ = 1;  // the most whole segments run_segments takes
  std::size_t max_terms_ = 0;       // the most terms of one output's sum
  std::shared_ptr<const fftw::RealFftPair> fft_;
  std::vector<std::vector<std::size_t>> paths_of_output_;
  bool in_callback_ = false;  // realtime() is offered (see the top)
  double call_ns_ = 0.0;      // what a call of max_block_ frames lasts at the stream's rate
  std::string placement_;     // where it runs and why, for description()

  AlignedFloats windows_;  // per input: 2P samples
  AlignedFloats fdl_;      // per input: fdl_slots_ spectra
  AlignedFloats current_;  // per input: spectrum of the current window
  AlignedFloats acc_;      // one spectrum
  AlignedFloats batch_;    // batch_segments_ spectra
  // (batch_segments_ + 1) x max_terms_ pointers each: the terms gather_terms finds.
  std::vector<const float*> term_x_, term_h_;
  AlignedFloats time_;                              // 2P samples
  AlignedFloats staged_in_, staged_out_, old_out_;  // planar
  std::size_t position_ = 0;                        // frames already in the current segment
  std::size_t slot_ = 0;                            // delay-line slot the current segment goes to

  std::unique_ptr<Bank> active_;  // the caller of process's
  Filters latest_;                // the poster's: the filters posted last
  std::atomic<Bank*> posted_{nullptr};
  std::atomic<Bank*> retired_{nullptr};
};

CpuMatrixEngine::CpuMatrixEngine(const RoutingMatrix& matrix, const EngineOptions& options)
    : max_block_(options.max_block_frames),
      max_taps_(options.max_taps == 0 ? matrix.max_filter_taps() : options.max_taps),
      // No reach beyond what is asked: each call writes a segment of every
      // input into the delay line, so its memory is walked through once per
      // reach; a 65536-frame reserve for 64 inputs was 35 MB of cold pages a
      // call stepped into, and on the dev VM 2-4x the late periods of a
      // compact line (docs/performance.md, SOFA). Delays under a partition
      // cost no segment (their remainder is folded into the taps), so the
      // reach is at least that: never 0, which would mean an engine that
      // folds delays (MatrixEngine::max_delay_frames).
      max_delay_(std::max({options.max_delay_frames, matrix.max_delay_frames(),
                           options.max_block_frames == 0 ? std::size_t(1)
                                                         : chosen_partition(matrix, options) - 1})),
      n_in_(matrix.inputs()),
      n_out_(matrix.outputs()),
      n_paths_(matrix.paths().size()) {
  if (max_block_ == 0) throw std::invalid_argument("cpu matrix engine: max_block_frames is 0");
  if (matrix.max_filter_taps() > max_taps_)
    throw std::invalid_argument("cpu matrix engine: the matrix's longest path has " +
                                std::to_string(matrix.max_filter_taps()) +
                                " taps, more than max_taps " + std::to_string(max_taps_));
  partition_ = chosen_partition(matrix, options);
  fft_ = fftw::RealFftPair::get(2 * partition_);
  bins_ = partition_ + 1;
  stride_ = fftw::padded_bins(2 * partition_) * 2;
  // A path reaches back q + k - 1 segments (q <= max_delay_ / P whole
  // segments of delay, k <= (P - 1 + max_taps_) / P partitions with the
  // remainder's zeros); slot slot_ itself still holds the segment
  // fdl_slots_ back until the current one completes.
  // run_segments writes its segments' spectra before it reads any: the
  // first still reads back as far as one segment does.
  batch_segments_ = std::clamp<std::size_t>(max_block_ / partition_, 1, kMaxBatchSegments);
  fdl_slots_ = delay_line_segments(max_taps_, max_delay_, partition_) + batch_segments_ - 1;
  const std::size_t n_in = matrix.inputs(), n_out = matrix.outputs();
  windows_ = AlignedFloats(n_in * 2 * partition_);
  fdl_ = AlignedFloats(n_in * fdl_slots_ * stride_);
  current_ = AlignedFloats(n_in * stride_);
  acc_ = AlignedFloats(stride_);
  time_ = AlignedFloats(2 * partition_);
  staged_in_ = AlignedFloats(n_in * max_block_);
  staged_out_ = AlignedFloats(n_out * max_block_);
  old_out_ = AlignedFloats(n_out * max_block_);
  paths_of_output_.resize(n_out);
  for (std::size_t p = 0; p < matrix.paths().size(); ++p)
    paths_of_output_[matrix.paths()[p].output].push_back(p);
  // A path of at most max_taps_ taps spans at most this many partitions,
  // whatever its delay's remainder (set_matrix and set_paths refuse more taps).
  for (const auto& paths : paths_of_output_)
    max_terms_ =
        std::max(max_terms_, paths.size() * partitions_for_any_delay(max_taps_, partition_));
  term_x_.resize((batch_segments_ + 1) * max_terms_);
  term_h_.resize((batch_segments_ + 1) * max_terms_);
  if (batch_segments_ > 1) batch_ = AlignedFloats(batch_segments_ * stride_);
  latest_ = make_filters(matrix);
  active_ = make_bank(latest_, false);
  if (options.realtime_calls) {
    const double rate = options.sample_rate > 0 ? double(options.sample_rate) : kDefaultRate;
    const double call_ns = 1e9 * double(max_block_) / rate;
    const double worst_ns = cpu_matrix_worst_call_ns(latest_.shape, max_block_, partition_);
    call_ns_ = call_ns;
    in_callback_ = 2.0 * worst_ns <= kCallbackShare * call_ns;
    char text[200];
    std::snprintf(text, sizeof text,
                  "; %s: worst call %.0f us by the cost model, twice that (a crossfade) %s half "
                  "of a %zu-frame call (%.0f us)",
                  in_callback_ ? "in the audio callback" : "not in the callback", worst_ns / 1e3,
                  in_callback_ ? "within" : "over", max_block_, call_ns / 1e3);
    placement_ = text;
  }
}

CpuMatrixEngine::~CpuMatrixEngine() {
  // Both sides have stopped: what is posted or retired is freed here.
  const std::unique_ptr<Bank> posted(posted_.exchange(nullptr, std::memory_order_acquire));
  free_retired();
}

std::string CpuMatrixEngine::description() const {
  return "cpu: matrix " + std::to_string(n_in_) + " -> " + std::to_string(n_out_) + ", " +
         std::to_string(n_paths_) + " paths, partitioned FFT, " + std::to_string(2 * partition_) +
         "-point, " + std::to_string(fdl_slots_) + " partitions (delays up to " +
         std::to_string(max_delay_) + " frames)" + placement_;
}

std::shared_ptr<const AlignedFloats> CpuMatrixEngine::path_spectra(const MatrixPath& path,
                                                                   std::span<const float> taps,
                                                                   AlignedFloats& time) const {
  const float scale = 1.0f / float(2 * partition_);
  const double gain = std::pow(10.0, path.gain_db / 20.0) * (path.invert ? -1.0 : 1.0);
  const std::size_t leading = split_delay(path.delay_frames, partition_).remainder;
  const std::size_t length = leading + taps.size();
  const std::size_t k = div_up(length, partition_);
  auto spectra = std::make_shared<AlignedFloats>(k * stride_);
  for (std::size_t j = 0; j < k; ++j) {
    time.zero();
    const std::size_t first = j * partition_;
    const std::size_t last = std::min(first + partition_, length);
    for (std::size_t t = std::max(first, leading); t < last; ++t)
      time.data()[t - first] = static_cast<float>(double(taps[t - leading]) * gain) * scale;
    fft_->forward(time.data(), spectra->data() + j * stride_);
  }
  return spectra;
}

CpuMatrixEngine::Filters CpuMatrixEngine::make_filters(const RoutingMatrix& m) const {
  Filters filters;
  filters.matrix = std::make_shared<const RoutingMatrix>(m);
  filters.shape = CpuMatrixShape::of(m);
  AlignedFloats time(2 * partition_);
  for (const MatrixPath& path : m.paths()) {
    filters.spectra.push_back(path_spectra(path, path.taps, time));
    filters.partitions.push_back(
        partitions_reached(path.delay_frames, path.taps.size(), partition_));
    filters.skipped.push_back(split_delay(path.delay_frames, partition_).segments);
  }
  return filters;
}

std::unique_ptr<CpuMatrixEngine::Bank> CpuMatrixEngine::make_bank(Filters filters,
                                                                  bool crossfade) const {
  auto bank = std::make_unique<Bank>();
  bank->filters = std::move(filters);
  bank->tails = AlignedFloats(n_out_ * stride_);
  bank->crossfade = crossfade;
  return bank;
}

std::size_t CpuMatrixEngine::gather_terms(const Filters& filters, std::size_t o,
                                          std::size_t segment, Terms which, const float* current,
                                          const float** xs, const float** hs) const {
  const auto& paths = filters.matrix->paths();
  std::size_t n = 0;
  for (std::size_t p : paths_of_output_[o]) {
    // Partition j of the path meets the spectrum of segment s - q - j
    // (q + j < fdl_slots_: the delay line reaches that far).
    const std::size_t q = filters.skipped[p], input = paths[p].input;
    const float* h = filters.spectra[p]->data();
    for (std::size_t j = 0; j < filters.partitions[p]; ++j) {
      const bool head = q == 0 && j == 0;
      if (which == Terms::head && !head) break;
      if (which == Terms::tail && head) continue;
      xs[n] = head && current != nullptr
                  ? current + input * stride_
                  : fdl_slot(input, (segment + fdl_slots_ - q - j) % fdl_slots_);
      hs[n] = h + j * stride_;
      ++n;
    }
  }
  return n;
}

void CpuMatrixEngine::compute_tails(Bank& bank) {
  const float** xs = term_x_.data();
  const float** hs = term_h_.data();
  for (std::size_t o = 0; o < n_out_; ++o) {
    const std::size_t n = gather_terms(bank.filters, o, slot_, Terms::tail, nullptr, xs, hs);
    simd::complex_products(bank.tails.data() + o * stride_, nullptr, xs, hs, n, 0, bins_);
  }
}

void CpuMatrixEngine::emit(Bank& bank, float* dst, std::size_t done, std::size_t n,
                           std::size_t frames) {
  const float** xs = term_x_.data();
  const float** hs = term_h_.data();
  for (std::size_t o = 0; o < paths_of_output_.size(); ++o) {
    float* y = dst + o * frames + done;
    if (paths_of_output_[o].empty()) {
      std::fill_n(y, n, 0.0f);
      continue;
    }
    // Delayed by a segment or more, a path is all in the tail.
    const std::size_t terms =
        gather_terms(bank.filters, o, slot_, Terms::head, current_.data(), xs, hs);
    simd::complex_products(acc_.data(), bank.tails.data() + o * stride_, xs, hs, terms, 0, bins_);
    fft_->inverse(acc_.data(), time_.data());
    std::copy_n(time_.data() + partition_ + position_, n, y);
  }
}

void CpuMatrixEngine::run_segments(std::size_t segments, std::size_t done, std::size_t frames) {
  const std::size_t P = partition_;
  const float* staged = staged_in_.data();
  for (std::size_t c = 0; c < n_in_; ++c) {
    float* window = windows_.data() + c * 2 * P;
    for (std::size_t k = 0; k < segments; ++k) {
      std::copy_n(staged + c * frames + done + k * P, P, window + P);
      fft_->forward(window, fdl_.data() + (c * fdl_slots_ + (slot_ + k) % fdl_slots_) * stride_);
      std::copy_n(window + P, P, window);
    }
    std::fill_n(window + P, P, 0.0f);
  }
  Bank& bank = *active_;
  for (std::size_t o = 0; o < n_out_; ++o) {
    float* y = staged_out_.data() + o * frames + done;
    if (paths_of_output_[o].empty()) {
      std::fill_n(y, segments * P, 0.0f);
      continue;
    }
    // The first segment's tail is in the bank already (computed when the
    // segment before it completed): only its head is added. The tail of the
    // segment after the batch is computed in the same pass (the products
    // compute_tails would do), so each filter spectrum is read once a call.
    float* tail = bank.tails.data() + o * stride_;
    const float** xs = term_x_.data();
    const float** hs = term_h_.data();
    std::size_t terms[kMaxBatchSegments + 1];
    for (std::size_t k = 0; k <= segments; ++k) {
      const Terms which = k == 0 ? Terms::head : k == segments ? Terms::tail : Terms::all;
      terms[k] = gather_terms(bank.filters, o, (slot_ + k) % fdl_slots_, which, nullptr,
                              xs + k * max_terms_, hs + k * max_terms_);
    }
    for (std::size_t first = 0; first < bins_; first += kStretchBins) {
      const std::size_t count = std::min(kStretchBins, bins_ - first);
      for (std::size_t k = 0; k < segments; ++k)
        simd::complex_products(batch_.data() + k * stride_, k == 0 ? tail : nullptr,
                               xs + k * max_terms_, hs + k * max_terms_, terms[k], first, count);
      // After the first segment has read this stretch of the old tail.
      simd::complex_products(tail, nullptr, xs + segments * max_terms_, hs + segments * max_terms_,
                             terms[segments], first, count);
    }
    for (std::size_t k = 0; k < segments; ++k) {
      fft_->inverse(batch_.data() + k * stride_, time_.data());
      std::copy_n(time_.data() + P, P, y + k * P);
    }
  }
  slot_ = (slot_ + segments) % fdl_slots_;
  position_ = 0;
}

void CpuMatrixEngine::process(std::span<const float> in, std::span<float> out, std::size_t frames,
                              Layout layout) {
  if (frames == 0 || frames > max_block_)
    throw std::invalid_argument("cpu matrix engine: block of " + std::to_string(frames) +
                                " frames (1.." + std::to_string(max_block_) + ")");
  if (in.size() < n_in_ * frames || out.size() < n_out_ * frames)
    throw std::invalid_argument("cpu matrix engine: buffers smaller than the block");
  run_call(in, out, frames, layout);
}

bool CpuMatrixEngine::process_by(std::span<const float> in, std::span<float> out,
                                 std::size_t frames, Layout layout,
                                 const timespec& deadline) noexcept {
  if (frames == 0 || frames > max_block_ || in.size() < n_in_ * frames ||
      out.size() < n_out_ * frames)
    return false;
  run_call(in, out, frames, layout);
  // Nothing to wait for: the call did all its work. Past the deadline it is
  // late all the same (the contract: silence, and the stream has advanced).
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (now.tv_sec > deadline.tv_sec ||
      (now.tv_sec == deadline.tv_sec && now.tv_nsec > deadline.tv_nsec)) {
    std::fill_n(out.data(), n_out_ * frames, 0.0f);
    return false;
  }
  return true;
}

void CpuMatrixEngine::run_call(std::span<const float> in, std::span<float> out, std::size_t frames,
                               Layout layout) noexcept {
  const std::size_t n_in = n_in_, n_out = n_out_, P = partition_;

  // A posted bank takes over at this call; the one it replaces goes back to
  // the poster at the end of the call (a crossfade runs it until then).
  Bank* fade_from = nullptr;
  Bank* replaced = nullptr;
  if (posted_.load(std::memory_order_relaxed) != nullptr) {
    if (Bank* next = posted_.exchange(nullptr, std::memory_order_acquire)) {
      compute_tails(*next);
      replaced = active_.release();
      active_.reset(next);
      if (next->crossfade) fade_from = replaced;
    }
  }

  float* staged = staged_in_.data();
  for (std::size_t c = 0; c < n_in; ++c)
    for (std::size_t f = 0; f < frames; ++f)
      staged[c * frames + f] = layout == Layout::planar ? in[c * frames + f] : in[f * n_in + c];

  for (std::size_t done = 0; done < frames;) {
    if (position_ == 0 && fade_from == nullptr && frames - done >= 2 * P && batch_segments_ > 1) {
      const std::size_t segments = std::min((frames - done) / P, batch_segments_);
      run_segments(segments, done, frames);
      done += segments * P;
      continue;
    }
    const std::size_t n = std::min(frames - done, P - position_);
    for (std::size_t c = 0; c < n_in; ++c) {
      float* window = windows_.data() + c * 2 * P;
      std::copy_n(staged + c * frames + done, n, window + P + position_);
      fft_->forward(window, current_.data() + c * stride_);
    }
    emit(*active_, staged_out_.data(), done, n, frames);
    if (fade_from) emit(*fade_from, old_out_.data(), done, n, frames);
    position_ += n;
    done += n;
    if (position_ == P) {
      for (std::size_t c = 0; c < n_in; ++c) {
        std::memcpy(fdl_.data() + (c * fdl_slots_ + slot_) * stride_, current_.data() + c * stride_,
                    stride_ * sizeof(float));
        float* window = windows_.data() + c * 2 * P;
        std::copy_n(window + P, P, window);
        std::fill_n(window + P, P, 0.0f);
      }
      slot_ = (slot_ + 1) % fdl_slots_;
      position_ = 0;
      compute_tails(*active_);
      if (fade_from) compute_tails(*fade_from);
    }
  }

  float* y = staged_out_.data();
  if (fade_from) {
    const float* old = old_out_.data();
    for (std::size_t c = 0; c < n_out; ++c)
      for (std::size_t f = 0; f < frames; ++f) {
        const float w = float(f + 1) / float(frames);
        const std::size_t i = c * frames + f;
        y[i] = old[i] + w * (y[i] - old[i]);
      }
  }
  for (std::size_t c = 0; c < n_out; ++c)
    for (std::size_t f = 0; f < frames; ++f)
      out[layout == Layout::planar ? c * frames + f : f * n_out + c] = y[c * frames + f];
  if (replaced != nullptr) retire(replaced);
}

void CpuMatrixEngine::retire(Bank* bank) noexcept {
  Bank* head = retired_.load(std::memory_order_relaxed);
  do {
    bank->next_retired = head;
  } while (!retired_.compare_exchange_weak(head, bank, std::memory_order_release,
                                           std::memory_order_relaxed));
}

void CpuMatrixEngine::free_retired() {
  for (Bank* bank = retired_.exchange(nullptr, std::memory_order_acquire); bank != nullptr;) {
    const std::unique_ptr<Bank> owned(bank);
    bank = owned->next_retired;
  }
}

void CpuMatrixEngine::publish(std::unique_ptr<Bank> bank, bool merge_crossfade) {
  // Only the poster stores a bank and the call only takes one: between these
  // two steps a call finds nothing posted, and runs what it ran.
  const std::unique_ptr<Bank> superseded(posted_.exchange(nullptr, std::memory_order_acquire));
  if (superseded && merge_crossfade) bank->crossfade = bank->crossfade || superseded->crossfade;
  posted_.store(bank.release(), std::memory_order_release);
}

void CpuMatrixEngine::check_fits_callback(const CpuMatrixShape& shape) const {
  if (!in_callback_) return;
  const double worst_ns = cpu_matrix_worst_call_ns(shape, max_block_, partition_);
  if (2.0 * worst_ns <= kCallbackShare * call_ns_) return;
  char text[480];
  std::snprintf(text, sizeof text,
                "cpu matrix engine: the new filters' worst call (%.0f us by the cost model, twice "
                "that for a crossfade) does not fit half of a %zu-frame call (%.0f us) in the "
                "audio callback, where the engine runs since the matrix it started with fitted "
                "(worst call %.0f us); the running filters keep running. Start with the new "
                "filters (the engine then runs on a thread of its own) or use a longer period",
                worst_ns / 1e3, max_block_, call_ns_ / 1e3,
                cpu_matrix_worst_call_ns(latest_.shape, max_block_, partition_) / 1e3);
  throw std::invalid_argument(text);
}

void CpuMatrixEngine::post_matrix(const RoutingMatrix& matrix, bool crossfade) {
  free_retired();
  check_matrix_swap(*latest_.matrix, matrix, max_taps_, max_delay_);
  check_fits_callback(CpuMatrixShape::of(matrix));
  Filters filters = make_filters(matrix);
  latest_ = filters;
  publish(make_bank(std::move(filters), crossfade), false);
}

void CpuMatrixEngine::post_paths(std::span<const PathTaps> paths, bool crossfade) {
  free_retired();
  const RoutingMatrix& running = *latest_.matrix;
  check_path_taps(running.paths(), paths, max_taps_, max_delay_);
  // Priced and built before anything changes, so that a failure keeps what runs.
  CpuMatrixShape shape = latest_.shape;
  for (const PathTaps& update : paths) shape.paths[update.path].taps = update.taps.size();
  check_fits_callback(shape);
  AlignedFloats time(2 * partition_);
  Filters next = latest_;
  next.shape = std::move(shape);
  for (const PathTaps& update : paths) {
    const MatrixPath& path = running.paths()[update.path];
    next.spectra[update.path] = path_spectra(path, update.taps, time);
    next.partitions[update.path] =
        partitions_reached(path.delay_frames, update.taps.size(), partition_);
  }
  latest_ = next;
  publish(make_bank(std::move(next), crossfade), true);
}

void CpuMatrixEngine::reset() {
  windows_.zero();
  fdl_.zero();
  position_ = 0;
  slot_ = 0;
  active_->tails.zero();
}

}  // namespace

std::unique_ptr<MatrixEngine> make_cpu_matrix_engine(const RoutingMatrix& matrix,
                                                     const EngineOptions& options) {
  return std::make_unique<CpuMatrixEngine>(matrix, options);
}

}  // namespace tapstream

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

#include "dsp/cpu/cpu_matrix_engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsp/cpu/cpu_simd.hpp"
#include "dsp/cpu/fftw_plan.hpp"
#include "dsp/model/segment_delay.hpp"

namespace tapstream {
namespace {

using fftw::AlignedFloats;

std::size_t div_up(std::size_t n, std::size_t m) {
  return (n + m - 1) / m;
}

// Rough costs on the development machine, enough to rank partition sizes
// against each other: an FFTW real transform pair of N points and one complex
// multiply-add of a bin, in nanoseconds.
double fft_pair_ns(std::size_t n) {
  return 0.25 * double(n) * std::log2(double(n));
}
constexpr double kNsPerBinMac = 1.0;

// Average cost per frame of calls of `block` frames with partition p.
double cost_per_frame(const RoutingMatrix& m, std::size_t block, std::size_t p) {
  const double bins = double(p + 1);
  double tail_macs = 0.0, head_macs = 0.0;
  for (const MatrixPath& path : m.paths()) {
    const std::size_t k = partitions_reached(path.delay_frames, path.taps.size(), p);
    const bool head = path.delay_frames < p;
    tail_macs += double(head ? k - 1 : k) * bins;
    head_macs += head ? bins : 0.0;
  }
  const double chunks = double(div_up(block, p)) + (block % p != 0 && block > p ? 1.0 : 0.0);
  const double per_call =
      chunks * (double(m.inputs() + m.outputs()) * fft_pair_ns(2 * p) + head_macs * kNsPerBinMac) +
      double(block) / double(p) * tail_macs * kNsPerBinMac;
  return per_call / double(block);
}

std::size_t best_partition(const RoutingMatrix& m, std::size_t block) {
  std::size_t best = 16;
  double best_cost = std::numeric_limits<double>::infinity();
  for (std::size_t p = 16; p <= 65536; p *= 2) {
    const double c = cost_per_frame(m, block, p);
    if (c < best_cost) {
      best_cost = c;
      best = p;
    }
  }
  return best;
}

// acc += x * h over `bins` interleaved complex bins (AVX-512, AVX2+FMA or
// plain, chosen at run time: dsp/cpu/cpu_simd).
void multiply_add(float* acc, const float* x, const float* h, std::size_t bins) {
  simd::complex_multiply_add(acc, x, h, bins);
}

class CpuMatrixEngine final : public MatrixEngine {
 public:
  CpuMatrixEngine(const RoutingMatrix& matrix, const EngineOptions& options);

  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout layout) override;
  void set_matrix(const RoutingMatrix& matrix, bool crossfade) override;
  void set_paths(std::span<const PathTaps> paths, bool crossfade) override;
  void reset() override;

  std::size_t inputs() const override { return active_->matrix->inputs(); }
  std::size_t outputs() const override { return active_->matrix->outputs(); }
  std::size_t max_block_frames() const override { return max_block_; }
  std::size_t max_taps() const override { return max_taps_; }
  std::size_t max_delay_frames() const override { return max_delay_; }
  std::string name() const override { return "cpu"; }
  std::string description() const override {
    return "cpu: matrix " + std::to_string(inputs()) + " -> " + std::to_string(outputs()) + ", " +
           std::to_string(active_->matrix->paths().size()) + " paths, partitioned FFT, " +
           std::to_string(2 * partition_) + "-point, " + std::to_string(fdl_slots_) +
           " partitions (delays up to " + std::to_string(max_delay_) + " frames)";
  }

 private:
  // Everything that depends on one matrix's filters. A per-path update
  // (set_paths) makes a bank that shares every other path's spectra with the
  // running one and transforms only the named paths.
  struct Bank {
    // The paths' routing, gains, delays and polarities (what set_matrix
    // checks a new matrix against); the taps of paths set_paths replaced
    // since are in `spectra` only.
    std::shared_ptr<const RoutingMatrix> matrix;
    std::vector<std::size_t> partitions;  // per path
    std::vector<std::size_t> skipped;     // per path: whole segments of its delay (q)
    // Per path: partition j at j * stride_, scaled 1/N.
    std::vector<std::shared_ptr<const AlignedFloats>> spectra;
    AlignedFloats tails;  // per output, stride_ floats: tail of the current segment
  };

  std::unique_ptr<Bank> make_bank(const RoutingMatrix& m) const;
  // The partitions' spectra of `taps` on `path`'s gain, polarity and the
  // remainder of its delay (the taps MatrixPath::effective_taps gives, to
  // the bit); `time` is 2P floats of scratch.
  std::shared_ptr<const AlignedFloats> path_spectra(const MatrixPath& path,
                                                    std::span<const float> taps,
                                                    AlignedFloats& time) const;
  void compute_tails(Bank& bank) const;
  // Output positions [position_, position_ + n) of the current segment for
  // every output of `bank`, into planar `dst` (frames per channel) at `done`.
  void emit(Bank& bank, float* dst, std::size_t done, std::size_t n, std::size_t frames);
  const float* fdl_slot(std::size_t input, std::size_t slot) const {
    return fdl_.data() + (input * fdl_slots_ + slot) * stride_;
  }

  std::size_t max_block_, max_taps_, max_delay_;
  std::size_t partition_ = 0, stride_ = 0, bins_ = 0, fdl_slots_ = 0;
  std::shared_ptr<const fftw::RealFftPair> fft_;
  std::vector<std::vector<std::size_t>> paths_of_output_;

  AlignedFloats windows_;                           // per input: 2P samples
  AlignedFloats fdl_;                               // per input: fdl_slots_ spectra
  AlignedFloats current_;                           // per input: spectrum of the current window
  AlignedFloats acc_;                               // one spectrum
  AlignedFloats time_;                              // 2P samples
  AlignedFloats staged_in_, staged_out_, old_out_;  // planar
  std::size_t position_ = 0;                        // frames already in the current segment
  std::size_t slot_ = 0;                            // delay-line slot the current segment goes to

  std::unique_ptr<Bank> active_, pending_, retired_;
  bool pending_crossfade_ = false;
};

CpuMatrixEngine::CpuMatrixEngine(const RoutingMatrix& matrix, const EngineOptions& options)
    : max_block_(options.max_block_frames),
      max_taps_(options.max_taps == 0 ? matrix.max_filter_taps() : options.max_taps),
      max_delay_(
          std::max({options.max_delay_frames, matrix.max_delay_frames(), std::size_t(65536)})) {
  if (max_block_ == 0) throw std::invalid_argument("cpu matrix engine: max_block_frames is 0");
  if (matrix.max_filter_taps() > max_taps_)
    throw std::invalid_argument("cpu matrix engine: the matrix's longest path has " +
                                std::to_string(matrix.max_filter_taps()) +
                                " taps, more than max_taps " + std::to_string(max_taps_));
  partition_ = best_partition(matrix, max_block_);
  fft_ = fftw::RealFftPair::get(2 * partition_);
  bins_ = partition_ + 1;
  stride_ = fftw::padded_bins(2 * partition_) * 2;
  // A path reaches back q + k - 1 segments (q <= max_delay_ / P whole
  // segments of delay, k <= (P - 1 + max_taps_) / P partitions with the
  // remainder's zeros); slot slot_ itself still holds the segment
  // fdl_slots_ back until the current one completes.
  fdl_slots_ = delay_line_segments(max_taps_, max_delay_, partition_);
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
  active_ = make_bank(matrix);
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

std::unique_ptr<CpuMatrixEngine::Bank> CpuMatrixEngine::make_bank(const RoutingMatrix& m) const {
  auto bank = std::make_unique<Bank>();
  bank->matrix = std::make_shared<const RoutingMatrix>(m);
  AlignedFloats time(2 * partition_);
  for (const MatrixPath& path : m.paths()) {
    bank->spectra.push_back(path_spectra(path, path.taps, time));
    bank->partitions.push_back(partitions_reached(path.delay_frames, path.taps.size(), partition_));
    bank->skipped.push_back(split_delay(path.delay_frames, partition_).segments);
  }
  bank->tails = AlignedFloats(m.outputs() * stride_);
  return bank;
}

void CpuMatrixEngine::compute_tails(Bank& bank) const {
  bank.tails.zero();
  const auto& paths = bank.matrix->paths();
  for (std::size_t p = 0; p < paths.size(); ++p) {
    float* tail = bank.tails.data() + paths[p].output * stride_;
    // Partition j of the path meets the spectrum of segment s - q - j.
    const std::size_t q = bank.skipped[p];
    for (std::size_t j = q == 0 ? 1 : 0; j < bank.partitions[p]; ++j) {
      const std::size_t slot = (slot_ + fdl_slots_ - q - j) % fdl_slots_;
      multiply_add(tail, fdl_slot(paths[p].input, slot), bank.spectra[p]->data() + j * stride_,
                   bins_);
    }
  }
}

void CpuMatrixEngine::emit(Bank& bank, float* dst, std::size_t done, std::size_t n,
                           std::size_t frames) {
  const auto& paths = bank.matrix->paths();
  for (std::size_t o = 0; o < paths_of_output_.size(); ++o) {
    float* y = dst + o * frames + done;
    if (paths_of_output_[o].empty()) {
      std::fill_n(y, n, 0.0f);
      continue;
    }
    std::memcpy(acc_.data(), bank.tails.data() + o * stride_, stride_ * sizeof(float));
    for (std::size_t p : paths_of_output_[o]) {
      if (bank.skipped[p] != 0) continue;  // delayed by a segment or more: all in the tail
      multiply_add(acc_.data(), current_.data() + paths[p].input * stride_, bank.spectra[p]->data(),
                   bins_);
    }
    fft_->inverse(acc_.data(), time_.data());
    std::copy_n(time_.data() + partition_ + position_, n, y);
  }
}

void CpuMatrixEngine::process(std::span<const float> in, std::span<float> out, std::size_t frames,
                              Layout layout) {
  const std::size_t n_in = inputs(), n_out = outputs(), P = partition_;
  if (frames == 0 || frames > max_block_)
    throw std::invalid_argument("cpu matrix engine: block of " + std::to_string(frames) +
                                " frames (1.." + std::to_string(max_block_) + ")");
  if (in.size() < n_in * frames || out.size() < n_out * frames)
    throw std::invalid_argument("cpu matrix engine: buffers smaller than the block");

  Bank* fade_from = nullptr;
  if (pending_) {
    compute_tails(*pending_);
    if (pending_crossfade_) fade_from = active_.get();
    retired_ = std::move(active_);
    active_ = std::move(pending_);
  }

  float* staged = staged_in_.data();
  for (std::size_t c = 0; c < n_in; ++c)
    for (std::size_t f = 0; f < frames; ++f)
      staged[c * frames + f] = layout == Layout::planar ? in[c * frames + f] : in[f * n_in + c];

  for (std::size_t done = 0; done < frames;) {
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
}

void CpuMatrixEngine::set_matrix(const RoutingMatrix& matrix, bool crossfade) {
  const RoutingMatrix& running = pending_ ? *pending_->matrix : *active_->matrix;
  check_matrix_swap(running, matrix, max_taps_, max_delay_);
  retired_.reset();
  pending_ = make_bank(matrix);
  pending_crossfade_ = crossfade;
}

void CpuMatrixEngine::set_paths(std::span<const PathTaps> paths, bool crossfade) {
  const RoutingMatrix& running = pending_ ? *pending_->matrix : *active_->matrix;
  check_path_taps(running.paths(), paths, max_taps_, max_delay_);
  // Transformed before anything changes, so that a failure keeps what runs.
  AlignedFloats time(2 * partition_);
  std::vector<std::shared_ptr<const AlignedFloats>> spectra;
  spectra.reserve(paths.size());
  for (const PathTaps& update : paths)
    spectra.push_back(path_spectra(running.paths()[update.path], update.taps, time));
  if (!pending_) {
    auto next = std::make_unique<Bank>();
    next->matrix = active_->matrix;
    next->partitions = active_->partitions;
    next->skipped = active_->skipped;
    next->spectra = active_->spectra;
    next->tails = AlignedFloats(active_->tails.size());
    retired_.reset();
    pending_ = std::move(next);
    pending_crossfade_ = crossfade;
  } else {
    pending_crossfade_ = pending_crossfade_ || crossfade;
  }
  for (std::size_t u = 0; u < paths.size(); ++u) {
    const std::size_t p = paths[u].path;
    const MatrixPath& path = running.paths()[p];
    pending_->partitions[p] =
        partitions_reached(path.delay_frames, paths[u].taps.size(), partition_);
    pending_->spectra[p] = std::move(spectra[u]);
  }
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

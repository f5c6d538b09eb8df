#pragma once
// A routing matrix: N input channels, M output channels and a set of paths,
// each a filter from one input to one output with a gain, a delay and a
// polarity. What meets at an output is summed; an output no path reaches is
// silent. One filter per channel is the diagonal case. Immutable once built,
// like FilterBank, so the control plane can build one off the audio path and
// hand it over whole.

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "dsp/model/filter_bank.hpp"

namespace tapstream {

// Everything a path is but its taps: where it runs, its gain, delay and
// polarity, and where its taps came from. A field of a path belongs here
// (not in MatrixPath beside the taps), so that without_taps() copies it.
struct PathGeometry {
  std::size_t input = 0;
  std::size_t output = 0;
  double gain_db = 0.0;
  std::size_t delay_frames = 0;
  bool invert = false;
  std::string source;          // where the taps came from ("woofer.txt", "ir.wav channel 2")
  std::filesystem::path file;  // the coefficient file they were read from (empty: none)
};

struct MatrixPath : PathGeometry {
  std::vector<float> taps;

  // The taps an engine that folds delays runs: delay_frames zeros, then taps
  // x gain x polarity. An engine that delays natively (its delay line read at
  // an offset) asks for fewer leading zeros (the delay it does not take).
  std::vector<float> effective_taps() const { return effective_taps(delay_frames); }
  std::vector<float> effective_taps(std::size_t leading_zeros) const;
  // A copy of the path with no taps (every PathGeometry field): what an
  // engine remembers of a running path whose taps live elsewhere, without
  // copying them (thousands of long filters are GBs).
  MatrixPath without_taps() const {
    MatrixPath path;
    static_cast<PathGeometry&>(path) = *this;
    return path;
  }
};

class RoutingMatrix {
 public:
  // The longest delay a path may have: 2^22 frames (87 s at 48 kHz). A delay
  // is not filter length: it does not count against `max_taps`.
  static constexpr std::size_t kMaxDelayFrames = std::size_t(1) << 22;

  // Throws std::invalid_argument naming the path (by its index in `paths`
  // and its input -> output pair) and the reason: an input or output out of
  // range, the same pair twice, no taps, a non-finite tap or gain, more taps
  // than `max_taps` or a delay over kMaxDelayFrames.
  static RoutingMatrix make(std::size_t inputs, std::size_t outputs, std::vector<MatrixPath> paths,
                            std::size_t max_taps = std::size_t(1) << 20);
  // One path per channel, channel c -> channel c through the bank's filter.
  // The matrix keeps the bank too: diagonal_bank() returns it as it is (a
  // bank moved in is kept, not copied: thousands of long filters are GBs).
  static RoutingMatrix diagonal(FilterBank bank);

  std::size_t inputs() const { return inputs_; }
  std::size_t outputs() const { return outputs_; }
  const std::vector<MatrixPath>& paths() const { return paths_; }
  // The longest effective filter (delay included): how long a path's
  // response lasts (the tail of a file), and the length an engine that folds
  // delays into taps runs.
  std::size_t max_taps() const { return max_taps_; }
  // The longest filter, delay not included.
  std::size_t max_filter_taps() const { return max_filter_taps_; }
  // The longest delay of any path.
  std::size_t max_delay_frames() const { return max_delay_frames_; }
  // True when path i runs input i -> output i for every channel, N == M.
  bool is_diagonal() const;
  // One channel per path, in paths() order, holding its effective taps.
  FilterBank path_bank() const;
  // A diagonal matrix as the per-channel engines take it: channel c holds
  // path c's effective taps, in one shared filter (which engines treat
  // specially: one copy, one spectrum) when every path's are the same. A
  // matrix made by diagonal(bank) returns that bank without building one, so
  // the thread that installs it copies nothing. Throws std::invalid_argument
  // unless is_diagonal().
  std::shared_ptr<const FilterBank> diagonal_bank() const;
  // "path 3 (input 0 -> output 2)" for messages.
  static std::string describe_path(std::size_t index, const MatrixPath& path);

 private:
  RoutingMatrix() = default;
  std::size_t inputs_ = 0;
  std::size_t outputs_ = 0;
  std::size_t max_taps_ = 0;
  std::size_t max_filter_taps_ = 0;
  std::size_t max_delay_frames_ = 0;
  std::vector<MatrixPath> paths_;
  std::shared_ptr<const FilterBank> diagonal_bank_;  // set by diagonal(bank)
};

}  // namespace tapstream

#pragma once
// A FilterBank is the validated set of FIR taps for every channel of a stream.
// It is immutable once built, so one bank can be shared by the engine and the
// control plane without locks; a swap replaces the whole bank.

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace tapstream {

// The index of the first tap of `taps` that is NaN or infinite, or
// taps.size() when all are finite. A vectorised pass (a bank of thousands of
// long filters holds billions of taps, and each is checked where it is read).
std::size_t first_non_finite(std::span<const float> taps);

class FilterBank {
 public:
  // One filter applied to every one of `channels` channels.
  static FilterBank shared(std::vector<float> taps, std::size_t channels, std::string source = {});
  // One filter per channel; `taps.size()` is the channel count.
  static FilterBank per_channel(std::vector<std::vector<float>> taps,
                                std::vector<std::string> sources = {});

  std::size_t channels() const { return channels_; }
  // True when every channel uses the same filter (one copy is stored).
  bool is_shared() const { return filters_.size() == 1; }
  std::span<const float> taps(std::size_t channel) const;
  std::size_t tap_count(std::size_t channel) const { return taps(channel).size(); }
  // The longest filter: the engine keeps max_taps() - 1 samples of history per channel.
  std::size_t max_taps() const { return max_taps_; }
  // Where channel's taps came from (a file name), for status and logs.
  const std::string& source(std::size_t channel) const;

  // A copy with every tap multiplied by `factor` (gain).
  FilterBank scaled(float factor) const;

 private:
  FilterBank() = default;
  void validate() const;

  std::size_t channels_ = 0;
  std::size_t max_taps_ = 0;
  std::vector<std::vector<float>> filters_;  // one entry when shared, else one per channel
  std::vector<std::string> sources_;
};

}  // namespace tapstream

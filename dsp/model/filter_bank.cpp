#include "dsp/model/filter_bank.hpp"

#include <algorithm>
#include <cmath>

#include "dsp/realtime/non_finite.hpp"

namespace tapstream {

std::size_t first_non_finite(std::span<const float> taps) {
  // Blocks counted with the vectorised exponent test; the culprit's index is
  // looked for only in a block that has one.
  constexpr std::size_t kBlock = 4096;
  for (std::size_t start = 0; start < taps.size(); start += kBlock) {
    const std::span<const float> block = taps.subspan(start, std::min(kBlock, taps.size() - start));
    if (count_non_finite(block) == 0) continue;
    for (std::size_t i = 0; i < block.size(); ++i)
      if (!std::isfinite(block[i])) return start + i;
  }
  return taps.size();
}

FilterBank FilterBank::shared(std::vector<float> taps, std::size_t channels, std::string source) {
  FilterBank bank;
  bank.channels_ = channels;
  bank.max_taps_ = taps.size();
  bank.filters_.push_back(std::move(taps));
  bank.sources_.push_back(std::move(source));
  bank.validate();
  return bank;
}

FilterBank FilterBank::per_channel(std::vector<std::vector<float>> taps,
                                   std::vector<std::string> sources) {
  FilterBank bank;
  bank.channels_ = taps.size();
  for (const auto& t : taps) bank.max_taps_ = std::max(bank.max_taps_, t.size());
  bank.filters_ = std::move(taps);
  sources.resize(bank.filters_.size());
  bank.sources_ = std::move(sources);
  bank.validate();
  return bank;
}

void FilterBank::validate() const {
  if (channels_ == 0) throw std::invalid_argument("filter bank: zero channels");
  for (std::size_t f = 0; f < filters_.size(); ++f) {
    const std::string where = sources_[f].empty() ? "filter " + std::to_string(f) : sources_[f];
    if (filters_[f].empty()) throw std::invalid_argument(where + ": no taps");
    if (const std::size_t i = first_non_finite(filters_[f]); i != filters_[f].size()) {
      throw std::invalid_argument(where + ": tap " + std::to_string(i) + " is not finite");
    }
  }
}

std::span<const float> FilterBank::taps(std::size_t channel) const {
  if (channel >= channels_) throw std::out_of_range("filter bank: channel out of range");
  return filters_[is_shared() ? 0 : channel];
}

const std::string& FilterBank::source(std::size_t channel) const {
  if (channel >= channels_) throw std::out_of_range("filter bank: channel out of range");
  return sources_[is_shared() ? 0 : channel];
}

FilterBank FilterBank::scaled(float factor) const {
  FilterBank copy = *this;
  for (auto& f : copy.filters_) {
    for (auto& t : f) t *= factor;
  }
  copy.validate();
  return copy;
}

}  // namespace tapstream

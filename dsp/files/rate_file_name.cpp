#include "dsp/files/rate_file_name.hpp"

#include <array>
#include <cmath>
#include <string>
#include <system_error>

namespace tapstream {

namespace fs = std::filesystem;

namespace {

constexpr std::array<int, 17> kStandardRates = {8000,   11025,  16000,  22050,  24000, 32000,
                                                44100,  48000,  64000,  88200,  96000, 176400,
                                                192000, 352800, 384000, 705600, 768000};

// Where no rate is known yet, the file for the most common one.
constexpr int kRateWhenUnknown = 48000;

std::string rate_list(const std::vector<int>& rates) {
  std::string list;
  for (const int rate : rates) list += (list.empty() ? "" : ", ") + std::to_string(rate);
  return list;
}

bool is_file(const fs::path& file) {
  std::error_code error;
  return fs::exists(file, error) && !fs::is_directory(file, error);
}

}  // namespace

bool names_sample_rate(const fs::path& file) {
  return file.native().find(sample_rate_token) != std::string::npos;
}

fs::path file_for_rate(const fs::path& pattern, int rate) {
  std::string name = pattern.native();
  const std::string value = std::to_string(rate);
  for (std::size_t at = name.find(sample_rate_token); at != std::string::npos;
       at = name.find(sample_rate_token, at + value.size())) {
    name.replace(at, sample_rate_token.size(), value);
  }
  return name;
}

std::vector<int> rates_on_disk(const fs::path& pattern) {
  std::vector<int> rates;
  for (const int rate : kStandardRates) {
    if (is_file(file_for_rate(pattern, rate))) rates.push_back(rate);
  }
  return rates;
}

int nearest_rate(const std::vector<int>& candidates, int rate) {
  int best = candidates.front();
  double best_distance = std::abs(std::log(double(best) / rate));
  for (const int candidate : candidates) {
    const double distance = std::abs(std::log(double(candidate) / rate));
    // Equal ratios either way (24000 and 96000 from 48000): the higher one.
    if (distance < best_distance - 1e-12 ||
        (std::abs(distance - best_distance) <= 1e-12 && candidate > best)) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

bool RateFile::other_rate() const {
  return named_rate != 0 && wanted_rate != 0 && named_rate != wanted_rate;
}

RateFile choose_rate_file(const fs::path& pattern, int rate, bool nearest) {
  if (!names_sample_rate(pattern)) return {pattern, 0, rate};
  const int wanted = rate > 0 ? rate : kRateWhenUnknown;
  const fs::path exact = file_for_rate(pattern, wanted);
  if (is_file(exact)) return {exact, wanted, rate};
  const std::vector<int> found = rates_on_disk(pattern);
  if (found.empty()) {
    throw RateFileError(pattern.string() + ": no file for " + std::to_string(wanted) + " Hz (" +
                        exact.string() + ") nor for any standard rate from 8000 to " + "768000 Hz");
  }
  if (rate > 0 && !nearest) {
    throw RateFileError(
        pattern.string() + ": no file for " + std::to_string(wanted) + " Hz (" + exact.string() +
        " is missing; there are files for " + rate_list(found) +
        " Hz, and resampling is off: [filter] resample = false, process --no-resample)");
  }
  const int chosen = nearest_rate(found, wanted);
  return {file_for_rate(pattern, chosen), chosen, rate};
}

}  // namespace tapstream

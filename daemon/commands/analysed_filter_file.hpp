#pragma once
// A coefficient file as `info` and `plot` analyse it: all its filters, at the
// sample rate --rate names, else the file's own, else 48000 Hz (a text file
// need not say its rate, and a response needs one).

#include <string>

#include "dsp/files/coefficient_file.hpp"
#include "dsp/model/filter_bank.hpp"

namespace tapstream {

struct AnalysedFilterFile {
  FilterBank bank;
  double rate = 0.0;
  // Where `rate` came from, as the commands say it.
  enum class RateFrom { option, file, assumed } rate_from = RateFrom::assumed;
};

constexpr double kAnalysisFallbackRate = 48000.0;

// `rate_option` <= 0 means none given. `loader` is load_filter_bank or
// load_filter_bank_quietly (info reports all-zero filters itself).
inline AnalysedFilterFile load_for_analysis(const std::string& file, double rate_option,
                                            FilterBank (*loader)(const std::filesystem::path&,
                                                                 const CoefficientFileOptions&)) {
  const CoefficientFileHeader header = read_coefficient_header(file);
  CoefficientFileOptions options;
  options.channels = header.channels;
  AnalysedFilterFile result{loader(file, options), kAnalysisFallbackRate,
                            AnalysedFilterFile::RateFrom::assumed};
  if (rate_option > 0.0) {
    result.rate = rate_option;
    result.rate_from = AnalysedFilterFile::RateFrom::option;
  } else if (header.sample_rate > 0.0) {
    result.rate = header.sample_rate;
    result.rate_from = AnalysedFilterFile::RateFrom::file;
  }
  return result;
}

}  // namespace tapstream

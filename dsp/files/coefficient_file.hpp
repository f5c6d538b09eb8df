#pragma once
// Coefficient files: plain text (one tap a line, '#' comments, blank lines),
// WAV/FLAC/any libsndfile impulse response (one IR channel per audio channel,
// or one for all), raw little-endian float32 (.f32) and float64 (.f64).

#include <cstddef>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsp/model/filter_bank.hpp"

namespace tapstream {

// Every problem with a coefficient file; what() is one line that names the
// file and the problem, e.g. "taps.txt:12: cannot parse 'abc' as a number".
class CoefficientFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CoefficientFileOptions {
  std::size_t channels = 1;         // the audio's channel count
  std::size_t max_taps = 1u << 20;  // more taps than this is an error
  int sample_rate = 0;              // the audio's rate; 0 = do not check
  bool ignore_sample_rate = false;  // accept an IR whose rate differs from the audio's as it is
  // A file recorded at another rate than sample_rate (its header says, or its
  // text comment, else `named_rate`) is resampled to sample_rate
  // (dsp/design/filter_resampling: libsoxr, very high quality) with a log
  // line naming the file and both rates, instead of refused.
  bool resample = false;
  // The rate the file's name says (its "$samplerate$", dsp/files/rate_file_name),
  // for a file that does not say its own (text without a rate comment, raw); 0: none.
  int named_rate = 0;
  // An impulse response cut short (its header promises more frames than it
  // holds) is an error when strict, else loaded as far as it goes with a
  // message, naming the file and both counts, appended here (when given).
  bool strict = false;
  std::vector<std::string>* damage = nullptr;
};

// Loads a file (format from its extension: .txt/.taps/other text; raw
// little-endian float32 .f32/.raw/.bin; raw little-endian float64 .f64; or
// anything libsndfile opens) into a bank for `options.channels` channels.
// A text file may start with a UTF-8 byte order mark, and may declare its rate
// in a comment ("48000 Hz sample rate", "sample_rate = 48000"); a declared rate
// (text) or recorded rate (audio) must match options.sample_rate unless
// ignored. Logs a warning for a channel whose taps are all zero.
// Throws CoefficientFileError.
FilterBank load_filter_bank(const std::filesystem::path& file,
                            const CoefficientFileOptions& options);
// The same without the warning (for `info`, which reports it itself).
FilterBank load_filter_bank_quietly(const std::filesystem::path& file,
                                    const CoefficientFileOptions& options);

// Writes taps in the container `file`'s extension names: raw float32 (.f32,
// .raw, .bin), raw float64 (.f64), a mono 32-bit float WAV (.wav) at
// `sample_rate`, or text (one tap per line, full float precision, the header
// as '#' comments; any other extension). Other audio extensions are refused.
// Writes to a temporary file beside `file` and renames it on success. Returns
// what it wrote, e.g. "text", "WAV (32-bit float)".
// What a coefficient file says about itself without loading it: its rate
// (an audio file's, or the one a text file's comment declares; 0 when it
// does not say) and its channel count (1 for text and raw files).
struct CoefficientFileHeader {
  double sample_rate = 0.0;
  std::size_t channels = 1;
};
CoefficientFileHeader read_coefficient_header(const std::filesystem::path& file);

// Writes taps as text whatever the extension (save_taps for one text file).
void save_text_taps(const std::filesystem::path& file, const std::vector<float>& taps,
                    const std::string& header_comment);

std::string save_taps(const std::filesystem::path& file, const std::vector<float>& taps,
                      const std::string& header_comment, double sample_rate);

}  // namespace tapstream

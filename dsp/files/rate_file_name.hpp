#pragma once
// Filter files made for several sample rates, named as CamillaDSP names them:
// "$samplerate$" in a file name (any of its directories too) stands for the
// rate in force, so that "room_$samplerate$.wav" is room_44100.wav at 44.1 kHz
// and room_48000.wav at 48 kHz. Where no file exists for the rate, the file of
// the nearest rate that does exist is the one to resample (its rate is in its
// name); the caller says whether that is allowed.
//
// Only the standard rates are looked for when the exact one is missing
// (8000 .. 768000 Hz: 8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000,
// 64000, 88200, 96000, 176400, 192000, 352800, 384000, 705600, 768000): the
// directory is not listed, so nothing but those names is ever opened.

#include <filesystem>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace tapstream {

inline constexpr std::string_view sample_rate_token = "$samplerate$";

class RateFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whether `file` has "$samplerate$" in it.
bool names_sample_rate(const std::filesystem::path& file);

// `pattern` with every "$samplerate$" replaced by `rate`.
std::filesystem::path file_for_rate(const std::filesystem::path& pattern, int rate);

// The standard rates whose file of `pattern` exists, ascending.
std::vector<int> rates_on_disk(const std::filesystem::path& pattern);

// The one of `candidates` nearest `rate` by ratio (44100 is nearer 48000 than
// 32000 is); a tie goes to the higher rate, which carries the wider band.
// `candidates` must not be empty.
int nearest_rate(const std::vector<int>& candidates, int rate);

struct RateFile {
  std::filesystem::path file;  // the file to read
  int named_rate = 0;          // the rate its name says; 0 when `pattern` has no token
  int wanted_rate = 0;         // the rate asked for (0: not known yet)
  // Whether the file is another rate's (the nearest one's, to be resampled).
  bool other_rate() const;
};

// The file of `pattern` for `rate`: `pattern` itself when it has no token;
// else its file for `rate` when that exists; else, when `nearest` is true,
// the file of the nearest rate on disk. `rate` 0 (not known yet: a device not
// open) takes the file nearest 48000 Hz. Throws RateFileError naming the file
// looked for, the rates found, and (when `nearest` is false) that resampling
// is off.
RateFile choose_rate_file(const std::filesystem::path& pattern, int rate, bool nearest);

}  // namespace tapstream

#pragma once
// Sound files through libsndfile, as RAII objects. Reading yields interleaved
// float frames; writing goes to a temporary file beside the destination that
// is renamed only by commit(), so that a failed run leaves no partial output.

#include <sndfile.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsp/temporary_file.hpp"

namespace tapstream {

class SoundFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Sample encodings a user can ask for on output.
enum class SampleFormat { same_as_input, float32, pcm16, pcm24, pcm32 };
SampleFormat parse_sample_format(const std::string& name);  // float|pcm16|pcm24|pcm32

struct SoundFileInfo {
  int sample_rate = 0;
  int channels = 0;
  std::int64_t frames = 0;
  int format = 0;  // libsndfile's SF_FORMAT_* (major | subtype)
};

class SoundFileReader {
 public:
  explicit SoundFileReader(const std::filesystem::path& file);  // throws SoundFileError
  ~SoundFileReader();
  SoundFileReader(const SoundFileReader&) = delete;
  SoundFileReader& operator=(const SoundFileReader&) = delete;

  const SoundFileInfo& info() const { return info_; }
  // Reads up to out.size() / channels frames; returns frames read (0 at the end).
  std::size_t read(std::span<float> interleaved);

 private:
  std::filesystem::path path_;
  SNDFILE* file_ = nullptr;
  SoundFileInfo info_;
};

// Counts samples clipped when float samples outside [-1, 1] are written to an
// integer format (we clip, rather than let libsndfile wrap around; NaN is
// written as 0 and counted as clipped).
struct ClipStats {
  std::uint64_t clipped_samples = 0;
  float peak = 0.0f;  // largest |sample| seen, before clipping
};

class SoundFileWriter {
 public:
  // Opens `<file>.tmp-XXXXXX` beside `file`. `format` is libsndfile's SF_FORMAT_*.
  // Throws SoundFileError naming `file` (bad format, directory not writable).
  SoundFileWriter(const std::filesystem::path& file, int sample_rate, int channels, int format);
  ~SoundFileWriter();  // removes the temporary file unless commit() succeeded
  SoundFileWriter(const SoundFileWriter&) = delete;
  SoundFileWriter& operator=(const SoundFileWriter&) = delete;

  void write(std::span<const float> interleaved);  // throws SoundFileError
  // Flushes and closes the file and renames it onto the destination.
  void commit();
  const std::filesystem::path& destination() const { return destination_; }
  const ClipStats& clip_stats() const { return clip_; }

 private:
  void close_file();

  std::filesystem::path destination_;
  std::unique_ptr<TemporaryFile> temporary_;
  SNDFILE* file_ = nullptr;
  int channels_ = 0;
  bool integer_format_ = false;  // any subtype but float and double: we clip
  bool committed_ = false;
  ClipStats clip_;
  std::vector<float> clipped_;  // scratch for the clipped copy of a block
};

// The libsndfile format for the output: the input's major format (container)
// with the requested subtype (or the input's own subtype). Throws
// SoundFileError when libsndfile cannot write that combination, e.g. float or
// pcm32 in FLAC.
int output_format(int input_format, SampleFormat requested);

// The same, with the container taken from the destination's extension when
// libsndfile knows it (out.flac from in.wav writes FLAC), else the input's.
// When the container changes and no format is requested, the input's encoding
// is kept where the new container holds it, else the error says to choose one.
int output_format(int input_format, SampleFormat requested,
                  const std::filesystem::path& destination);

// A short human name for a format, e.g. "WAV float" or "FLAC pcm16".
std::string describe_format(int format);

}  // namespace tapstream

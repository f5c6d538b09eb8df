#include "dsp/sound_file.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

namespace tapstream {

namespace {

std::string library_error(SNDFILE* file) {
  return sf_strerror(file);
}

SoundFileError error_for(const std::filesystem::path& file, const std::string& problem) {
  return SoundFileError(file.string() + ": " + problem);
}

std::string major_name(int format) {
  SF_FORMAT_INFO info{};
  info.format = format & SF_FORMAT_TYPEMASK;
  if (sf_command(nullptr, SFC_GET_FORMAT_INFO, &info, sizeof(info)) == 0 &&
      info.extension != nullptr) {
    std::string name = info.extension;
    for (auto& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return name;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "container 0x%06x", info.format);
  return buffer;
}

std::string subtype_name(int format) {
  switch (format & SF_FORMAT_SUBMASK) {
    case SF_FORMAT_FLOAT:
      return "float";
    case SF_FORMAT_DOUBLE:
      return "double";
    case SF_FORMAT_PCM_S8:
      return "pcm8";
    case SF_FORMAT_PCM_U8:
      return "pcm8 (unsigned)";
    case SF_FORMAT_PCM_16:
      return "pcm16";
    case SF_FORMAT_PCM_24:
      return "pcm24";
    case SF_FORMAT_PCM_32:
      return "pcm32";
    default:
      break;
  }
  SF_FORMAT_INFO info{};
  info.format = format & SF_FORMAT_SUBMASK;
  if (sf_command(nullptr, SFC_GET_FORMAT_INFO, &info, sizeof(info)) == 0 && info.name != nullptr) {
    return info.name;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "encoding 0x%04x", info.format);
  return buffer;
}

bool format_is_writable(int format, int channels) {
  SF_INFO info{};
  info.samplerate = 48000;
  info.channels = channels;
  info.format = format;
  return sf_format_check(&info) != 0;
}

}  // namespace

SampleFormat parse_sample_format(const std::string& name) {
  if (name == "float") return SampleFormat::float32;
  if (name == "pcm16") return SampleFormat::pcm16;
  if (name == "pcm24") return SampleFormat::pcm24;
  if (name == "pcm32") return SampleFormat::pcm32;
  throw std::invalid_argument("unknown sample format '" + name +
                              "' (expected float, pcm16, pcm24 or pcm32)");
}

std::string describe_format(int format) {
  return major_name(format) + " " + subtype_name(format);
}

int output_format(int input_format, SampleFormat requested) {
  int subtype = input_format & SF_FORMAT_SUBMASK;
  switch (requested) {
    case SampleFormat::same_as_input:
      break;
    case SampleFormat::float32:
      subtype = SF_FORMAT_FLOAT;
      break;
    case SampleFormat::pcm16:
      subtype = SF_FORMAT_PCM_16;
      break;
    case SampleFormat::pcm24:
      subtype = SF_FORMAT_PCM_24;
      break;
    case SampleFormat::pcm32:
      subtype = SF_FORMAT_PCM_32;
      break;
  }
  const int format = (input_format & (SF_FORMAT_TYPEMASK | SF_FORMAT_ENDMASK)) | subtype;
  if (!format_is_writable(format, 1)) {
    throw SoundFileError("cannot write " + subtype_name(format) + " samples in a " +
                         major_name(format) + " file (libsndfile does not support " +
                         describe_format(format) + "; choose another --format)");
  }
  return format;
}

namespace {

// libsndfile's container for a file extension ("flac" -> SF_FORMAT_FLAC), 0 if unknown.
int container_for_extension(std::string extension) {
  for (auto& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (extension == "aif") extension = "aiff";
  if (extension == "ogg") extension = "oga";
  int count = 0;
  sf_command(nullptr, SFC_GET_FORMAT_MAJOR_COUNT, &count, sizeof(count));
  for (int i = 0; i < count; ++i) {
    SF_FORMAT_INFO info{};
    info.format = i;
    if (sf_command(nullptr, SFC_GET_FORMAT_MAJOR, &info, sizeof(info)) != 0) continue;
    if (info.extension != nullptr && extension == info.extension) return info.format;
  }
  return 0;
}

}  // namespace

int output_format(int input_format, SampleFormat requested,
                  const std::filesystem::path& destination) {
  std::string extension = destination.extension().string();
  if (!extension.empty()) extension.erase(0, 1);
  const int container = container_for_extension(extension);
  if (container == 0 || container == (input_format & SF_FORMAT_TYPEMASK)) {
    return output_format(input_format, requested);
  }
  int format = container | (input_format & SF_FORMAT_SUBMASK);
  if (requested == SampleFormat::same_as_input && container == SF_FORMAT_OGG) {
    format = container | SF_FORMAT_VORBIS;  // Ogg holds only compressed encodings
  } else if (requested == SampleFormat::same_as_input && !format_is_writable(format, 1)) {
    throw SoundFileError(destination.string() + ": a " + major_name(container) +
                         " file cannot hold the input's " + subtype_name(input_format) +
                         " samples; choose one with --format");
  }
  return output_format(format, requested);
}

// ---------------------------------------------------------------- reading

SoundFileReader::SoundFileReader(const std::filesystem::path& file) : path_(file) {
  std::error_code error;
  if (std::filesystem::is_directory(file, error)) throw error_for(file, "is a directory");
  SF_INFO sf_info{};
  file_ = sf_open(file.c_str(), SFM_READ, &sf_info);
  if (file_ == nullptr) throw error_for(file, library_error(nullptr));
  info_.sample_rate = sf_info.samplerate;
  info_.channels = sf_info.channels;
  info_.frames = sf_info.frames;
  info_.format = sf_info.format;
  if (info_.channels < 1 || info_.sample_rate < 1) {
    sf_close(file_);
    file_ = nullptr;
    throw error_for(file, "no channels or no sample rate in the header");
  }
}

SoundFileReader::~SoundFileReader() {
  if (file_ != nullptr) sf_close(file_);
}

std::size_t SoundFileReader::read(std::span<float> interleaved) {
  const auto channels = static_cast<std::size_t>(info_.channels);
  const auto wanted = static_cast<sf_count_t>(interleaved.size() / channels);
  if (wanted == 0) return 0;
  const sf_count_t got = sf_readf_float(file_, interleaved.data(), wanted);
  if (got < wanted && sf_error(file_) != SF_ERR_NO_ERROR) {
    throw error_for(path_, "read failed: " + library_error(file_));
  }
  return static_cast<std::size_t>(std::max<sf_count_t>(got, 0));
}

// ---------------------------------------------------------------- writing

SoundFileWriter::SoundFileWriter(const std::filesystem::path& file, int sample_rate, int channels,
                                 int format)
    : destination_(file), channels_(channels) {
  if (sample_rate < 1) {
    throw error_for(file, "invalid sample rate " + std::to_string(sample_rate));
  }
  if (channels < 1) throw error_for(file, "invalid channel count " + std::to_string(channels));
  if (!format_is_writable(format, channels)) {
    throw error_for(file, "libsndfile cannot write " + describe_format(format) + " with " +
                              std::to_string(channels) + " channels");
  }
  // Found now rather than by the rename at the very end of a long run.
  std::error_code error;
  if (std::filesystem::is_directory(file, error)) throw error_for(file, "is a directory");
  const int subtype = format & SF_FORMAT_SUBMASK;
  integer_format_ = subtype != SF_FORMAT_FLOAT && subtype != SF_FORMAT_DOUBLE;
  try {
    temporary_ = std::make_unique<TemporaryFile>(file);
  } catch (const std::runtime_error& e) {
    throw error_for(file, e.what());
  }
  SF_INFO sf_info{};
  sf_info.samplerate = sample_rate;
  sf_info.channels = channels;
  sf_info.format = format;
  // The descriptor stays the TemporaryFile's (close_desc = false): it flushes
  // it to disk before the rename, and closes it exactly once on every path.
  file_ = sf_open_fd(temporary_->fd(), SFM_WRITE, &sf_info, SF_FALSE);
  if (file_ == nullptr) throw error_for(file, library_error(nullptr));
  // We clip ourselves (and count), but ask libsndfile to clip as well so that
  // no conversion it does internally can wrap around.
  if (integer_format_) sf_command(file_, SFC_SET_CLIPPING, nullptr, SF_TRUE);
}

SoundFileWriter::~SoundFileWriter() {
  close_file();
  // temporary_ removes the temporary file unless it was committed.
}

void SoundFileWriter::close_file() {
  if (file_ != nullptr) {
    sf_close(file_);
    file_ = nullptr;
  }
}

void SoundFileWriter::write(std::span<const float> interleaved) {
  if (committed_ || file_ == nullptr) throw error_for(destination_, "write after commit");
  const auto channels = static_cast<std::size_t>(channels_);
  if (interleaved.size() % channels != 0) {
    throw error_for(destination_, "write of " + std::to_string(interleaved.size()) +
                                      " samples is not a whole number of " +
                                      std::to_string(channels) + "-channel frames");
  }
  std::span<const float> to_write = interleaved;
  float peak = clip_.peak;
  if (integer_format_) {
    clipped_.resize(interleaved.size());
    std::uint64_t clipped = 0;
    for (std::size_t i = 0; i < interleaved.size(); ++i) {
      const float x = interleaved[i];
      const float magnitude = std::fabs(x);
      if (std::isnan(x)) {
        clipped_[i] = 0.0f;
        ++clipped;
        continue;
      }
      peak = std::max(peak, magnitude);
      if (magnitude > 1.0f) {
        clipped_[i] = std::copysign(1.0f, x);
        ++clipped;
      } else {
        clipped_[i] = x;
      }
    }
    clip_.clipped_samples += clipped;
    to_write = clipped_;
  } else {
    for (const float x : interleaved) {
      if (!std::isnan(x)) peak = std::max(peak, std::fabs(x));
    }
  }
  clip_.peak = peak;
  const auto frames = static_cast<sf_count_t>(interleaved.size() / channels);
  const sf_count_t written = sf_writef_float(file_, to_write.data(), frames);
  if (written != frames) {
    throw error_for(destination_, "write failed: " + library_error(file_));
  }
}

void SoundFileWriter::commit() {
  if (committed_) return;
  if (file_ == nullptr) throw error_for(destination_, "commit after a failed close");
  const int close_result = sf_close(file_);
  file_ = nullptr;
  if (close_result != 0) {
    throw error_for(destination_, "closing failed: " + std::string(sf_error_number(close_result)));
  }
  try {
    temporary_->commit();
  } catch (const std::runtime_error& e) {
    throw error_for(destination_, e.what());
  }
  committed_ = true;
}

}  // namespace tapstream

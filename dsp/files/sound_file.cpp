#include "dsp/files/sound_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dsp/files/pcm_codec.hpp"
#include "dsp/files/sample_peak.hpp"
#include "dsp/files/staged_file_writer.hpp"

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

// Follows a chain of symlinks to the path that is finally written.
std::filesystem::path follow_symlinks(const std::filesystem::path& file) {
  std::filesystem::path path = file;
  std::error_code error;
  for (int hops = 0; std::filesystem::is_symlink(path, error); ++hops) {
    if (hops == 40) throw error_for(file, "too many levels of symbolic links");
    const std::filesystem::path target = std::filesystem::read_symlink(path, error);
    if (error) throw error_for(file, "cannot read the link: " + error.message());
    path = target.is_absolute() ? target : path.parent_path() / target;
  }
  return path;
}

}  // namespace

int container_for_name(std::string name) {
  for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!name.empty() && name.front() == '.') name.erase(0, 1);
  if (name == "aif") name = "aiff";
  if (name == "ogg") name = "oga";
  if (name == "wave") name = "wav";
  if (name.empty()) return 0;
  int count = 0;
  sf_command(nullptr, SFC_GET_FORMAT_MAJOR_COUNT, &count, sizeof(count));
  for (int i = 0; i < count; ++i) {
    SF_FORMAT_INFO info{};
    info.format = i;
    if (sf_command(nullptr, SFC_GET_FORMAT_MAJOR, &info, sizeof(info)) != 0) continue;
    if (info.extension != nullptr && name == info.extension) return info.format;
  }
  return 0;
}

std::string known_container_names() {
  std::vector<std::string> names = {"aif", "ogg", "wave"};
  int count = 0;
  sf_command(nullptr, SFC_GET_FORMAT_MAJOR_COUNT, &count, sizeof(count));
  for (int i = 0; i < count; ++i) {
    SF_FORMAT_INFO info{};
    info.format = i;
    if (sf_command(nullptr, SFC_GET_FORMAT_MAJOR, &info, sizeof(info)) != 0) continue;
    if (info.extension != nullptr) names.emplace_back(info.extension);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::string list;
  for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
  return list;
}

Dither dither_for_format(const std::string& choice, int format) {
  if (choice != "auto") return parse_dither(choice);
  const int subtype = format & SF_FORMAT_SUBMASK;
  return subtype == SF_FORMAT_PCM_16 || subtype == SF_FORMAT_PCM_S8 || subtype == SF_FORMAT_PCM_U8
             ? Dither::tpdf
             : Dither::none;
}

OutputFormat choose_output_format(int input_format, SampleFormat requested, const std::string& type,
                                  const std::filesystem::path& destination, bool stream) {
  const std::string shown =
      is_standard_stream(destination) ? "standard output" : destination.string();
  int container = 0;
  if (!type.empty()) {
    container = container_for_name(type);
    if (container == 0) {
      throw SoundFileError("--type: unknown type '" + type +
                           "' (known: " + known_container_names() + ")");
    }
  } else if (is_standard_stream(destination)) {
    container = SF_FORMAT_WAV;
  } else {
    // The name of what is written: a link's final target (out.wav -> take3.flac is FLAC).
    const std::string extension = follow_symlinks(destination).extension().string();
    container = container_for_name(extension);
    if (container == 0 && stream) {
      container = input_format & SF_FORMAT_TYPEMASK;
      if (!StreamOutput::can_stream(container)) container = SF_FORMAT_WAV;
    } else if (container == 0) {
      throw SoundFileError(shown + ": " +
                           (extension.empty() ? std::string("no extension")
                                              : "unknown extension '" + extension + "'") +
                           " to choose the output type from (known: " + known_container_names() +
                           "; or name one with --type)");
    }
  }
  // An extensible WAV input (a channel mask, more than two channels) stays extensible.
  const int input_container = input_format & SF_FORMAT_TYPEMASK;
  if (container == SF_FORMAT_WAV && input_container == SF_FORMAT_WAVEX) container = SF_FORMAT_WAVEX;
  if (stream && !StreamOutput::can_stream(container)) {
    throw SoundFileError(
        shown + ": cannot write a " + major_name(container) +
        " file as a stream (it needs seeking); stream types: " + StreamOutput::streamable_names());
  }
  OutputFormat chosen;
  const int endianness = container == input_container ? input_format & SF_FORMAT_ENDMASK : 0;
  if (requested != SampleFormat::same_as_input) {
    chosen.format = output_format(container | endianness, requested);
    return chosen;
  }
  const int input_subtype = input_format & SF_FORMAT_SUBMASK;
  chosen.format = container | endianness | input_subtype;
  if (format_is_writable(chosen.format, 1)) return chosen;
  if (container == SF_FORMAT_OGG) {
    chosen.format = container | SF_FORMAT_VORBIS;  // Ogg holds only compressed encodings
    return chosen;
  }
  for (const int subtype : {SF_FORMAT_PCM_24, SF_FORMAT_PCM_16}) {
    if (format_is_writable(container | subtype, 1)) {
      chosen.format = container | subtype;
      chosen.note = shown + ": a " + major_name(container) + " file cannot hold " +
                    subtype_name(input_subtype) + " samples: writing " + subtype_name(subtype) +
                    " (choose another with --format)";
      return chosen;
    }
  }
  throw SoundFileError(shown + ": a " + major_name(container) + " file cannot hold the input's " +
                       subtype_name(input_format) + " samples; choose one with --format");
}

namespace {

// Bytes per sample of the encodings whose size a header's byte count gives; 0 for others.
int bytes_per_sample(int format) {
  switch (format & SF_FORMAT_SUBMASK) {
    case SF_FORMAT_PCM_S8:
    case SF_FORMAT_PCM_U8:
    case SF_FORMAT_ULAW:
    case SF_FORMAT_ALAW:
      return 1;
    case SF_FORMAT_PCM_16:
      return 2;
    case SF_FORMAT_PCM_24:
      return 3;
    case SF_FORMAT_PCM_32:
    case SF_FORMAT_FLOAT:
      return 4;
    case SF_FORMAT_DOUBLE:
      return 8;
    default:
      return 0;
  }
}

std::string display_name(const std::filesystem::path& file) {
  return is_standard_stream(file) ? std::string("standard input") : file.string();
}

SoundFileMetadata read_metadata(SNDFILE* file, int channels) {
  SoundFileMetadata metadata;
  std::vector<int> map(static_cast<std::size_t>(channels));
  if (sf_command(file, SFC_GET_CHANNEL_MAP_INFO, map.data(),
                 static_cast<int>(map.size() * sizeof(int))) == SF_TRUE) {
    metadata.channel_map = std::move(map);
  }
  for (int kind = SF_STR_FIRST; kind <= SF_STR_LAST; ++kind) {
    const char* text = sf_get_string(file, kind);
    if (text != nullptr && *text != '\0') metadata.strings.emplace_back(kind, text);
  }
  return metadata;
}

}  // namespace

int libsndfile_descriptor(int fd) {
  return ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
}

namespace {

// The lengths a writer that cannot seek back (to a pipe) puts in a WAV
// header: not a promise, so a file that holds less is not cut short. sox
// writes 0x7ffff000 rounded down to whole frames (0x7fffeffc for 24-bit
// stereo); ffmpeg and others 0xFFFFFFFF.
bool is_unknown_length(long long declared_bytes, long long frame_bytes) {
  constexpr long long kSoxUnknown = 0x7ffff000LL;
  constexpr long long kAllOnes = 0xffffffffLL;
  if (declared_bytes == kAllOnes) return true;
  return declared_bytes <= kSoxUnknown && declared_bytes > kSoxUnknown - frame_bytes;
}

}  // namespace

std::int64_t declared_frames(SNDFILE* file, const SF_INFO& info) {
  // Only libsndfile's log says what the header promised once it found less.
  std::string log(16384, '\0');
  sf_command(file, SFC_GET_LOG_INFO, log.data(), static_cast<int>(log.size()));
  log.resize(std::strlen(log.c_str()));
  const int sample_bytes = bytes_per_sample(info.format);
  const std::size_t at = log.find("\ndata : ");
  if (at == std::string::npos || sample_bytes == 0 || info.channels < 1) return info.frames;
  const std::size_t end = log.find('\n', at + 1);
  const std::string line = log.substr(at + 1, end == std::string::npos ? end : end - at - 1);
  if (line.find("(should be") == std::string::npos) return info.frames;
  const long long declared_bytes = std::atoll(line.c_str() + std::strlen("data : "));
  const long long frame_bytes = static_cast<long long>(sample_bytes) * info.channels;
  if (declared_bytes <= 0 || is_unknown_length(declared_bytes, frame_bytes)) return info.frames;
  // Any other size beyond the file's end is a promise the file breaks: it
  // was cut short (0xFFFFFFF0 declared, 2000 bytes there, is damage).
  const std::int64_t frames = declared_bytes / frame_bytes;
  return std::max<std::int64_t>(frames, info.frames);
}

bool output_is_stream(const std::filesystem::path& file) {
  if (is_standard_stream(file)) return true;
  // stat() follows links as open() will, including /proc's magic ones
  // (/dev/stdout -> /proc/self/fd/1 -> pipe:[...]) that read_symlink cannot.
  struct stat status {};
  if (::stat(file.c_str(), &status) != 0) return false;
  return !S_ISREG(status.st_mode) && !S_ISDIR(status.st_mode);
}

// ---------------------------------------------------------------- reading

int SoundFileReader::open_source(const std::filesystem::path& file,
                                 const std::atomic<bool>* cancel) {
  int fd = -1;
  if (is_standard_stream(file)) {
    // Our own descriptor of standard input, closed by us alone.
    fd = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 0);
  } else {
    // O_NONBLOCK: opening a FIFO does not wait for its writer here (the
    // StreamInput waits for it, cancellably); O_NOCTTY: a terminal named
    // here never becomes ours.
    do {
      fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    } while (fd < 0 && errno == EINTR);
  }
  if (fd < 0) {
    throw error_for(display_name(file), std::string("cannot open: ") + std::strerror(errno));
  }
  struct stat status {};
  if (::fstat(fd, &status) != 0) {
    const int error = errno;
    ::close(fd);
    throw error_for(display_name(file),
                    std::string("cannot read its status: ") + std::strerror(error));
  }
  if (S_ISDIR(status.st_mode)) {
    ::close(fd);
    throw error_for(file, "is a directory");
  }
  if (S_ISREG(status.st_mode) || S_ISBLK(status.st_mode)) {
    if (!is_standard_stream(file)) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    fd_ = fd;
    return fd_;
  }
  try {
    stream_ = std::make_unique<StreamInput>(fd, cancel);
  } catch (const std::runtime_error& e) {
    throw error_for(display_name(file), e.what());
  }
  return stream_->fd();
}

std::string SoundFileReader::stream_problem() const {
  if (!stream_) return {};
  if (stream_->cancelled()) return "interrupted";
  if (const std::string error = stream_->error(); !error.empty()) return "read failed: " + error;
  return {};
}

void SoundFileReader::check_stream() const {
  if (const std::string problem = stream_problem(); !problem.empty()) {
    throw error_for(display_name(path_), problem);
  }
}

void SoundFileReader::close_source() {
  stream_.reset();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

SoundFileReader::SoundFileReader(const std::filesystem::path& file,
                                 const std::optional<RawInput>& raw,
                                 const std::atomic<bool>* cancel)
    : path_(file) {
  SF_INFO sf_info{};
  if (raw) {
    const SampleFormat format =
        raw->format == SampleFormat::same_as_input ? SampleFormat::float32 : raw->format;
    sf_info.format = output_format(SF_FORMAT_RAW | SF_FORMAT_FLOAT | SF_ENDIAN_LITTLE, format);
    sf_info.samplerate = raw->sample_rate;
    sf_info.channels = raw->channels;
    if (raw->sample_rate < 1 || raw->channels < 1) {
      throw error_for(display_name(file), "raw input needs a sample rate and a channel count");
    }
  }
  const int fd = open_source(file, cancel);
  file_ = sf_open_fd(libsndfile_descriptor(fd), SFM_READ, &sf_info, SF_TRUE);
  if (file_ == nullptr) {
    const std::string from_stream = stream_problem();
    const std::string problem = from_stream.empty() ? library_error(nullptr) : from_stream;
    close_source();  // no destructor runs for a constructor that throws
    throw error_for(display_name(file), problem);
  }
  info_.sample_rate = sf_info.samplerate;
  info_.channels = sf_info.channels;
  // From a pipe libsndfile reports the header's length, or a guess; a
  // streamed FLAC (total 0 in its header) reads as SF_COUNT_MAX: unknown.
  const bool length_known = sf_info.seekable && sf_info.frames != SF_COUNT_MAX;
  info_.frames = length_known ? sf_info.frames : 0;
  info_.format = sf_info.format;
  if (info_.channels < 1 || info_.sample_rate < 1) {
    sf_close(file_);
    file_ = nullptr;
    close_source();
    throw error_for(display_name(file), "no channels or no sample rate in the header");
  }
  declared_frames_ = length_known ? tapstream::declared_frames(file_, sf_info) : 0;
  metadata_ = read_metadata(file_, info_.channels);
  if (fd_ >= 0 && length_known) choose_fast_path(sf_info);
}

namespace {

// pread of all `count` bytes unless the file ends first; returns the bytes read.
std::size_t read_at(int fd, std::uint8_t* bytes, std::size_t count, std::uint64_t offset) {
  std::size_t got = 0;
  while (got < count) {
    const ssize_t n = ::pread(fd, bytes + got, count - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::strerror(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  return got;
}

bool same_layout(const PcmLayout& layout, const SF_INFO& sf_info, std::uint64_t frames) {
  return layout.container == (sf_info.format & SF_FORMAT_TYPEMASK) &&
         libsndfile_subtype(layout.encoding) == (sf_info.format & SF_FORMAT_SUBMASK) &&
         layout.channels == sf_info.channels && layout.sample_rate == sf_info.samplerate &&
         static_cast<std::int64_t>(frames) == sf_info.frames;
}

}  // namespace

void SoundFileReader::choose_fast_path(const SF_INFO& sf_info) {
  struct stat status {};
  if (::fstat(fd_, &status) != 0 || !S_ISREG(status.st_mode)) return;
  const auto file_size = static_cast<std::uint64_t>(status.st_size);
  std::optional<PcmLayout> layout;
  if ((sf_info.format & SF_FORMAT_TYPEMASK) == SF_FORMAT_RAW) {
    const auto encoding = pcm_encoding_of(sf_info.format);
    if (!encoding || (sf_info.format & SF_FORMAT_ENDMASK) == SF_ENDIAN_BIG) return;
    layout.emplace();
    layout->container = SF_FORMAT_RAW;
    layout->encoding = *encoding;
    layout->channels = sf_info.channels;
    layout->sample_rate = sf_info.samplerate;
    layout->declared_bytes = file_size;
  } else {
    std::vector<std::uint8_t> head(std::min<std::uint64_t>(file_size, kPcmHeaderBytes));
    try {
      head.resize(read_at(fd_, head.data(), head.size(), 0));
    } catch (const std::runtime_error&) {
      return;  // libsndfile reads it, and says what is wrong
    }
    layout = parse_pcm_header(head, file_size);
  }
  if (!layout || layout->data_offset > file_size) return;
  const std::uint64_t present =
      std::min<std::uint64_t>(layout->declared_bytes, file_size - layout->data_offset);
  // Where the two disagree (a damaged or unusual header), libsndfile's reading stands.
  if (!same_layout(*layout, sf_info, present / layout->frame_bytes())) return;
  fast_ = layout;
  ::posix_fadvise(fd_, static_cast<off_t>(layout->data_offset), 0, POSIX_FADV_SEQUENTIAL);
}

std::size_t SoundFileReader::read_fast(std::span<float> interleaved) {
  const PcmLayout& layout = *fast_;
  const auto channels = static_cast<std::size_t>(info_.channels);
  const std::uint64_t left = static_cast<std::uint64_t>(info_.frames) - fast_next_frame_;
  const auto frames =
      static_cast<std::size_t>(std::min<std::uint64_t>(interleaved.size() / channels, left));
  if (frames == 0) return 0;
  const std::size_t bytes = frames * layout.frame_bytes();
  const std::uint64_t offset = layout.data_offset + fast_next_frame_ * layout.frame_bytes();
  const bool in_place = layout.encoding == PcmEncoding::float32 && !layout.big_endian;
  std::uint8_t* target = reinterpret_cast<std::uint8_t*>(interleaved.data());
  if (!in_place) {
    fast_bytes_.resize(bytes);
    target = fast_bytes_.data();
  }
  std::size_t got = 0;
  try {
    got = read_at(fd_, target, bytes, offset);
  } catch (const std::runtime_error& e) {
    throw error_for(path_, std::string("read failed: ") + e.what());
  }
  // A file that shrank while it was read ends early, as with libsndfile.
  const std::size_t got_frames = got / layout.frame_bytes();
  if (!in_place) {
    decode_samples(std::span<const std::uint8_t>(target, got_frames * layout.frame_bytes()),
                   layout.encoding, layout.big_endian, interleaved.first(got_frames * channels));
  }
  fast_next_frame_ += got_frames;
  return got_frames;
}

SoundFileReader::~SoundFileReader() {
  if (file_ != nullptr) sf_close(file_);
  close_source();
}

std::size_t SoundFileReader::read(std::span<float> interleaved) {
  const auto channels = static_cast<std::size_t>(info_.channels);
  const auto wanted = static_cast<sf_count_t>(interleaved.size() / channels);
  if (wanted == 0) return 0;
  if (fast_) return read_fast(interleaved);
  const sf_count_t got = sf_readf_float(file_, interleaved.data(), wanted);
  if (got < wanted && sf_error(file_) != SF_ERR_NO_ERROR) {
    check_stream();
    throw error_for(display_name(path_), "read failed: " + library_error(file_));
  }
  // A stream cut by a cancel or a failed read looks like its end to libsndfile.
  if (got < wanted) check_stream();
  return static_cast<std::size_t>(std::max<sf_count_t>(got, 0));
}

// ---------------------------------------------------------------- writing

namespace {

int integer_bits(int format) {
  switch (format & SF_FORMAT_SUBMASK) {
    case SF_FORMAT_PCM_S8:
    case SF_FORMAT_PCM_U8:
      return 8;
    case SF_FORMAT_PCM_16:
      return 16;
    case SF_FORMAT_PCM_24:
      return 24;
    case SF_FORMAT_PCM_32:
      return 32;
    default:
      return 0;
  }
}

}  // namespace

SoundFileWriter::SoundFileWriter(const std::filesystem::path& file, int sample_rate, int channels,
                                 int format, const SoundFileWriterOptions& options)
    : destination_(file), channels_(channels) {
  const std::string shown = is_standard_stream(file) ? "standard output" : file.string();
  if (sample_rate < 1) {
    throw error_for(shown, "invalid sample rate " + std::to_string(sample_rate));
  }
  if (channels < 1) throw error_for(shown, "invalid channel count " + std::to_string(channels));
  if (!format_is_writable(format, channels)) {
    throw error_for(shown, "libsndfile cannot write " + describe_format(format) + " with " +
                               std::to_string(channels) + " channels");
  }
  const int subtype = format & SF_FORMAT_SUBMASK;
  float_format_ = subtype == SF_FORMAT_FLOAT || subtype == SF_FORMAT_DOUBLE;
  if (const int bits = integer_bits(format); bits != 0) quantiser_.emplace(bits, options.dither);

  SF_INFO sf_info{};
  sf_info.samplerate = sample_rate;
  sf_info.channels = channels;
  sf_info.format = format;
  bool seekable = true;
  if (is_standard_stream(file)) {
    struct stat status {};
    seekable = ::fstat(STDOUT_FILENO, &status) == 0 && S_ISREG(status.st_mode) &&
               ::lseek(STDOUT_FILENO, 0, SEEK_CUR) >= 0;
    direct_fd_ = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 0);
    if (direct_fd_ < 0) throw error_for(shown, std::string("cannot use: ") + std::strerror(errno));
  } else {
    // Found now rather than by the rename at the very end of a long run.
    struct stat status {};
    const bool exists = ::stat(file.c_str(), &status) == 0;
    if (exists && S_ISDIR(status.st_mode)) throw error_for(file, "is a directory");
    if (exists && !S_ISREG(status.st_mode)) {
      // A FIFO, a device: written through, opened by its own name so that
      // the kernel follows any links. Opening a FIFO waits for its reader,
      // as a shell would, but by polling (O_NONBLOCK fails with ENXIO while
      // there is none), so that a cancel ends the wait.
      seekable = false;
      while (true) {
        direct_fd_ = ::open(file.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (direct_fd_ >= 0 || !S_ISFIFO(status.st_mode) || (errno != ENXIO && errno != EINTR)) {
          break;
        }
        if (options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed)) {
          throw error_for(file, "interrupted while waiting for a reader");
        }
        ::usleep(StreamOutput::kPollIntervalMs * 1000);
      }
      if (direct_fd_ < 0)
        throw error_for(file, std::string("cannot open: ") + std::strerror(errno));
      // Our own open file: blocking writes from here (StreamOutput polls).
      ::fcntl(direct_fd_, F_SETFL, ::fcntl(direct_fd_, F_GETFL) & ~O_NONBLOCK);
    } else {
      // A regular file or a new name: the temporary file goes beside the
      // link's final target, so that the rename replaces the target, not the link.
      const std::filesystem::path target = follow_symlinks(file);
      removed_stale_ = TemporaryFile::remove_stale(target);
      try {
        temporary_ = std::make_unique<TemporaryFile>(target);
      } catch (const std::runtime_error& e) {
        throw error_for(file, e.what());
      }
    }
  }
  if (!seekable) {
    if (!StreamOutput::can_stream(format)) {
      throw error_for(shown, "cannot write a " + major_name(format) +
                                 " file as a stream (it needs seeking); stream types: " +
                                 StreamOutput::streamable_names());
    }
    stream_ = std::make_unique<StreamOutput>(direct_fd_, format, options.cancel);
    file_ = sf_open_virtual(stream_->io(), SFM_WRITE, &sf_info, stream_.get());
  } else {
    if (temporary_) choose_fast_path(sample_rate, channels, format, options.metadata);
    if (fast_) return;
    // The descriptor stays ours (close_desc = false): the TemporaryFile
    // flushes it to disk before the rename and closes it exactly once.
    file_ = sf_open_fd(temporary_ ? temporary_->fd() : direct_fd_, SFM_WRITE, &sf_info, SF_FALSE);
  }
  if (file_ == nullptr) throw error_for(shown, library_error(nullptr));
  // A PEAK chunk sent ahead of the samples could only hold zeros.
  if (stream_) sf_command(file_, SFC_SET_ADD_PEAK_CHUNK, nullptr, SF_FALSE);
  // Before the first write, so that the header (rewritten then) holds them.
  const SoundFileMetadata& metadata = options.metadata;
  if (metadata.channel_map.size() == static_cast<std::size_t>(channels)) {
    std::vector<int> map = metadata.channel_map;
    sf_command(file_, SFC_SET_CHANNEL_MAP_INFO, map.data(),
               static_cast<int>(map.size() * sizeof(int)));
  }
  for (const auto& [kind, text] : metadata.strings) sf_set_string(file_, kind, text.c_str());
}

SoundFileWriter::~SoundFileWriter() {
  close_file();
  if (direct_fd_ >= 0) ::close(direct_fd_);
  // temporary_ removes the temporary file unless it was committed.
}

void SoundFileWriter::choose_fast_path(int sample_rate, int channels, int format,
                                       const SoundFileMetadata& metadata) {
  const auto encoding = pcm_encoding_of(format);
  const int container = format & SF_FORMAT_TYPEMASK;
  const int endian = format & SF_FORMAT_ENDMASK;
  // Strings and channel maps are libsndfile's to write.
  if (!encoding || !metadata.strings.empty() || !metadata.channel_map.empty()) return;
  PcmLayout layout;
  switch (container) {
    case SF_FORMAT_WAV:
    case SF_FORMAT_WAVEX:
    case SF_FORMAT_RF64:
    case SF_FORMAT_W64:
      if (endian == SF_ENDIAN_BIG) return;  // RIFX and the like
      break;
    case SF_FORMAT_AU:
      layout.big_endian = endian != SF_ENDIAN_LITTLE && endian != SF_ENDIAN_CPU;
      break;
    case SF_FORMAT_RAW:
      layout.big_endian = endian == SF_ENDIAN_BIG;
      break;
    default:
      return;
  }
  layout.container = container;
  layout.encoding = *encoding;
  layout.channels = channels;
  layout.sample_rate = sample_rate;
  // The header's first version goes first, so that the samples follow it in
  // whole chunks; finish_fast() rewrites it with the true lengths.
  const std::vector<std::uint8_t> header = make_pcm_header(layout, 0);
  fast_file_ = std::make_unique<StagedFileWriter>(temporary_->fd(), true);
  try {
    fast_file_->append(header);
  } catch (const std::runtime_error& e) {
    throw error_for(destination_, std::string("write failed: ") + e.what());
  }
  fast_ = layout;
}

void SoundFileWriter::finish_fast() {
  // RIFF chunks are padded to an even size.
  const int container = fast_->container;
  const bool pad =
      (fast_data_bytes_ & 1) != 0 &&
      (container == SF_FORMAT_WAV || container == SF_FORMAT_WAVEX || container == SF_FORMAT_RF64);
  PcmLayout layout = *fast_;
  const std::vector<std::uint8_t> header = make_pcm_header(layout, fast_data_bytes_);
  try {
    if (pad) fast_file_->append(std::array<std::uint8_t, 1>{0});
    fast_file_->finish(header);
  } catch (const std::runtime_error& e) {
    throw error_for(destination_, std::string("write failed: ") + e.what());
  }
  fast_file_.reset();
}

void SoundFileWriter::close_file() {
  if (file_ != nullptr) {
    sf_close(file_);
    file_ = nullptr;
  }
}

void SoundFileWriter::write(std::span<const float> interleaved) {
  if (committed_ || (file_ == nullptr && !fast_)) {
    throw error_for(destination_, "write after commit");
  }
  const auto channels = static_cast<std::size_t>(channels_);
  if (interleaved.size() % channels != 0) {
    throw error_for(destination_, "write of " + std::to_string(interleaved.size()) +
                                      " samples is not a whole number of " +
                                      std::to_string(channels) + "-channel frames");
  }
  clip_.peak = finite_peak(interleaved, clip_.peak);
  const auto frames = static_cast<sf_count_t>(interleaved.size() / channels);
  if (fast_) {
    write_fast_samples(interleaved);
    return;
  }
  sf_count_t written = 0;
  if (quantiser_) {
    codes_.resize(interleaved.size());
    quantiser_->quantise(interleaved, codes_);
    clip_.clipped_samples = quantiser_->clipped_samples();
    written = sf_writef_int(file_, codes_.data(), frames);
  } else if (!float_format_) {
    // Other encodings (A-law, Vorbis...) take floats in [-1, 1].
    clipped_.resize(interleaved.size());
    for (std::size_t i = 0; i < interleaved.size(); ++i) {
      const float x = interleaved[i];
      const bool outside = std::isnan(x) || std::fabs(x) > 1.0f;
      clipped_[i] = std::isnan(x) ? 0.0f : outside ? std::copysign(1.0f, x) : x;
      clip_.clipped_samples += outside ? 1 : 0;
    }
    written = sf_writef_float(file_, clipped_.data(), frames);
  } else {
    written = sf_writef_float(file_, interleaved.data(), frames);
  }
  if (written != frames) {
    throw error_for(destination_, "write failed: " + library_error(file_));
  }
}

void SoundFileWriter::write_fast_samples(std::span<const float> interleaved) {
  const std::size_t sample_bytes = static_cast<std::size_t>(bytes_per_sample(fast_->encoding));
  try {
    if (fast_->encoding == PcmEncoding::float32 && !fast_->big_endian) {
      // The caller's samples are the file's bytes.
      fast_file_->append(std::span<const std::uint8_t>(
          reinterpret_cast<const std::uint8_t*>(interleaved.data()), interleaved.size_bytes()));
      fast_data_bytes_ += interleaved.size_bytes();
      return;
    }
    // Converted in pieces that stay in the cache.
    constexpr std::size_t kPiece = 1 << 14;
    fast_encoded_.resize(std::min(kPiece, interleaved.size()) * sample_bytes);
    for (std::size_t at = 0; at < interleaved.size(); at += kPiece) {
      const auto piece = interleaved.subspan(at, std::min(kPiece, interleaved.size() - at));
      const auto bytes = std::span<std::uint8_t>(fast_encoded_).first(piece.size() * sample_bytes);
      if (quantiser_) {
        codes_.resize(piece.size());
        quantiser_->quantise(piece, codes_);
        encode_codes(codes_, fast_->encoding, fast_->big_endian, bytes);
      } else {
        encode_floats(piece, fast_->big_endian, bytes);
      }
      fast_file_->append(bytes);
      fast_data_bytes_ += bytes.size();
    }
  } catch (const std::runtime_error& e) {
    throw error_for(destination_, std::string("write failed: ") + e.what());
  }
  if (quantiser_) clip_.clipped_samples = quantiser_->clipped_samples();
}

void SoundFileWriter::commit(BackgroundCommits* later) {
  if (committed_) return;
  if (fast_) {
    finish_fast();
  } else {
    if (file_ == nullptr) throw error_for(destination_, "commit after a failed close");
    const int close_result = sf_close(file_);
    file_ = nullptr;
    if (close_result != 0) {
      throw error_for(destination_,
                      "closing failed: " + std::string(sf_error_number(close_result)));
    }
  }
  try {
    if (stream_) stream_->finish();
    if (temporary_ && later != nullptr) {
      later->add(std::move(temporary_));
    } else if (temporary_) {
      temporary_->commit();
    }
  } catch (const std::runtime_error& e) {
    throw error_for(is_standard_stream(destination_) ? "standard output" : destination_.string(),
                    e.what());
  }
  committed_ = true;
}

}  // namespace tapstream

#include "dsp/files/coefficient_file.hpp"

#include <sndfile.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <regex>
#include <string_view>

#include "dsp/design/filter_resampling.hpp"
#include "dsp/files/regular_file.hpp"
#include "dsp/files/sound_file.hpp"
#include "dsp/files/temporary_file.hpp"

namespace tapstream {

namespace {

namespace fs = std::filesystem;

enum class FileKind { text, raw_f32, raw_f64, audio, audio_or_text };

CoefficientFileError error_in(const fs::path& file, const std::string& problem) {
  return CoefficientFileError(file.string() + ": " + problem);
}

CoefficientFileError error_at(const fs::path& file, std::size_t line, const std::string& problem) {
  return CoefficientFileError(file.string() + ":" + std::to_string(line) + ": " + problem);
}

std::string lower_extension(const fs::path& file) {
  std::string extension = file.extension().string();
  for (auto& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return extension;
}

FileKind kind_of(const fs::path& file) {
  static constexpr std::array<std::string_view, 7> kText = {".txt",    ".taps", ".coef", ".coefs",
                                                            ".coeffs", ".fir",  ".csv"};
  static constexpr std::array<std::string_view, 21> kAudio = {
      ".wav",  ".wave", ".flac", ".aif", ".aiff", ".aifc",  ".ogg", ".oga", ".opus", ".caf", ".w64",
      ".rf64", ".au",   ".snd",  ".voc", ".sf",   ".ircam", ".mat", ".paf", ".xi",   ".mp3"};
  const std::string extension = lower_extension(file);
  // .raw and .bin: what most tools write when asked for "raw" taps (numpy's
  // tofile on float32, sox -t f32, Octave fwrite(..., 'float32')).
  if (extension == ".f32" || extension == ".raw" || extension == ".bin") return FileKind::raw_f32;
  if (extension == ".f64") return FileKind::raw_f64;
  if (std::find(kText.begin(), kText.end(), extension) != kText.end()) return FileKind::text;
  if (std::find(kAudio.begin(), kAudio.end(), extension) != kAudio.end()) return FileKind::audio;
  return FileKind::audio_or_text;
}

// Text quoted in an error: printable and short, so that the message stays one
// readable line even when the file is binary.
std::string quoted(std::string_view text) {
  constexpr std::size_t kMax = 40;
  std::string out = "'";
  for (std::size_t i = 0; i < text.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    out += std::isprint(c) ? static_cast<char>(c) : '?';
  }
  if (text.size() > kMax) out += "...";
  return out + "'";
}

// The most bytes a text file of `max_taps` taps is read for. Generous: a tap
// written in full ("-1.2345678901234567e-05\r\n") takes 26 bytes; the rest is
// room for indentation and comments, and 1 MiB for a header.
std::uint64_t text_bytes_limit(std::size_t max_taps) {
  return std::uint64_t(max_taps) * 128 + (std::uint64_t(1) << 20);
}

std::string why_limit(const CoefficientFileOptions& options) {
  return "for the maximum of " + std::to_string(options.max_taps) + " taps";
}

std::string_view trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r\v\f";
  const auto first = text.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(kSpace);
  return text.substr(first, last - first + 1);
}

std::string too_many_taps(const CoefficientFileOptions& options) {
  return "more taps than the maximum of " + std::to_string(options.max_taps);
}

// The rate a text file's comment declares: what `tapstream design` writes
// ("255 taps, 48000 Hz sample rate") or "sample rate: 48000" / "sample_rate = 48000".
std::optional<double> declared_rate(std::string_view comment) {
  static const std::regex kPatterns[] = {
      std::regex(R"(([0-9]+(\.[0-9]*)?)\s*Hz sample rate)", std::regex::icase),
      std::regex(R"(sample[ _]rate\s*[:=]?\s*([0-9]+(\.[0-9]*)?))", std::regex::icase)};
  std::match_results<std::string_view::const_iterator> match;
  for (const auto& pattern : kPatterns) {
    if (std::regex_search(comment.begin(), comment.end(), match, pattern)) {
      return std::strtod(match[1].str().c_str(), nullptr);
    }
  }
  return std::nullopt;
}

std::string rate_mismatch(double file_rate, const CoefficientFileOptions& options) {
  return "sample rate " + std::to_string(std::lround(file_rate)) + " Hz differs from the audio's " +
         std::to_string(options.sample_rate) +
         " Hz (redesign it for that rate, or ask to ignore the sample rate)";
}

std::vector<float> load_text(RegularFile& opened, const CoefficientFileOptions& options) {
  const fs::path& file = opened.path();
  const std::string content =
      opened.read_all(text_bytes_limit(options.max_taps), why_limit(options) + " of text");
  std::vector<float> taps;
  std::size_t line_number = 0;
  // Editors on Windows start UTF-8 files with a byte order mark.
  std::size_t start = content.starts_with("\xef\xbb\xbf") ? 3 : 0;
  while (start < content.size()) {
    std::size_t end = content.find('\n', start);
    if (end == std::string::npos) end = content.size();
    ++line_number;
    std::string_view line(content.data() + start, end - start);
    start = end + 1;
    if (const auto hash = line.find('#'); hash != std::string_view::npos) {
      const auto rate = declared_rate(line.substr(hash));
      if (rate && options.sample_rate != 0 && !options.ignore_sample_rate &&
          std::abs(*rate - options.sample_rate) > 0.5) {
        throw error_at(file, line_number, rate_mismatch(*rate, options));
      }
      line = line.substr(0, hash);
    }
    line = trim(line);
    if (line.empty()) continue;
    std::string_view number = line;
    // from_chars takes no leading '+', people write one.
    if (number.size() > 1 && number.front() == '+' && number[1] != '-' && number[1] != '+') {
      number.remove_prefix(1);
    }
    double value = 0.0;
    const auto [end_of_number, status] =
        std::from_chars(number.data(), number.data() + number.size(), value);
    if (status == std::errc::result_out_of_range) {
      throw error_at(file, line_number, quoted(line) + " is out of the range of a float");
    }
    if (status != std::errc() || end_of_number != number.data() + number.size()) {
      throw error_at(file, line_number,
                     "cannot parse " + quoted(line) + " as a number (one tap per line)");
    }
    if (!std::isfinite(value)) {
      throw error_at(file, line_number, quoted(line) + " is not a finite number");
    }
    const auto tap = static_cast<float>(value);
    if (!std::isfinite(tap)) {
      throw error_at(file, line_number, quoted(line) + " is out of the range of a float");
    }
    if (taps.size() == options.max_taps) throw error_at(file, line_number, too_many_taps(options));
    taps.push_back(tap);
  }
  if (taps.empty()) throw error_in(file, "no taps (the file is empty or only comments)");
  return taps;
}

template <typename Sample>
std::vector<float> load_raw(RegularFile& opened, const CoefficientFileOptions& options) {
  static_assert(sizeof(Sample) == 4 || sizeof(Sample) == 8);
  using Bits = std::conditional_t<sizeof(Sample) == 4, std::uint32_t, std::uint64_t>;
  const fs::path& file = opened.path();
  const char* type_name = sizeof(Sample) == 4 ? "float32" : "float64";
  // Exact: every byte is part of a tap.
  if (opened.size() > std::uint64_t(options.max_taps) * sizeof(Sample)) {
    throw error_in(file, std::to_string(opened.size() / sizeof(Sample)) + " taps, " +
                             too_many_taps(options) + " (refused by its size of " +
                             std::to_string(opened.size()) + " bytes, without reading it)");
  }
  const std::string content = opened.read_all(std::uint64_t(options.max_taps) * sizeof(Sample),
                                              why_limit(options) + " of raw " + type_name);
  if (content.empty()) throw error_in(file, "no taps (the file is empty)");
  if (content.size() % sizeof(Sample) != 0) {
    throw error_in(file, "size " + std::to_string(content.size()) + " bytes is not a multiple of " +
                             std::to_string(sizeof(Sample)) + " (raw little-endian " + type_name +
                             ")");
  }
  const std::size_t count = content.size() / sizeof(Sample);
  if (count > options.max_taps) {
    throw error_in(file, std::to_string(count) + " taps, " + too_many_taps(options));
  }
  std::vector<float> taps(count);
  for (std::size_t i = 0; i < count; ++i) {
    // Little-endian on disk, whatever the host's byte order.
    Bits bits = 0;
    for (std::size_t byte = 0; byte < sizeof(Sample); ++byte) {
      bits |= static_cast<Bits>(static_cast<unsigned char>(content[i * sizeof(Sample) + byte]))
              << (8 * byte);
    }
    const auto value = std::bit_cast<Sample>(bits);
    if (!std::isfinite(value)) {
      throw error_in(file, "tap " + std::to_string(i) + " (counting from 0) is " +
                               (std::isnan(value) ? "NaN" : "infinite"));
    }
    taps[i] = static_cast<float>(value);
    if (!std::isfinite(taps[i])) {
      throw error_in(
          file, "tap " + std::to_string(i) + " (counting from 0) is out of the range of a float");
    }
  }
  return taps;
}

struct SndfileCloser {
  void operator()(SNDFILE* file) const { sf_close(file); }
};
using SndfilePtr = std::unique_ptr<SNDFILE, SndfileCloser>;

FilterBank load_audio(const fs::path& file, SndfilePtr sound, const SF_INFO& info,
                      const CoefficientFileOptions& options) {
  const auto ir_channels = static_cast<std::size_t>(info.channels);
  if (ir_channels != 1 && ir_channels != options.channels) {
    throw error_in(file, "impulse response has " + std::to_string(ir_channels) +
                             " channels; the audio has " + std::to_string(options.channels) +
                             " (use 1 IR channel for all, or one per audio channel)");
  }
  if (options.sample_rate != 0 && !options.ignore_sample_rate &&
      info.samplerate != options.sample_rate) {
    throw error_in(file, "impulse response " + rate_mismatch(info.samplerate, options));
  }
  // The header's frame count (libsndfile's, never more than the data the
  // file holds) refuses a long one before a sample is read; a streamed
  // header that does not say (SF_COUNT_MAX) is bounded by the reading below.
  if (info.frames != SF_COUNT_MAX && info.frames > sf_count_t(options.max_taps)) {
    throw error_in(file, "impulse response has " + std::to_string(info.frames) + " frames, " +
                             too_many_taps(options) + " (refused before reading it)");
  }
  std::vector<std::vector<float>> taps(ir_channels);
  std::vector<float> block(4096 * ir_channels);
  std::size_t frames_total = 0;
  while (true) {
    const sf_count_t got = sf_readf_float(sound.get(), block.data(),
                                          static_cast<sf_count_t>(block.size() / ir_channels));
    if (got <= 0) break;
    const auto frames = static_cast<std::size_t>(got);
    if (frames_total + frames > options.max_taps) {
      throw error_in(file, "impulse response has " + too_many_taps(options) + " (frames)");
    }
    for (std::size_t f = 0; f < frames; ++f) {
      for (std::size_t c = 0; c < ir_channels; ++c) {
        const float value = block[f * ir_channels + c];
        if (!std::isfinite(value)) {
          throw error_in(file, "frame " + std::to_string(frames_total + f) +
                                   " (counting from 0) of channel " + std::to_string(c + 1) +
                                   " is " + (std::isnan(value) ? "NaN" : "infinite"));
        }
        taps[c].push_back(value);
      }
    }
    frames_total += frames;
  }
  if (sf_error(sound.get()) != SF_ERR_NO_ERROR) {
    throw error_in(file, std::string("read failed: ") + sf_strerror(sound.get()));
  }
  if (frames_total == 0) throw error_in(file, "no taps (the impulse response has no frames)");
  if (const std::int64_t declared = declared_frames(sound.get(), info);
      declared > std::int64_t(frames_total)) {
    const std::string problem = "cut short: the header promises " + std::to_string(declared) +
                                " frames, the file holds " + std::to_string(frames_total);
    if (options.strict) throw error_in(file, problem + " (refused: --strict)");
    if (options.damage != nullptr) options.damage->push_back(file.string() + ": " + problem);
  }
  if (ir_channels == 1)
    return FilterBank::shared(std::move(taps[0]), options.channels, file.string());
  std::vector<std::string> sources;
  for (std::size_t c = 0; c < ir_channels; ++c) {
    sources.push_back(file.string() + " channel " + std::to_string(c + 1));
  }
  return FilterBank::per_channel(std::move(taps), std::move(sources));
}

}  // namespace

namespace {

// A filter of zeros is valid but silences its channels: almost always a
// mistake (a file saved before it was filled, a gain of -inf), so say so.
FilterBank warn_if_silent(FilterBank bank) {
  for (std::size_t c = 0; c < bank.channels(); ++c) {
    const auto taps = bank.taps(c);
    if (std::all_of(taps.begin(), taps.end(), [](float tap) { return tap == 0.0f; })) {
      spdlog::warn("{}: every tap is zero: the output of channel {} will be silence",
                   bank.source(c), c);
    }
  }
  return bank;
}

}  // namespace

FilterBank load_filter_bank(const fs::path& file, const CoefficientFileOptions& options) {
  return warn_if_silent(load_filter_bank_quietly(file, options));
}

namespace {

RegularFile open_coefficient_file(const fs::path& file) {
  try {
    return RegularFile(file);
  } catch (const RegularFileError& e) {
    throw CoefficientFileError(e.what());
  }
}

// libsndfile on the descriptor already checked (never the name again).
SndfilePtr open_audio(const RegularFile& opened, SF_INFO& info) {
  if (::lseek(opened.fd(), 0, SEEK_SET) < 0) return nullptr;
  return SndfilePtr(sf_open_fd(libsndfile_descriptor(opened.fd()), SFM_READ, &info, SF_TRUE));
}

// The rate a text file's comments declare, scanning lines of up to 64 KiB
// (the rest of a longer line is not looked at); nullopt when none does.
std::optional<double> rate_in_comments(const RegularFile& opened) {
  constexpr std::size_t kMaxLine = 65536;
  if (::lseek(opened.fd(), 0, SEEK_SET) < 0) return std::nullopt;
  std::string line;
  const auto declared_in = [](const std::string& text) -> std::optional<double> {
    const auto hash = text.find('#');
    if (hash == std::string::npos) return std::nullopt;
    return declared_rate(std::string_view(text).substr(hash));
  };
  std::array<char, 65536> buffer{};
  while (true) {
    const ssize_t n = ::read(opened.fd(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buffer[std::size_t(i)] == '\n') {
        if (const auto rate = declared_in(line)) return rate;
        line.clear();
      } else if (line.size() < kMaxLine) {
        line += buffer[std::size_t(i)];
      }
    }
  }
  return declared_in(line);
}

}  // namespace

namespace {

// The file as it holds it; `recorded_rate` gets the rate the file says it was
// made for (an audio header, a text comment; 0 when it does not say).
FilterBank load_as_recorded(const fs::path& file, const CoefficientFileOptions& options,
                            double& recorded_rate) {
  recorded_rate = 0.0;
  if (options.channels == 0) throw error_in(file, "the audio has no channels");
  // Before anything else: a device, FIFO or directory is refused here, by
  // the open descriptor, whatever asked for it (command line, configuration,
  // control socket, web API, matrix file).
  RegularFile opened = open_coefficient_file(file);

  const FileKind kind = kind_of(file);
  try {
    if (kind == FileKind::audio || kind == FileKind::audio_or_text) {
      SF_INFO info{};
      SndfilePtr sound = open_audio(opened, info);
      if (sound) {
        recorded_rate = info.samplerate;
        return load_audio(file, std::move(sound), info, options);
      }
      if (kind == FileKind::audio) {
        throw error_in(file, std::string("cannot read as audio: ") + sf_strerror(nullptr));
      }
    }
    std::vector<float> taps;
    switch (kind) {
      case FileKind::raw_f32:
        taps = load_raw<float>(opened, options);
        break;
      case FileKind::raw_f64:
        taps = load_raw<double>(opened, options);
        break;
      default:
        taps = load_text(opened, options);
        recorded_rate = rate_in_comments(opened).value_or(0.0);
        break;
    }
    return FilterBank::shared(std::move(taps), options.channels, file.string());
  } catch (const CoefficientFileError&) {
    throw;
  } catch (const RegularFileError& e) {
    throw CoefficientFileError(e.what());
  } catch (const std::invalid_argument& e) {
    // FilterBank's own validation; the checks above should have caught it first.
    throw error_in(file, e.what());
  }
}

}  // namespace

FilterBank load_filter_bank_quietly(const fs::path& file, const CoefficientFileOptions& options) {
  double recorded_rate = 0.0;
  const bool follows_rate = options.sample_rate != 0 && !options.ignore_sample_rate;
  if (!follows_rate || !options.resample) return load_as_recorded(file, options, recorded_rate);
  // The rate is checked here, after loading, so that a mismatch resamples.
  CoefficientFileOptions as_recorded = options;
  as_recorded.ignore_sample_rate = true;
  FilterBank bank = load_as_recorded(file, as_recorded, recorded_rate);
  const double file_rate = recorded_rate > 0.0 ? recorded_rate : double(options.named_rate);
  if (file_rate <= 0.0 || std::abs(file_rate - options.sample_rate) <= 0.5) return bank;
  spdlog::info("{}: resampling the filter from {} Hz to {} Hz (the rate in force)", file.string(),
               std::lround(file_rate), options.sample_rate);
  std::vector<std::vector<float>> taps;
  std::vector<std::string> sources;
  const std::size_t filters = bank.is_shared() ? 1 : bank.channels();
  try {
    for (std::size_t c = 0; c < filters; ++c) {
      taps.push_back(resample_filter(bank.taps(c), file_rate, options.sample_rate));
      sources.push_back(bank.source(c));
      if (taps.back().size() > options.max_taps) {
        throw error_in(file, "resampled from " + std::to_string(std::lround(file_rate)) + " to " +
                                 std::to_string(options.sample_rate) + " Hz it has " +
                                 std::to_string(taps.back().size()) + " taps, " +
                                 too_many_taps(options));
      }
    }
  } catch (const FilterResamplingError& e) {
    throw error_in(file, e.what());
  }
  if (bank.is_shared()) return FilterBank::shared(std::move(taps[0]), options.channels, sources[0]);
  return FilterBank::per_channel(std::move(taps), std::move(sources));
}

CoefficientFileHeader read_coefficient_header(const fs::path& file) {
  CoefficientFileHeader header;
  const RegularFile opened = open_coefficient_file(file);
  const FileKind kind = kind_of(file);
  if (kind == FileKind::audio || kind == FileKind::audio_or_text) {
    SF_INFO info{};
    if (SndfilePtr sound = open_audio(opened, info)) {
      header.sample_rate = info.samplerate;
      header.channels = static_cast<std::size_t>(std::max(info.channels, 1));
      return header;
    }
  }
  if (kind == FileKind::text || kind == FileKind::audio_or_text) {
    header.sample_rate = rate_in_comments(opened).value_or(0.0);
  }
  return header;
}

namespace {

void check_finite(const fs::path& file, const std::vector<float>& taps) {
  if (taps.empty()) throw error_in(file, "no taps to write");
  for (std::size_t i = 0; i < taps.size(); ++i) {
    if (!std::isfinite(taps[i])) {
      throw error_in(file, "tap " + std::to_string(i) + " (counting from 0) is not finite");
    }
  }
}

void write_atomically(const fs::path& file, const std::string& bytes) {
  try {
    TemporaryFile temporary(file);
    std::size_t written = 0;
    while (written < bytes.size()) {
      const ssize_t n = ::write(temporary.fd(), bytes.data() + written, bytes.size() - written);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error(std::string("cannot write: ") + std::strerror(errno));
      }
      written += static_cast<std::size_t>(n);
    }
    temporary.commit();
  } catch (const std::runtime_error& e) {
    throw error_in(file, e.what());
  }
}

template <typename Sample>
std::string raw_bytes(const std::vector<float>& taps) {
  using Bits = std::conditional_t<sizeof(Sample) == 4, std::uint32_t, std::uint64_t>;
  std::string bytes;
  bytes.reserve(taps.size() * sizeof(Sample));
  for (const float tap : taps) {
    const auto bits = std::bit_cast<Bits>(static_cast<Sample>(tap));
    for (std::size_t byte = 0; byte < sizeof(Sample); ++byte) {
      bytes.push_back(static_cast<char>((bits >> (8 * byte)) & 0xff));  // little-endian
    }
  }
  return bytes;
}

void save_wav(const fs::path& file, const std::vector<float>& taps, double sample_rate) {
  const auto rate = static_cast<int>(std::lround(sample_rate));
  if (rate < 1) throw error_in(file, "a WAV file needs a sample rate of at least 1 Hz");
  try {
    TemporaryFile temporary(file);
    SF_INFO info{};
    info.samplerate = rate;
    info.channels = 1;
    info.format = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
    SndfilePtr sound(sf_open_fd(temporary.fd(), SFM_WRITE, &info, /*close_desc=*/SF_FALSE));
    if (!sound) throw std::runtime_error(std::string("cannot write WAV: ") + sf_strerror(nullptr));
    const auto count = static_cast<sf_count_t>(taps.size());
    if (sf_writef_float(sound.get(), taps.data(), count) != count) {
      throw std::runtime_error(std::string("cannot write WAV: ") + sf_strerror(sound.get()));
    }
    sound.reset();  // sf_close writes the header's sizes
    temporary.commit();
  } catch (const std::runtime_error& e) {
    throw error_in(file, e.what());
  }
}

}  // namespace

void save_text_taps(const fs::path& file, const std::vector<float>& taps,
                    const std::string& header_comment) {
  check_finite(file, taps);
  std::string text;
  std::size_t begin = 0;
  while (begin < header_comment.size()) {
    std::size_t end = header_comment.find('\n', begin);
    if (end == std::string::npos) end = header_comment.size();
    text += "# ";
    text.append(header_comment, begin, end - begin);
    text += '\n';
    begin = end + 1;
  }
  for (const float tap : taps) {
    // The shortest text that reads back as exactly the same float.
    char buffer[32];
    const auto result = std::to_chars(buffer, buffer + sizeof(buffer), tap);
    text.append(buffer, result.ptr);
    text += '\n';
  }
  write_atomically(file, text);
}

std::string save_taps(const fs::path& file, const std::vector<float>& taps,
                      const std::string& header_comment, double sample_rate) {
  check_finite(file, taps);
  switch (kind_of(file)) {
    case FileKind::raw_f32:
      write_atomically(file, raw_bytes<float>(taps));
      return "raw little-endian float32";
    case FileKind::raw_f64:
      write_atomically(file, raw_bytes<double>(taps));
      return "raw little-endian float64";
    case FileKind::audio:
      if (lower_extension(file) != ".wav") {
        throw error_in(file,
                       "can only write coefficients as text, .wav, .f32/.raw/.bin or .f64, not " +
                           lower_extension(file));
      }
      save_wav(file, taps, sample_rate);
      return "WAV (mono, 32-bit float)";
    default:
      save_text_taps(file, taps, header_comment);
      return "text";
  }
}

}  // namespace tapstream

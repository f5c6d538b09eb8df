#pragma once
// The headers of the sound files whose samples are plain PCM or IEEE float
// laid out one frame after another: WAV (RIFF, WAVE_FORMAT_EXTENSIBLE too),
// RF64, Sony Wave64 and Sun AU, for the fast path of SoundFileReader and
// SoundFileWriter (dsp/files/pcm_codec moves the samples). Parsing only says
// where the samples are and what they are; it answers "not mine" (nullopt)
// for anything else (other encodings, big-endian RIFX, a header that does
// not make sense), and the caller then leaves the file to libsndfile. It
// reads nothing outside the bytes it is given, whatever they hold (fuzzed:
// tests/fuzz/fuzz_pcm_header.cpp).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace tapstream {

// The sample encodings of the fast path.
enum class PcmEncoding { pcm16, pcm24, pcm32, float32 };

int bytes_per_sample(PcmEncoding encoding);
// libsndfile's SF_FORMAT_* subtype for it.
int libsndfile_subtype(PcmEncoding encoding);
// The encoding of a libsndfile SF_FORMAT_* subtype; nullopt for any other.
std::optional<PcmEncoding> pcm_encoding_of(int libsndfile_format);

struct PcmLayout {
  int container = 0;  // libsndfile's SF_FORMAT_* major: WAV, WAVEX, RF64, W64, AU, RAW
  PcmEncoding encoding = PcmEncoding::float32;
  bool big_endian = false;
  int channels = 0;
  int sample_rate = 0;
  std::uint64_t data_offset = 0;  // where the first sample is
  // What the header promises (bytes of samples); for an "unknown" length
  // (AU's 0xffffffff) the rest of the file.
  std::uint64_t declared_bytes = 0;
  std::uint64_t frame_bytes() const {
    return static_cast<std::uint64_t>(channels) *
           static_cast<std::uint64_t>(bytes_per_sample(encoding));
  }
};

// The most header bytes a file's layout is looked for in: chunks that come
// before the samples (LIST, JUNK, bext...) and end beyond this are left to
// libsndfile.
constexpr std::size_t kPcmHeaderBytes = 1 << 20;

// `head`: the file's first bytes (up to kPcmHeaderBytes); `file_size`: its
// whole size. nullopt: not a file of the fast path.
std::optional<PcmLayout> parse_pcm_header(std::span<const std::uint8_t> head,
                                          std::uint64_t file_size);

// The header the fast writer puts before `data_bytes` bytes of samples of
// `layout` (whose container, encoding, channels and rate are used; the
// offsets are set here): the same fields libsndfile writes, read back by it
// alike. A WAV (or WAVE_FORMAT_EXTENSIBLE) whose samples no longer fit
// 4 GiB is written as RF64, as libsndfile does when asked for it. Its size
// does not depend on data_bytes, so it can be written before the samples
// and rewritten at the end. Sets layout.data_offset.
std::vector<std::uint8_t> make_pcm_header(PcmLayout& layout, std::uint64_t data_bytes);

// The size make_pcm_header gives for a container (the samples start there).
std::size_t pcm_header_size(const PcmLayout& layout);

}  // namespace tapstream

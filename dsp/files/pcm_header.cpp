#include "dsp/files/pcm_header.hpp"

#include <sndfile.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

namespace tapstream {

int bytes_per_sample(PcmEncoding encoding) {
  switch (encoding) {
    case PcmEncoding::pcm16:
      return 2;
    case PcmEncoding::pcm24:
      return 3;
    case PcmEncoding::pcm32:
    case PcmEncoding::float32:
      return 4;
  }
  return 4;
}

int libsndfile_subtype(PcmEncoding encoding) {
  switch (encoding) {
    case PcmEncoding::pcm16:
      return SF_FORMAT_PCM_16;
    case PcmEncoding::pcm24:
      return SF_FORMAT_PCM_24;
    case PcmEncoding::pcm32:
      return SF_FORMAT_PCM_32;
    case PcmEncoding::float32:
      return SF_FORMAT_FLOAT;
  }
  return SF_FORMAT_FLOAT;
}

std::optional<PcmEncoding> pcm_encoding_of(int libsndfile_format) {
  switch (libsndfile_format & SF_FORMAT_SUBMASK) {
    case SF_FORMAT_PCM_16:
      return PcmEncoding::pcm16;
    case SF_FORMAT_PCM_24:
      return PcmEncoding::pcm24;
    case SF_FORMAT_PCM_32:
      return PcmEncoding::pcm32;
    case SF_FORMAT_FLOAT:
      return PcmEncoding::float32;
    default:
      return std::nullopt;
  }
}

namespace {

// Sanity bounds past which the file is left to libsndfile (which has its own).
constexpr int kMaxChannels = 1024;  // libsndfile's SF_MAX_CHANNELS

constexpr std::uint16_t kTagPcm = 1;
constexpr std::uint16_t kTagFloat = 3;
constexpr std::uint16_t kTagExtensible = 0xfffe;

// Wave64 GUIDs: a four-letter name, then 12 bytes.
constexpr std::array<std::uint8_t, 16> kW64Riff = {'r',  'i',  'f',  'f',  0x2e, 0x91, 0xcf, 0x11,
                                                   0xa5, 0xd6, 0x28, 0xdb, 0x04, 0xc1, 0x00, 0x00};
constexpr std::array<std::uint8_t, 12> kW64Tail = {0xf3, 0xac, 0xd3, 0x11, 0x8c, 0xd1,
                                                   0x00, 0xc0, 0x4f, 0x8e, 0xdb, 0x8a};
// The tail of KSDATAFORMAT_SUBTYPE_PCM / _IEEE_FLOAT after their 16-bit tag.
constexpr std::array<std::uint8_t, 14> kSubtypeTail = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                                       0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71};

// Bounds-checked little/big-endian reads from the header bytes.
class Bytes {
 public:
  explicit Bytes(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  bool has(std::uint64_t at, std::uint64_t count) const {
    return at <= bytes_.size() && count <= bytes_.size() - at;
  }
  bool is(std::uint64_t at, const char* tag) const {
    const std::size_t n = std::strlen(tag);
    return has(at, n) && std::memcmp(bytes_.data() + at, tag, n) == 0;
  }
  template <std::size_t N>
  bool is(std::uint64_t at, const std::array<std::uint8_t, N>& tag) const {
    return has(at, N) && std::memcmp(bytes_.data() + at, tag.data(), N) == 0;
  }
  std::uint64_t le(std::uint64_t at, int count) const {
    std::uint64_t value = 0;
    for (int i = count - 1; i >= 0; --i) value = (value << 8) | bytes_[at + i];
    return value;
  }
  std::uint64_t be(std::uint64_t at, int count) const {
    std::uint64_t value = 0;
    for (int i = 0; i < count; ++i) value = (value << 8) | bytes_[at + i];
    return value;
  }

 private:
  std::span<const std::uint8_t> bytes_;
};

// The fmt chunk's fields that matter here.
struct WaveFormat {
  bool found = false;
  bool extensible = false;
  int channels = 0;
  int sample_rate = 0;
  PcmEncoding encoding = PcmEncoding::float32;
};

// Parses a WAVEFORMATEX / WAVEFORMATEXTENSIBLE body; false: not ours.
bool parse_fmt(const Bytes& bytes, std::uint64_t at, std::uint64_t size, WaveFormat& format) {
  if (size < 16 || !bytes.has(at, 16)) return false;
  std::uint64_t tag = bytes.le(at, 2);
  format.channels = static_cast<int>(bytes.le(at + 2, 2));
  format.sample_rate = static_cast<int>(std::min<std::uint64_t>(bytes.le(at + 4, 4), 0x7fffffff));
  const std::uint64_t block_align = bytes.le(at + 12, 2);
  const std::uint64_t bits = bytes.le(at + 14, 2);
  if (tag == kTagExtensible) {
    if (size < 40 || !bytes.has(at, 40)) return false;
    if (!bytes.is(at + 26, kSubtypeTail)) return false;
    format.extensible = true;
    tag = bytes.le(at + 24, 2);
  }
  if (format.channels < 1 || format.channels > kMaxChannels || format.sample_rate < 1) return false;
  if (tag == kTagPcm && bits == 16) {
    format.encoding = PcmEncoding::pcm16;
  } else if (tag == kTagPcm && bits == 24) {
    format.encoding = PcmEncoding::pcm24;
  } else if (tag == kTagPcm && bits == 32) {
    format.encoding = PcmEncoding::pcm32;
  } else if (tag == kTagFloat && bits == 32) {
    format.encoding = PcmEncoding::float32;
  } else {
    return false;
  }
  // Frames must be packed: anything else libsndfile reads its own way.
  if (block_align !=
      static_cast<std::uint64_t>(format.channels) * bytes_per_sample(format.encoding)) {
    return false;
  }
  format.found = true;
  return true;
}

PcmLayout layout_of(int container, const WaveFormat& format, std::uint64_t data_offset,
                    std::uint64_t declared_bytes) {
  PcmLayout layout;
  layout.container = container;
  layout.encoding = format.encoding;
  layout.channels = format.channels;
  layout.sample_rate = format.sample_rate;
  layout.data_offset = data_offset;
  layout.declared_bytes = declared_bytes;
  return layout;
}

std::optional<PcmLayout> parse_riff(const Bytes& bytes, std::uint64_t head_size, bool rf64) {
  WaveFormat format;
  std::uint64_t ds64_data_bytes = 0;
  bool have_ds64 = false;
  std::uint64_t at = 12;
  // Chunks until the samples: a fmt chunk must come before them.
  while (bytes.has(at, 8)) {
    const std::uint64_t size = bytes.le(at + 4, 4);
    const std::uint64_t body = at + 8;
    if (bytes.is(at, "data")) {
      if (!format.found) return std::nullopt;
      std::uint64_t declared = size;
      if (rf64) {
        if (!have_ds64) return std::nullopt;
        if (size == 0xffffffffULL) declared = ds64_data_bytes;
      }
      const int container = rf64                ? SF_FORMAT_RF64
                            : format.extensible ? SF_FORMAT_WAVEX
                                                : SF_FORMAT_WAV;
      return layout_of(container, format, body, declared);
    }
    if (bytes.is(at, "fmt ")) {
      if (format.found || !parse_fmt(bytes, body, size, format)) return std::nullopt;
    } else if (bytes.is(at, "ds64")) {
      if (!rf64 || at != 12 || size < 24 || !bytes.has(body, 24)) return std::nullopt;
      ds64_data_bytes = bytes.le(body + 8, 8);
      have_ds64 = true;
    }
    // The next chunk, after a pad byte for an odd size; overflow-safe.
    const std::uint64_t step = size + (size & 1);
    if (step > head_size - body) return std::nullopt;
    at = body + step;
  }
  return std::nullopt;
}

std::optional<PcmLayout> parse_w64(const Bytes& bytes, std::uint64_t head_size) {
  WaveFormat format;
  std::uint64_t at = 40;  // riff GUID, size, wave GUID
  while (bytes.has(at, 24)) {
    const std::uint64_t size = bytes.le(at + 16, 8);  // includes these 24 bytes
    if (size < 24) return std::nullopt;
    const std::uint64_t body = at + 24;
    const bool known = bytes.is(at + 4, kW64Tail);
    if (known && bytes.is(at, "data")) {
      if (!format.found) return std::nullopt;
      return layout_of(SF_FORMAT_W64, format, body, size - 24);
    }
    if (known && bytes.is(at, "fmt ")) {
      if (format.found || !parse_fmt(bytes, body, size - 24, format)) return std::nullopt;
      if (format.extensible) return std::nullopt;  // libsndfile's W64 is plain WAVEFORMATEX
    }
    // Chunks are aligned to 8 bytes; overflow-safe.
    if (size > std::numeric_limits<std::uint64_t>::max() - 7) return std::nullopt;
    const std::uint64_t step = (size + 7) & ~std::uint64_t{7};
    if (step > head_size - at) return std::nullopt;
    at += step;
  }
  return std::nullopt;
}

std::optional<PcmLayout> parse_au(const Bytes& bytes, std::uint64_t file_size, bool big_endian) {
  if (!bytes.has(0, 24)) return std::nullopt;
  const auto field = [&](std::uint64_t at) {
    return big_endian ? bytes.be(at, 4) : bytes.le(at, 4);
  };
  const std::uint64_t offset = field(4);
  const std::uint64_t size = field(8);
  const std::uint64_t encoding = field(12);
  const std::uint64_t rate = field(16);
  const std::uint64_t channels = field(20);
  PcmLayout layout;
  layout.container = SF_FORMAT_AU;
  layout.big_endian = big_endian;
  switch (encoding) {
    case 3:
      layout.encoding = PcmEncoding::pcm16;
      break;
    case 4:
      layout.encoding = PcmEncoding::pcm24;
      break;
    case 5:
      layout.encoding = PcmEncoding::pcm32;
      break;
    case 6:
      layout.encoding = PcmEncoding::float32;
      break;
    default:
      return std::nullopt;
  }
  if (offset < 24 || offset > file_size || channels < 1 || channels > kMaxChannels || rate < 1 ||
      rate > 0x7fffffff) {
    return std::nullopt;
  }
  layout.channels = static_cast<int>(channels);
  layout.sample_rate = static_cast<int>(rate);
  layout.data_offset = offset;
  layout.declared_bytes = size == 0xffffffffULL ? file_size - offset : size;
  return layout;
}

}  // namespace

std::optional<PcmLayout> parse_pcm_header(std::span<const std::uint8_t> head,
                                          std::uint64_t file_size) {
  if (head.size() > file_size) head = head.first(static_cast<std::size_t>(file_size));
  const Bytes bytes(head);
  if (bytes.is(0, "RIFF") && bytes.is(8, "WAVE")) return parse_riff(bytes, head.size(), false);
  if (bytes.is(0, "RF64") && bytes.is(8, "WAVE")) return parse_riff(bytes, head.size(), true);
  if (bytes.is(0, kW64Riff) && bytes.is(24, "wave") && bytes.is(28, kW64Tail)) {
    return parse_w64(bytes, head.size());
  }
  if (bytes.is(0, ".snd")) return parse_au(bytes, file_size, true);
  if (bytes.is(0, "dns.")) return parse_au(bytes, file_size, false);
  return std::nullopt;
}

// ---------------------------------------------------------------- writing

namespace {

class HeaderBytes {
 public:
  void tag(const char* four) { bytes_.insert(bytes_.end(), four, four + 4); }
  template <std::size_t N>
  void raw(const std::array<std::uint8_t, N>& data) {
    bytes_.insert(bytes_.end(), data.begin(), data.end());
  }
  // `count` bytes of `value`, the bytes past its eighth 0 (a shift by 64 or
  // more is undefined, so it is never made).
  void le(std::uint64_t value, int count) {
    for (int i = 0; i < count; ++i) bytes_.push_back(byte(value, i));
  }
  void be(std::uint64_t value, int count) {
    for (int i = count - 1; i >= 0; --i) bytes_.push_back(byte(value, i));
  }
  std::size_t size() const { return bytes_.size(); }
  std::vector<std::uint8_t> take() { return std::move(bytes_); }

 private:
  static std::uint8_t byte(std::uint64_t value, int index) {
    return index < 8 ? static_cast<std::uint8_t>(value >> (8 * index)) : 0;
  }
  std::vector<std::uint8_t> bytes_;
};

void write_fmt_body(HeaderBytes& out, const PcmLayout& layout, bool extensible) {
  const int sample_bytes = bytes_per_sample(layout.encoding);
  const std::uint16_t tag = layout.encoding == PcmEncoding::float32 ? kTagFloat : kTagPcm;
  out.le(extensible ? kTagExtensible : tag, 2);
  out.le(static_cast<std::uint64_t>(layout.channels), 2);
  out.le(static_cast<std::uint64_t>(layout.sample_rate), 4);
  out.le(static_cast<std::uint64_t>(layout.sample_rate) * layout.frame_bytes(), 4);
  out.le(layout.frame_bytes(), 2);
  out.le(static_cast<std::uint64_t>(sample_bytes) * 8, 2);
  if (extensible) {
    out.le(22, 2);                                            // cbSize
    out.le(static_cast<std::uint64_t>(sample_bytes) * 8, 2);  // valid bits
    out.le(0, 4);  // no channel mask: libsndfile's without a channel map
    out.le(tag, 2);
    out.raw(kSubtypeTail);
  }
}

// WAV, WAVE_FORMAT_EXTENSIBLE and RF64 share one layout: RIFF or RF64, then
// 36 bytes that are a JUNK chunk in a RIFF file and the ds64 chunk in RF64
// (so that a WAV can become RF64 in place), fmt, then data.
constexpr std::uint64_t kRiffLimit = 0xffffffffULL;

std::vector<std::uint8_t> riff_header(const PcmLayout& layout, std::uint64_t data_bytes) {
  const bool extensible = layout.container == SF_FORMAT_WAVEX;
  const std::uint64_t fmt_size = extensible ? 40 : 16;
  const std::uint64_t header_bytes = 12 + 36 + 8 + fmt_size + 8;
  const std::uint64_t padded = data_bytes + (data_bytes & 1);
  const std::uint64_t riff_bytes = header_bytes - 8 + padded;
  const bool rf64 = layout.container == SF_FORMAT_RF64 || riff_bytes > kRiffLimit;
  HeaderBytes out;
  out.tag(rf64 ? "RF64" : "RIFF");
  out.le(rf64 ? kRiffLimit : riff_bytes, 4);
  out.tag("WAVE");
  if (rf64) {
    out.tag("ds64");
    out.le(28, 4);
    out.le(riff_bytes, 8);
    out.le(data_bytes, 8);
    out.le(data_bytes / layout.frame_bytes(), 8);  // sample count: frames
    out.le(0, 4);                                  // no table
  } else {
    out.tag("JUNK");
    out.le(28, 4);
    out.le(0, 28);
  }
  out.tag("fmt ");
  out.le(fmt_size, 4);
  write_fmt_body(out, layout, extensible);
  out.tag("data");
  out.le(rf64 ? kRiffLimit : data_bytes, 4);
  return out.take();
}

std::vector<std::uint8_t> w64_header(const PcmLayout& layout, std::uint64_t data_bytes) {
  const std::uint64_t header_bytes = 40 + 24 + 16 + 24;  // riff+wave, fmt chunk, data chunk head
  HeaderBytes out;
  out.raw(kW64Riff);
  out.le(header_bytes + ((data_bytes + 7) & ~std::uint64_t{7}), 8);
  out.tag("wave");
  out.raw(kW64Tail);
  out.tag("fmt ");
  out.raw(kW64Tail);
  out.le(24 + 16, 8);
  write_fmt_body(out, layout, false);
  out.tag("data");
  out.raw(kW64Tail);
  out.le(24 + data_bytes, 8);
  return out.take();
}

std::vector<std::uint8_t> au_header(const PcmLayout& layout, std::uint64_t data_bytes) {
  HeaderBytes out;
  const auto field = [&](std::uint64_t value) {
    if (layout.big_endian) {
      out.be(value, 4);
    } else {
      out.le(value, 4);
    }
  };
  out.tag(layout.big_endian ? ".snd" : "dns.");
  field(24);
  // Past 4 GiB the length is "unknown": readers take the rest of the file.
  field(data_bytes >= kRiffLimit ? kRiffLimit : data_bytes);
  const std::uint64_t encoding = layout.encoding == PcmEncoding::pcm16   ? 3
                                 : layout.encoding == PcmEncoding::pcm24 ? 4
                                 : layout.encoding == PcmEncoding::pcm32 ? 5
                                                                         : 6;
  field(encoding);
  field(static_cast<std::uint64_t>(layout.sample_rate));
  field(static_cast<std::uint64_t>(layout.channels));
  return out.take();
}

}  // namespace

std::vector<std::uint8_t> make_pcm_header(PcmLayout& layout, std::uint64_t data_bytes) {
  std::vector<std::uint8_t> header;
  switch (layout.container) {
    case SF_FORMAT_WAV:
    case SF_FORMAT_WAVEX:
    case SF_FORMAT_RF64:
      header = riff_header(layout, data_bytes);
      break;
    case SF_FORMAT_W64:
      header = w64_header(layout, data_bytes);
      break;
    case SF_FORMAT_AU:
      header = au_header(layout, data_bytes);
      break;
    default:  // SF_FORMAT_RAW: no header
      break;
  }
  layout.data_offset = header.size();
  layout.declared_bytes = data_bytes;
  return header;
}

std::size_t pcm_header_size(const PcmLayout& layout) {
  PcmLayout copy = layout;
  return make_pcm_header(copy, 0).size();
}

}  // namespace tapstream

// The fast sound-file path (dsp/files/pcm_header, pcm_codec under
// SoundFileReader and SoundFileWriter) against libsndfile: every format and
// sample type it takes, odd sizes and chunk layouts read exactly as
// libsndfile reads them; what it writes read back by libsndfile exactly as
// libsndfile's own writing of the same samples; hostile headers refused or
// read as libsndfile reads them.

#include <gtest/gtest.h>
#include <sndfile.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "dsp/files/pcm_header.hpp"
#include "dsp/files/sound_file.hpp"
#include "dsp/files/staged_file_writer.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kSeed = 20261126;

class FastPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    directory_ = fs::temp_directory_path() / ("tapstream-fast-path-" + std::string(info->name()) +
                                              "-" + std::to_string(std::random_device{}()));
    fs::create_directories(directory_);
    std::cout << "seed " << kSeed << "\n";
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(directory_, ignored);
  }
  fs::path directory_;
};

std::vector<float> random_samples(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  // Beyond full scale now and then, so that clipping is exercised too.
  std::uniform_real_distribution<float> dist(-1.1f, 1.1f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// What libsndfile reads from `file`: info and every sample.
struct LibsndfileRead {
  bool opened = false;
  SF_INFO info{};
  std::vector<float> samples;
};

LibsndfileRead read_with_libsndfile(const fs::path& file, const SF_INFO* raw = nullptr) {
  LibsndfileRead result;
  if (raw != nullptr) result.info = *raw;
  SNDFILE* handle = sf_open(file.c_str(), SFM_READ, &result.info);
  if (handle == nullptr) return result;
  result.opened = true;
  result.samples.resize(static_cast<std::size_t>(result.info.frames) *
                        static_cast<std::size_t>(result.info.channels));
  const sf_count_t got = sf_readf_float(handle, result.samples.data(), result.info.frames);
  result.samples.resize(static_cast<std::size_t>(got) *
                        static_cast<std::size_t>(result.info.channels));
  sf_close(handle);
  return result;
}

// What SoundFileReader reads, in blocks of an odd number of frames.
std::vector<float> read_with_reader(SoundFileReader& reader) {
  const auto channels = static_cast<std::size_t>(reader.info().channels);
  std::vector<float> all;
  std::vector<float> block(777 * channels);
  while (const std::size_t got = reader.read(block)) {
    all.insert(all.end(), block.begin(), block.begin() + static_cast<long>(got * channels));
  }
  return all;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  // (memcmp of two empty vectors' null data() is undefined: 0-frame files are compared too.)
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// A file written by libsndfile itself, from the same floats.
void write_with_libsndfile(const fs::path& file, int format, int channels,
                           const std::vector<float>& samples) {
  SF_INFO info{};
  info.samplerate = 44100;
  info.channels = channels;
  info.format = format;
  SNDFILE* handle = sf_open(file.c_str(), SFM_WRITE, &info);
  ASSERT_NE(handle, nullptr) << sf_strerror(nullptr);
  sf_command(handle, SFC_SET_CLIPPING, nullptr, SF_TRUE);
  sf_writef_float(handle, samples.data(), static_cast<sf_count_t>(samples.size()) / channels);
  sf_close(handle);
}

const int kContainers[] = {SF_FORMAT_WAV, SF_FORMAT_WAVEX, SF_FORMAT_RF64,
                           SF_FORMAT_W64, SF_FORMAT_AU,    SF_FORMAT_AU | SF_ENDIAN_LITTLE};
const int kSubtypes[] = {SF_FORMAT_FLOAT, SF_FORMAT_PCM_16, SF_FORMAT_PCM_24, SF_FORMAT_PCM_32};

TEST_F(FastPathTest, ReadsEveryFormatAndSizeExactlyAsLibsndfileDoes) {
  int cases = 0;
  for (const int container : kContainers) {
    for (const int subtype : kSubtypes) {
      for (const int channels : {1, 2, 3, 32}) {
        for (const std::size_t frames : {0, 1, 1001}) {
          const fs::path file = directory_ / "in.snd";
          const auto samples = random_samples(frames * channels, kSeed + cases);
          write_with_libsndfile(file, container | subtype, channels, samples);
          const LibsndfileRead expected = read_with_libsndfile(file);
          ASSERT_TRUE(expected.opened);
          SoundFileReader reader(file);
          const std::string what = describe_format(container | subtype) + " " +
                                   std::to_string(channels) + " ch " + std::to_string(frames) +
                                   " frames";
          EXPECT_TRUE(reader.fast_path()) << what;
          EXPECT_EQ(reader.info().frames, expected.info.frames) << what;
          EXPECT_EQ(reader.info().format, expected.info.format) << what;
          EXPECT_TRUE(bit_equal(read_with_reader(reader), expected.samples)) << what;
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 6 * 4 * 4 * 3);
}

TEST_F(FastPathTest, ReadsRawInputExactlyAsLibsndfileDoes) {
  for (const SampleFormat format :
       {SampleFormat::float32, SampleFormat::pcm16, SampleFormat::pcm24, SampleFormat::pcm32}) {
    const fs::path file = directory_ / "in.raw";
    std::vector<std::uint8_t> bytes(3 * 4 * 501 + 2);  // not a whole number of frames
    std::mt19937 rng(kSeed);
    for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
    std::ofstream(file, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<long>(bytes.size()));
    RawInput raw{48000, 3, format};
    SoundFileReader reader(file, raw);
    SF_INFO info{};
    info.samplerate = 48000;
    info.channels = 3;
    info.format = reader.info().format;
    const LibsndfileRead expected = read_with_libsndfile(file, &info);
    ASSERT_TRUE(expected.opened);
    EXPECT_TRUE(reader.fast_path());
    EXPECT_EQ(reader.info().frames, expected.info.frames);
    // Random bytes hold NaNs: compared bit for bit.
    EXPECT_TRUE(bit_equal(read_with_reader(reader), expected.samples));
  }
}

// ------------------------------------------------ hand-made chunk layouts

class Chunks {
 public:
  void tag(const char* four) { bytes.insert(bytes.end(), four, four + 4); }
  void le(std::uint64_t value, int count) {
    for (int i = 0; i < count; ++i) bytes.push_back(static_cast<std::uint8_t>(value >> (8 * i)));
  }
  void fill(std::size_t count, std::uint8_t value) { bytes.insert(bytes.end(), count, value); }
  // A chunk of `size` bytes of `value`, padded to an even size.
  void chunk(const char* id, std::size_t size, std::uint8_t value = 0x55) {
    tag(id);
    le(size, 4);
    fill(size, value);
    if (size & 1) bytes.push_back(0);
  }
  void fmt(int tag_value, int channels, int bits, bool extensible = false) {
    tag("fmt ");
    le(extensible ? 40 : 16, 4);
    le(extensible ? 0xfffe : tag_value, 2);
    le(channels, 2);
    le(48000, 4);
    le(std::uint64_t(48000) * std::uint64_t(channels) * std::uint64_t(bits) / 8, 4);
    le(channels * bits / 8, 2);
    le(bits, 2);
    if (extensible) {
      le(22, 2);
      le(bits, 2);
      le(0, 4);
      le(tag_value, 2);
      const std::uint8_t tail[] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                   0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71};
      bytes.insert(bytes.end(), std::begin(tail), std::end(tail));
    }
  }
  void data(std::size_t size, std::uint64_t seed, bool pad = true) {
    tag("data");
    le(size, 4);
    std::mt19937 rng(static_cast<unsigned>(seed));
    for (std::size_t i = 0; i < size; ++i) bytes.push_back(static_cast<std::uint8_t>(rng() & 0x7f));
    if (pad && (size & 1)) bytes.push_back(0);
  }
  // RIFF header with the true size, once everything is in.
  std::vector<std::uint8_t> riff() const {
    std::vector<std::uint8_t> out = {'R', 'I', 'F', 'F'};
    const std::uint64_t size = bytes.size() + 4;
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(size >> (8 * i)));
    out.insert(out.end(), {'W', 'A', 'V', 'E'});
    out.insert(out.end(), bytes.begin(), bytes.end());
    return out;
  }
  std::vector<std::uint8_t> bytes;
};

void save(const fs::path& file, const std::vector<std::uint8_t>& bytes) {
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<long>(bytes.size()));
}

// SoundFileReader and libsndfile agree on `bytes`: the same frames and
// samples, or both refuse (ours with the file's name in the message).
// Returns whether the fast path read it.
bool expect_same_as_libsndfile(const fs::path& file, const std::vector<std::uint8_t>& bytes,
                               const std::string& what) {
  save(file, bytes);
  const LibsndfileRead expected = read_with_libsndfile(file);
  try {
    SoundFileReader reader(file);
    EXPECT_TRUE(expected.opened) << what << ": libsndfile refuses it, we read it";
    EXPECT_EQ(reader.info().frames, expected.info.frames) << what;
    EXPECT_EQ(reader.info().channels, expected.info.channels) << what;
    EXPECT_TRUE(bit_equal(read_with_reader(reader), expected.samples)) << what;
    return reader.fast_path();
  } catch (const SoundFileError& e) {
    // Refusing what libsndfile reads is allowed only for a channel count
    // tapstream does not take (none such here), so both must refuse.
    EXPECT_FALSE(expected.opened) << what << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
  return false;
}

TEST_F(FastPathTest, ReadsOddChunkLayoutsExactlyAsLibsndfileDoes) {
  const fs::path file = directory_ / "odd.wav";
  for (const bool extensible : {false, true}) {
    // LIST with an odd size (a pad byte) and fact before fmt; JUNK between
    // fmt and data; an odd-sized data chunk (24-bit mono, 333 frames) with
    // its pad byte; LIST after data.
    Chunks layout;
    layout.chunk("LIST", 27);
    layout.chunk("fact", 4);
    layout.fmt(1, 1, 24, extensible);
    layout.chunk("JUNK", 100);
    layout.data(333 * 3, kSeed);
    layout.chunk("LIST", 13);
    EXPECT_TRUE(expect_same_as_libsndfile(file, layout.riff(), "odd layout"));

    // Float, 5 channels, zero-size chunks on the way.
    Chunks floats;
    floats.chunk("fmt?", 0);
    floats.fmt(3, 5, 32, extensible);
    floats.chunk("zero", 0);
    floats.data(5 * 4 * 97, kSeed + 1);
    EXPECT_TRUE(expect_same_as_libsndfile(file, floats.riff(), "zero-size chunks"));

    // A data chunk that is the last thing, with no pad byte after an odd size.
    Chunks no_pad;
    no_pad.fmt(1, 3, 16, extensible);
    no_pad.data(3 * 2 * 41 + 1, kSeed + 2, false);
    expect_same_as_libsndfile(file, no_pad.riff(), "odd data, no pad");
  }
}

TEST_F(FastPathTest, HostileHeadersAreRefusedOrReadAsLibsndfileReadsThem) {
  const fs::path file = directory_ / "hostile.wav";
  Chunks good;
  good.fmt(1, 2, 16);
  good.data(2 * 2 * 100, kSeed);
  const std::vector<std::uint8_t> intact = good.riff();
  // Truncated anywhere in the header and into the samples.
  for (std::size_t size = 0; size < 60; ++size) {
    expect_same_as_libsndfile(
        file, std::vector<std::uint8_t>(intact.begin(), intact.begin() + static_cast<long>(size)),
        "cut at " + std::to_string(size));
  }
  // Data size past the end of the file.
  {
    Chunks past;
    past.fmt(1, 2, 16);
    past.data(400, kSeed);
    auto bytes = past.riff();
    const std::uint32_t huge = 4000000;
    std::memcpy(bytes.data() + 12 + 24 + 4, &huge, 4);
    expect_same_as_libsndfile(file, bytes, "data size past the end");
    SoundFileReader reader(file);
    EXPECT_GT(reader.declared_frames(), reader.info().frames);
  }
  // Absurd channel counts.
  for (const int channels : {0, 1025, 65535}) {
    Chunks absurd;
    absurd.fmt(1, channels, 16);
    absurd.data(4 * 10, kSeed);
    expect_same_as_libsndfile(file, absurd.riff(), "channels " + std::to_string(channels));
  }
  // Chunk sizes that overflow an offset, before and instead of fmt.
  for (const std::uint64_t size : {0xffffffffULL, 0xfffffffeULL, 0x80000000ULL}) {
    Chunks overflow;
    overflow.tag("LIST");
    overflow.le(size, 4);
    overflow.fmt(1, 2, 16);
    overflow.data(40, kSeed);
    expect_same_as_libsndfile(file, overflow.riff(), "LIST size " + std::to_string(size));
    Chunks fmt_overflow;
    fmt_overflow.tag("fmt ");
    fmt_overflow.le(size, 4);
    fmt_overflow.data(40, kSeed);
    expect_same_as_libsndfile(file, fmt_overflow.riff(), "fmt size " + std::to_string(size));
  }
  // A block alignment that is not channels x sample size.
  {
    Chunks misaligned;
    misaligned.fmt(1, 2, 16);
    misaligned.bytes[12 + 8] = 7;  // block align
    misaligned.data(400, kSeed);
    expect_same_as_libsndfile(file, misaligned.riff(), "block align 7");
  }
}

TEST_F(FastPathTest, RandomBytesNeverReadPastTheHeaderTheyAreGiven) {
  // The parser alone, over corrupted copies of real headers: under the
  // sanitizers a read outside the span is an error; here the answer must
  // at least lie inside the file.
  std::mt19937_64 rng(kSeed);
  PcmLayout wav;
  wav.container = SF_FORMAT_WAVEX;
  wav.encoding = PcmEncoding::pcm24;
  wav.channels = 6;
  wav.sample_rate = 96000;
  const std::vector<std::uint8_t> header = make_pcm_header(wav, 6 * 3 * 1000);
  for (int round = 0; round < 20000; ++round) {
    std::vector<std::uint8_t> bytes = header;
    bytes.resize(rng() % (header.size() + 16));
    for (int flips = int(rng() % 4); flips >= 0 && !bytes.empty(); --flips) {
      bytes[rng() % bytes.size()] = static_cast<std::uint8_t>(rng());
    }
    const auto layout = parse_pcm_header(bytes, bytes.size() + 18000);
    if (layout) {
      EXPECT_GE(layout->channels, 1);
      EXPECT_LE(layout->data_offset, bytes.size());
    }
  }
}

// ------------------------------------------------------------- writing

TEST_F(FastPathTest, WrittenFilesReadBackByLibsndfileAsItsOwnWriting) {
  int cases = 0;
  const int containers[] = {SF_FORMAT_WAV, SF_FORMAT_WAVEX, SF_FORMAT_RF64,
                            SF_FORMAT_W64, SF_FORMAT_AU,    SF_FORMAT_AU | SF_ENDIAN_LITTLE,
                            SF_FORMAT_RAW};
  for (const int container : containers) {
    for (const int subtype : kSubtypes) {
      for (const int channels : {1, 3, 32}) {
        for (const std::size_t frames : {0, 1, 1001}) {
          for (const Dither dither : {Dither::none, Dither::tpdf}) {
            const int format = container | subtype;
            const auto samples = random_samples(frames * channels, kSeed + cases);
            const std::string what = describe_format(format) + " " + std::to_string(channels) +
                                     " ch " + std::to_string(frames) + " frames";
            // Ours, and libsndfile's (a title in the metadata keeps it on libsndfile).
            SoundFileWriterOptions fast_options;
            fast_options.dither = dither;
            SoundFileWriterOptions library_options = fast_options;
            library_options.metadata.strings.emplace_back(SF_STR_TITLE, "reference");
            ClipStats fast_clips, library_clips;
            for (const bool fast : {true, false}) {
              SoundFileWriter writer(directory_ / (fast ? "fast.snd" : "library.snd"), 44100,
                                     channels, format, fast ? fast_options : library_options);
              EXPECT_EQ(writer.fast_path(), fast) << what;
              // Uneven writes, as a pipeline makes them.
              std::size_t done = 0;
              for (std::size_t step = 1; done < frames; step = step * 3 + 1) {
                const std::size_t n = std::min(step, frames - done);
                writer.write(
                    std::span<const float>(samples).subspan(done * channels, n * channels));
                done += n;
              }
              writer.commit();
              (fast ? fast_clips : library_clips) = writer.clip_stats();
            }
            EXPECT_EQ(fast_clips.clipped_samples, library_clips.clipped_samples) << what;
            EXPECT_EQ(fast_clips.peak, library_clips.peak) << what;
            SF_INFO raw{};
            raw.samplerate = 44100;
            raw.channels = channels;
            raw.format = format;
            const bool headerless = container == SF_FORMAT_RAW;
            const LibsndfileRead ours =
                read_with_libsndfile(directory_ / "fast.snd", headerless ? &raw : nullptr);
            const LibsndfileRead theirs =
                read_with_libsndfile(directory_ / "library.snd", headerless ? &raw : nullptr);
            ASSERT_TRUE(ours.opened) << what << ": " << sf_strerror(nullptr);
            ASSERT_TRUE(theirs.opened) << what;
            EXPECT_EQ(ours.info.format, theirs.info.format) << what;
            EXPECT_EQ(ours.info.channels, channels) << what;
            EXPECT_EQ(ours.info.samplerate, 44100) << what;
            EXPECT_EQ(ours.info.frames, static_cast<sf_count_t>(frames)) << what;
            EXPECT_TRUE(bit_equal(ours.samples, theirs.samples)) << what;
            if (container == SF_FORMAT_WAV || container == SF_FORMAT_WAVEX ||
                container == SF_FORMAT_RF64) {
              // An odd-sized data chunk is followed by its pad byte.
              EXPECT_EQ(fs::file_size(directory_ / "fast.snd") % 2, 0u) << what;
            }
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 7 * 4 * 3 * 3 * 2);
}

TEST_F(FastPathTest, FilesOfManyWriteChunksReadBackExactly) {
  // Past StagedFileWriter's chunk (direct I/O where the file system takes
  // it), beside the build rather than in a RAM-backed /tmp.
  const fs::path here = fs::current_path() / directory_.filename();
  fs::create_directories(here);
  const std::size_t frames = 2 * StagedFileWriter::kChunkBytes / (7 * 3) + 777;
  const auto samples = random_samples(frames * 7, kSeed);
  for (const int format : {SF_FORMAT_WAV | SF_FORMAT_FLOAT, SF_FORMAT_W64 | SF_FORMAT_PCM_24}) {
    for (const bool fast : {true, false}) {
      SoundFileWriterOptions options;
      if (!fast) options.metadata.strings.emplace_back(SF_STR_TITLE, "reference");
      SoundFileWriter writer(here / (fast ? "fast.snd" : "library.snd"), 48000, 7, format, options);
      EXPECT_EQ(writer.fast_path(), fast);
      for (std::size_t done = 0; done < frames; done += 4096) {
        const std::size_t n = std::min<std::size_t>(4096, frames - done);
        writer.write(std::span<const float>(samples).subspan(done * 7, n * 7));
      }
      writer.commit();
    }
    const LibsndfileRead ours = read_with_libsndfile(here / "fast.snd");
    const LibsndfileRead theirs = read_with_libsndfile(here / "library.snd");
    ASSERT_TRUE(ours.opened && theirs.opened);
    EXPECT_EQ(ours.info.frames, static_cast<sf_count_t>(frames));
    EXPECT_TRUE(bit_equal(ours.samples, theirs.samples)) << describe_format(format);
    SoundFileReader reader(here / "fast.snd");
    EXPECT_TRUE(reader.fast_path());
    EXPECT_TRUE(bit_equal(read_with_reader(reader), theirs.samples)) << describe_format(format);
  }
  fs::remove_all(here);
}

TEST_F(FastPathTest, AWavPastFourGibibytesGetsAnRf64Header) {
  PcmLayout layout;
  layout.container = SF_FORMAT_WAV;
  layout.encoding = PcmEncoding::float32;
  layout.channels = 32;
  layout.sample_rate = 48000;
  const std::uint64_t small = 32 * 4 * 1000;
  const std::uint64_t large = (std::uint64_t{5} << 30) + 32 * 4;  // 5 GiB and a frame
  PcmLayout small_layout = layout;
  const auto small_header = make_pcm_header(small_layout, small);
  PcmLayout large_layout = layout;
  const auto large_header = make_pcm_header(large_layout, large);
  // The same size, so that the header is rewritten in place at the end.
  ASSERT_EQ(small_header.size(), large_header.size());
  EXPECT_EQ(std::string(small_header.begin(), small_header.begin() + 4), "RIFF");
  EXPECT_EQ(std::string(large_header.begin(), large_header.begin() + 4), "RF64");
  const auto small_parsed = parse_pcm_header(small_header, small_header.size() + small);
  const auto large_parsed = parse_pcm_header(large_header, large_header.size() + large);
  ASSERT_TRUE(small_parsed && large_parsed);
  EXPECT_EQ(small_parsed->container, SF_FORMAT_WAV);
  EXPECT_EQ(large_parsed->container, SF_FORMAT_RF64);
  EXPECT_EQ(large_parsed->declared_bytes, large);
  EXPECT_EQ(large_parsed->data_offset, large_header.size());
  // AU: the length field cannot hold it, so it says "unknown" (the rest of the file).
  PcmLayout au = layout;
  au.container = SF_FORMAT_AU;
  au.big_endian = true;
  const auto au_header = make_pcm_header(au, large);
  const auto au_parsed = parse_pcm_header(au_header, au_header.size() + large);
  ASSERT_TRUE(au_parsed);
  EXPECT_EQ(au_parsed->declared_bytes, large);
}

TEST_F(FastPathTest, AnRf64HeaderOfTheWriterIsReadByLibsndfile) {
  // The RF64 layout a WAV past 4 GiB gets, on a small file: libsndfile
  // reads its ds64 chunk.
  PcmLayout layout;
  layout.container = SF_FORMAT_RF64;
  layout.encoding = PcmEncoding::pcm16;
  layout.channels = 2;
  layout.sample_rate = 48000;
  auto bytes = make_pcm_header(layout, 2 * 2 * 10);
  for (int i = 0; i < 40; ++i) bytes.push_back(static_cast<std::uint8_t>(i * 3));
  EXPECT_TRUE(expect_same_as_libsndfile(directory_ / "small.rf64", bytes, "rf64"));
}

}  // namespace
}  // namespace tapstream

// Sound-file I/O: round trips in every output encoding, clipping that is
// counted rather than wrapped, and the temporary-file-then-rename guarantee.

#include "dsp/files/sound_file.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tapstream {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class SoundFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    directory_ = fs::temp_directory_path() / ("tapstream-sound-file-" + std::string(info->name()) +
                                              "-" + std::to_string(std::random_device{}()));
    fs::create_directories(directory_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(directory_, ignored);
  }
  std::vector<fs::path> files_in_directory() const {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(directory_)) files.push_back(entry.path());
    return files;
  }
  fs::path directory_;
};

std::vector<float> random_samples(std::size_t n, float amplitude, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-amplitude, amplitude);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

void write_file(const fs::path& file, int rate, int channels, int format,
                const std::vector<float>& samples, ClipStats* stats = nullptr) {
  SoundFileWriter writer(file, rate, channels, format);
  // Several writes of uneven sizes, as a pipeline would do.
  const std::size_t frames = samples.size() / channels;
  std::size_t done = 0;
  std::size_t step = 1;
  while (done < frames) {
    const std::size_t n = std::min(step, frames - done);
    writer.write(std::span<const float>(samples).subspan(done * channels, n * channels));
    done += n;
    step = step * 3 + 1;
  }
  writer.commit();
  if (stats != nullptr) *stats = writer.clip_stats();
}

std::vector<float> read_all(const fs::path& file, SoundFileInfo* info_out = nullptr) {
  SoundFileReader reader(file);
  if (info_out != nullptr) *info_out = reader.info();
  std::vector<float> all;
  std::vector<float> block(777 * reader.info().channels);
  while (const std::size_t frames = reader.read(block)) {
    all.insert(all.end(), block.begin(), block.begin() + frames * reader.info().channels);
  }
  return all;
}

struct RoundTripCase {
  const char* name;
  int format;
  double tolerance;  // largest |difference| allowed: about one quantisation step
};

class SoundFileRoundTrip : public SoundFileTest,
                           public ::testing::WithParamInterface<RoundTripCase> {};

TEST_P(SoundFileRoundTrip, SamplesComeBackWithinQuantisation) {
  const auto& param = GetParam();
  const std::uint64_t seed = 20261122;
  std::cout << "seed " << seed << "\n";
  const int channels = 3;
  const int rate = 44100;
  const auto samples = random_samples(5000 * channels, 0.999f, seed);
  const fs::path file = directory_ / "round-trip.wav";
  ClipStats stats;
  write_file(file, rate, channels, param.format, samples, &stats);
  EXPECT_EQ(stats.clipped_samples, 0u);

  SoundFileInfo info;
  const auto back = read_all(file, &info);
  EXPECT_EQ(info.sample_rate, rate);
  EXPECT_EQ(info.channels, channels);
  EXPECT_EQ(info.frames, 5000);
  EXPECT_EQ(info.format, param.format);
  ASSERT_EQ(back.size(), samples.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(back[i]) - samples[i]));
  }
  EXPECT_LE(worst, param.tolerance) << param.name;
  if (param.format == (SF_FORMAT_WAV | SF_FORMAT_FLOAT)) {
    EXPECT_EQ(worst, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Encodings, SoundFileRoundTrip,
    ::testing::Values(RoundTripCase{"float", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 0.0},
                      RoundTripCase{"pcm16", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 2.0 / 32768},
                      RoundTripCase{"pcm24", SF_FORMAT_WAV | SF_FORMAT_PCM_24, 2.0 / 8388608},
                      RoundTripCase{"pcm32", SF_FORMAT_WAV | SF_FORMAT_PCM_32, 2.0e-7},
                      RoundTripCase{"flac16", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 2.0 / 32768},
                      RoundTripCase{"flac24", SF_FORMAT_FLAC | SF_FORMAT_PCM_24, 2.0 / 8388608}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(SoundFileTest, ClippingIsCountedWithItsPeakAndNeverWrapsAround) {
  const fs::path file = directory_ / "clipped.wav";
  const std::vector<float> samples = {0.5f, 1.0f, 1.5f, -1.0f, -2.25f, 0.0f, 1.0001f, -0.25f};
  ClipStats stats;
  write_file(file, 48000, 2, SF_FORMAT_WAV | SF_FORMAT_PCM_16, samples, &stats);
  // +1.0 is 32768 LSB, one above the largest code: clipped, as sox counts it;
  // -1.0 is -32768, a code.
  EXPECT_EQ(stats.clipped_samples, 4u);
  EXPECT_FLOAT_EQ(stats.peak, 2.25f);
  const auto back = read_all(file);
  ASSERT_EQ(back.size(), samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const float expected = std::clamp(samples[i], -1.0f, 1.0f);
    EXPECT_NEAR(back[i], expected, 2.0 / 32768) << "sample " << i;
  }
}

TEST_F(SoundFileTest, FloatOutputKeepsLoudSamplesAndCountsNoClipping) {
  const fs::path file = directory_ / "loud.wav";
  const std::vector<float> samples = {3.0f, -4.5f, 0.25f, 1.0f};
  ClipStats stats;
  write_file(file, 48000, 1, SF_FORMAT_WAV | SF_FORMAT_FLOAT, samples, &stats);
  EXPECT_EQ(stats.clipped_samples, 0u);
  EXPECT_FLOAT_EQ(stats.peak, 4.5f);
  EXPECT_EQ(read_all(file), samples);
}

TEST_F(SoundFileTest, WriterThatIsNotCommittedLeavesNoFileAndNoTemporary) {
  const fs::path file = directory_ / "never.wav";
  {
    SoundFileWriter writer(file, 48000, 2, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
    writer.write(random_samples(2000, 0.5f, 1));
    EXPECT_EQ(files_in_directory().size(), 1u) << "the temporary file exists while writing";
  }
  EXPECT_FALSE(fs::exists(file));
  EXPECT_TRUE(files_in_directory().empty());
}

TEST_F(SoundFileTest, WriterThatThrowsMidwayLeavesNoFileAndKeepsTheOldOne) {
  const fs::path file = directory_ / "existing.wav";
  const std::vector<float> old_samples = {0.125f, -0.125f};
  write_file(file, 48000, 1, SF_FORMAT_WAV | SF_FORMAT_FLOAT, old_samples);
  try {
    SoundFileWriter writer(file, 48000, 2, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
    writer.write(random_samples(100, 0.5f, 2));
    writer.write(random_samples(3, 0.5f, 3));  // not whole frames: throws
    FAIL() << "a write of a partial frame was accepted";
  } catch (const SoundFileError& e) {
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(files_in_directory(), std::vector<fs::path>{file});
  EXPECT_EQ(read_all(file), old_samples);
}

TEST_F(SoundFileTest, CommittedWriterLeavesExactlyTheDestination) {
  const fs::path file = directory_ / "done.flac";
  write_file(file, 96000, 1, SF_FORMAT_FLAC | SF_FORMAT_PCM_24, random_samples(1000, 0.9f, 4));
  EXPECT_EQ(files_in_directory(), std::vector<fs::path>{file});
  SoundFileInfo info;
  read_all(file, &info);
  EXPECT_EQ(info.format & SF_FORMAT_TYPEMASK, SF_FORMAT_FLAC);
  EXPECT_EQ(info.sample_rate, 96000);
}

TEST_F(SoundFileTest, WriterIntoMissingDirectoryFailsNamingTheFile) {
  const fs::path file = directory_ / "no-such-dir" / "out.wav";
  try {
    SoundFileWriter writer(file, 48000, 1, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
    FAIL() << "opened a file in a missing directory";
  } catch (const SoundFileError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(file.string() + ": ", 0), 0u) << e.what();
  }
}

TEST_F(SoundFileTest, WriterOntoADirectoryFailsAtOnceAndLeavesNothing) {
  const fs::path file = directory_ / "a-directory";
  fs::create_directory(file);
  try {
    SoundFileWriter writer(file, 48000, 1, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
    FAIL() << "opened a writer onto a directory";
  } catch (const SoundFileError& e) {
    EXPECT_EQ(std::string(e.what()), file.string() + ": is a directory");
  }
  EXPECT_EQ(files_in_directory(), std::vector<fs::path>{file});
}

TEST_F(SoundFileTest, WriterRefusesAFormatLibsndfileCannotWrite) {
  const fs::path file = directory_ / "float.flac";
  try {
    SoundFileWriter writer(file, 48000, 2, SF_FORMAT_FLAC | SF_FORMAT_FLOAT);
    FAIL() << "opened a float FLAC writer";
  } catch (const SoundFileError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(file.string() + ": ", 0), 0u) << message;
    EXPECT_NE(message.find("FLAC float"), std::string::npos) << message;
  }
  EXPECT_TRUE(files_in_directory().empty());
}

TEST_F(SoundFileTest, ReadingAMissingOrBogusFileFailsNamingIt) {
  const fs::path missing = directory_ / "missing.wav";
  try {
    SoundFileReader reader(missing);
    FAIL() << "opened a missing file";
  } catch (const SoundFileError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(missing.string() + ": ", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  const fs::path bogus = directory_ / "bogus.wav";
  { std::ofstream(bogus) << "this is not a sound file\n"; }
  EXPECT_THROW(SoundFileReader{bogus}, SoundFileError);
}

TEST(SampleFormat, ParsesTheFourNamesAndRejectsOthersNamingTheValue) {
  EXPECT_EQ(parse_sample_format("float"), SampleFormat::float32);
  EXPECT_EQ(parse_sample_format("pcm16"), SampleFormat::pcm16);
  EXPECT_EQ(parse_sample_format("pcm24"), SampleFormat::pcm24);
  EXPECT_EQ(parse_sample_format("pcm32"), SampleFormat::pcm32);
  try {
    parse_sample_format("pcm17");
    FAIL() << "accepted pcm17";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'pcm17'"), std::string::npos) << e.what();
  }
}

TEST(OutputFormat, KeepsTheContainerAndAppliesTheSubtype) {
  const int wav16 = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  EXPECT_EQ(output_format(wav16, SampleFormat::same_as_input), wav16);
  EXPECT_EQ(output_format(wav16, SampleFormat::float32), SF_FORMAT_WAV | SF_FORMAT_FLOAT);
  EXPECT_EQ(output_format(wav16, SampleFormat::pcm32), SF_FORMAT_WAV | SF_FORMAT_PCM_32);
  const int flac16 = SF_FORMAT_FLAC | SF_FORMAT_PCM_16;
  EXPECT_EQ(output_format(flac16, SampleFormat::pcm24), SF_FORMAT_FLAC | SF_FORMAT_PCM_24);
  const int aiff24 = SF_FORMAT_AIFF | SF_FORMAT_PCM_24;
  EXPECT_EQ(output_format(aiff24, SampleFormat::pcm16), SF_FORMAT_AIFF | SF_FORMAT_PCM_16);
}

TEST(OutputFormat, RefusesFloatAndPcm32InFlacNamingTheCombination) {
  const int flac16 = SF_FORMAT_FLAC | SF_FORMAT_PCM_16;
  for (const auto requested : {SampleFormat::float32, SampleFormat::pcm32}) {
    try {
      output_format(flac16, requested);
      FAIL() << "FLAC accepted an encoding it cannot hold";
    } catch (const SoundFileError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("FLAC"), std::string::npos) << message;
      EXPECT_NE(message.find(requested == SampleFormat::float32 ? "float" : "pcm32"),
                std::string::npos)
          << message;
    }
  }
}

int chosen(int input, SampleFormat requested, const std::string& type, const fs::path& out,
           bool stream = false) {
  return choose_output_format(input, requested, type, out, stream).format;
}

TEST(OutputFormat, TakesTheContainerFromTheDestinationsExtensionOrTheType) {
  const int wav16 = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  EXPECT_EQ(chosen(wav16, SampleFormat::same_as_input, "", "out.flac"),
            SF_FORMAT_FLAC | SF_FORMAT_PCM_16);
  EXPECT_EQ(chosen(wav16, SampleFormat::pcm24, "", "out.AIF"), SF_FORMAT_AIFF | SF_FORMAT_PCM_24);
  EXPECT_EQ(chosen(wav16, SampleFormat::same_as_input, "", "out.ogg"),
            SF_FORMAT_OGG | SF_FORMAT_VORBIS);
  // --type wins over the name; standard output is WAV unless told otherwise.
  EXPECT_EQ(chosen(wav16, SampleFormat::same_as_input, "au", "out.wav"),
            SF_FORMAT_AU | SF_FORMAT_PCM_16);
  EXPECT_EQ(chosen(SF_FORMAT_FLAC | SF_FORMAT_PCM_24, SampleFormat::same_as_input, "", "-", true),
            SF_FORMAT_WAV | SF_FORMAT_PCM_24);
  EXPECT_EQ(chosen(wav16, SampleFormat::float32, "raw", "-", true),
            SF_FORMAT_RAW | SF_FORMAT_FLOAT);
  // A FIFO or device without a known extension takes the input's container.
  EXPECT_EQ(chosen(SF_FORMAT_AU | SF_FORMAT_PCM_16, SampleFormat::same_as_input, "", "fifo", true),
            SF_FORMAT_AU | SF_FORMAT_PCM_16);
  // A 5.1 WAV stays WAVE_FORMAT_EXTENSIBLE, so that its channel mask survives.
  EXPECT_EQ(chosen(SF_FORMAT_WAVEX | SF_FORMAT_PCM_16, SampleFormat::float32, "", "out.wav"),
            SF_FORMAT_WAVEX | SF_FORMAT_FLOAT);
}

TEST(OutputFormat, RefusesAnUnknownExtensionOrTypeListingTheKnownOnes) {
  const int wav16 = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  for (const auto& [type, out] : std::vector<std::pair<std::string, std::string>>{
           {"", "out.mp3"}, {"", "out.xyz"}, {"", "out"}, {"xyz", "out.wav"}}) {
    SCOPED_TRACE(type + " " + out);
    try {
      chosen(wav16, SampleFormat::same_as_input, type, out);
      FAIL() << "accepted";
    } catch (const SoundFileError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(type.empty() ? out : "--type"), std::string::npos) << message;
      EXPECT_NE(message.find("known: "), std::string::npos) << message;
      EXPECT_NE(message.find("flac"), std::string::npos) << message;
      EXPECT_NE(message.find("wav"), std::string::npos) << message;
    }
  }
}

TEST(OutputFormat, RefusesAContainerThatCannotBeStreamed) {
  try {
    chosen(SF_FORMAT_WAV | SF_FORMAT_PCM_16, SampleFormat::same_as_input, "aiff", "-", true);
    FAIL() << "AIFF accepted on a stream";
  } catch (const SoundFileError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("standard output"), std::string::npos) << message;
    EXPECT_NE(message.find("wav, au, flac, raw"), std::string::npos) << message;
  }
}

TEST(OutputFormat, FloatIntoFlacPicks24BitsWithANote) {
  const OutputFormat format = choose_output_format(
      SF_FORMAT_WAV | SF_FORMAT_FLOAT, SampleFormat::same_as_input, "", "out.flac", false);
  EXPECT_EQ(format.format, SF_FORMAT_FLAC | SF_FORMAT_PCM_24);
  EXPECT_NE(format.note.find("out.flac"), std::string::npos) << format.note;
  EXPECT_NE(format.note.find("pcm24"), std::string::npos) << format.note;
  // Asked for explicitly, float into FLAC is still refused.
  EXPECT_THROW(choose_output_format(SF_FORMAT_WAV | SF_FORMAT_FLOAT, SampleFormat::float32, "",
                                    "out.flac", false),
               SoundFileError);
  // Nothing to say when the input's encoding fits.
  EXPECT_EQ(choose_output_format(SF_FORMAT_WAV | SF_FORMAT_PCM_16, SampleFormat::same_as_input, "",
                                 "out.flac", false)
                .note,
            "");
}

// The WAV files alsa-utils installs are real recordings.
TEST(RealRecordings, AlsaTestSoundsReadCompletelyAndAreNotSilent) {
  const fs::path directory = "/usr/share/sounds/alsa";
  const fs::path file = directory / "Front_Center.wav";
  if (!fs::exists(file)) GTEST_SKIP() << file << " is absent (alsa-utils not installed)";
  for (const auto& entry : fs::directory_iterator(directory)) {
    if (entry.path().extension() != ".wav") continue;
    SoundFileInfo info;
    const auto samples = read_all(entry.path(), &info);
    SCOPED_TRACE(entry.path().string());
    EXPECT_EQ(info.format & SF_FORMAT_TYPEMASK, SF_FORMAT_WAV);
    EXPECT_GT(info.sample_rate, 0);
    EXPECT_GE(info.channels, 1);
    ASSERT_GT(info.frames, 1000);
    EXPECT_EQ(samples.size(), static_cast<std::size_t>(info.frames * info.channels));
    double energy = 0.0;
    float peak = 0.0f;
    for (const float x : samples) {
      energy += static_cast<double>(x) * x;
      peak = std::max(peak, std::fabs(x));
    }
    EXPECT_GT(std::sqrt(energy / samples.size()), 1e-3) << "recording is silent";
    EXPECT_LE(peak, 1.0f);
  }
}

TEST_F(SoundFileTest, RealRecordingSurvivesACopyInItsOwnFormatBitExactly) {
  const fs::path source = "/usr/share/sounds/alsa/Front_Center.wav";
  if (!fs::exists(source)) GTEST_SKIP() << source << " is absent (alsa-utils not installed)";
  SoundFileInfo info;
  const auto samples = read_all(source, &info);
  const fs::path copy = directory_ / "copy.wav";
  const int format = output_format(info.format, SampleFormat::same_as_input);
  ClipStats stats;
  write_file(copy, info.sample_rate, info.channels, format, samples, &stats);
  EXPECT_EQ(stats.clipped_samples, 0u);
  SoundFileInfo copy_info;
  EXPECT_EQ(read_all(copy, &copy_info), samples);
  EXPECT_EQ(copy_info.format, info.format);
}

// ---------------------------------------------------------------- streams, links, damage

std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::uint32_t le32_at(const std::string& bytes, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(bytes[at + std::size_t(i)]);
  return v;
}

TEST_F(SoundFileTest, AFifoIsWrittenThroughWithTheLengthsAStreamCanGive) {
  const fs::path fifo = directory_ / "pipe.wav";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Small: held whole until the end, so the true header goes out. Large:
  // sent as it comes, the lengths marked unknown as sox does.
  for (const std::size_t frames : {std::size_t(100), std::size_t(50000)}) {
    SCOPED_TRACE(frames);
    const auto samples = random_samples(frames * 2, 0.5f, frames);
    std::string received;
    std::thread reader([&] { received = read_bytes(fifo); });
    write_file(fifo, 48000, 2, SF_FORMAT_WAV | SF_FORMAT_FLOAT, samples);
    reader.join();
    EXPECT_TRUE(fs::is_fifo(fifo));
    ASSERT_GT(received.size(), frames * 8);
    const std::size_t data = received.find("data");
    ASSERT_NE(data, std::string::npos);
    EXPECT_EQ(received.size() - (data + 8), frames * 8) << "the samples follow the header, all";
    const std::uint32_t declared = le32_at(received, data + 4);
    EXPECT_EQ(declared, frames <= 100 ? std::uint32_t(frames * 8) : 0x7ffff000u);
    std::ofstream(directory_ / "got.wav", std::ios::binary) << received;
    EXPECT_EQ(read_all(directory_ / "got.wav"), samples);
  }
}

TEST_F(SoundFileTest, ContainersThatNeedSeekingAreRefusedOnAStream) {
  const fs::path fifo = directory_ / "pipe.aiff";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Opened for reading too, so that opening it for writing does not wait.
  const int keep_open = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);
  ASSERT_GE(keep_open, 0);
  try {
    SoundFileWriter writer(fifo, 48000, 1, SF_FORMAT_AIFF | SF_FORMAT_PCM_16);
    FAIL() << "AIFF accepted on a FIFO";
  } catch (const SoundFileError& e) {
    EXPECT_NE(std::string(e.what()).find("wav, au, flac, raw"), std::string::npos) << e.what();
  }
  ::close(keep_open);
}

TEST_F(SoundFileTest, ASymlinkIsFollowedAndKept) {
  fs::create_directory(directory_ / "real");
  fs::create_symlink("real/target.wav", directory_ / "link.wav");
  const auto samples = random_samples(300, 0.5f, 3);
  write_file(directory_ / "link.wav", 48000, 1, SF_FORMAT_WAV | SF_FORMAT_FLOAT, samples);
  EXPECT_TRUE(fs::is_symlink(directory_ / "link.wav"));
  EXPECT_EQ(read_all(directory_ / "real/target.wav"), samples);
  EXPECT_EQ(fs::read_symlink(directory_ / "link.wav"), "real/target.wav");
}

TEST_F(SoundFileTest, AFileCutShortSaysHowManyFramesItsHeaderPromised) {
  const fs::path whole = directory_ / "whole.wav";
  write_file(whole, 48000, 3, SF_FORMAT_WAV | SF_FORMAT_PCM_24, random_samples(3 * 1000, 0.5f, 4));
  const std::string bytes = read_bytes(whole);
  const std::size_t header = bytes.size() - 1000 * 9;
  std::ofstream(directory_ / "cut.wav", std::ios::binary) << bytes.substr(0, header + 400 * 9 + 5);
  SoundFileReader cut(directory_ / "cut.wav");
  EXPECT_EQ(cut.info().frames, 400);
  EXPECT_EQ(cut.declared_frames(), 1000);
  SoundFileReader intact(whole);
  EXPECT_EQ(intact.declared_frames(), 1000);
  EXPECT_EQ(intact.info().frames, 1000);
}

TEST_F(SoundFileTest, ChannelMapAndStringsGoFromReaderToWriter) {
  const fs::path source = directory_ / "source.wav";
  SoundFileWriterOptions options;
  options.metadata.channel_map = {SF_CHANNEL_MAP_LEFT, SF_CHANNEL_MAP_RIGHT, SF_CHANNEL_MAP_LFE};
  options.metadata.strings = {{SF_STR_TITLE, "three"}, {SF_STR_ARTIST, "someone"}};
  {
    SoundFileWriter writer(source, 48000, 3, SF_FORMAT_WAVEX | SF_FORMAT_PCM_16, options);
    writer.write(random_samples(3 * 10, 0.5f, 5));
    writer.commit();
  }
  const SoundFileReader reader(source);
  EXPECT_EQ(reader.metadata().channel_map, options.metadata.channel_map);
  EXPECT_EQ(reader.metadata().strings, options.metadata.strings);
}

TEST_F(SoundFileTest, StaleTemporaryFilesAreRemovedOnlyWhenTheirProcessIsGoneAndTheNameIsOurs) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const std::string dead = std::to_string(child), alive = std::to_string(::getpid());
  const fs::path out = directory_ / "out.wav";
  for (const std::string& name :
       {"out.wav.tapstream-tmp-" + dead + "-abcdef", "out.wav.tapstream-tmp-" + alive + "-abcdef",
        "out.wav.tapstream-tmp-" + dead + "-toolong", "out.wav.tmp-" + dead + "-abcdef",
        "other.wav.tapstream-tmp-" + dead + "-abcdef"}) {
    std::ofstream(directory_ / name) << "x";
  }
  fs::create_directory(directory_ / ("out.wav.tapstream-tmp-" + dead + "-direct"));
  const auto removed = TemporaryFile::remove_stale(out);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0], directory_ / ("out.wav.tapstream-tmp-" + dead + "-abcdef"));
  EXPECT_EQ(files_in_directory().size(), 5u);
  // A writer's own temporary file carries its process id.
  SoundFileWriter writer(out, 48000, 1, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
  std::size_t ours = 0;
  for (const auto& file : files_in_directory()) {
    ours += file.filename().string().rfind("out.wav.tapstream-tmp-" + alive + "-", 0) == 0 ? 1 : 0;
  }
  EXPECT_EQ(ours, 2u);  // the planted live one and the writer's
}

TEST_F(SoundFileTest, IntegerOutputIsRoundedToNearestNotFloored) {
  const fs::path file = directory_ / "codes.wav";
  const std::vector<float> samples = {float(0.6 / 32768), float(-0.4 / 32768), float(1.5 / 32768),
                                      float(-1.5 / 32768), float(100.5 / 32768)};
  write_file(file, 48000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16, samples);
  SF_INFO info{};
  SNDFILE* f = sf_open(file.c_str(), SFM_READ, &info);
  ASSERT_NE(f, nullptr);
  std::vector<short> codes(5);
  EXPECT_EQ(sf_read_short(f, codes.data(), 5), 5);
  sf_close(f);
  EXPECT_EQ(codes, (std::vector<short>{1, 0, 2, -1, 101}));
}

// A 16-bit stereo WAV whose data chunk declares `declared` bytes and holds 400.
std::string wav_declaring(std::uint32_t declared) {
  const auto le32 = [](std::uint32_t v) {
    std::string s(4, '\0');
    for (int i = 0; i < 4; ++i) s[std::size_t(i)] = char((v >> (8 * i)) & 0xff);
    return s;
  };
  const auto le16 = [](std::uint16_t v) { return std::string{char(v & 0xff), char(v >> 8)}; };
  const std::uint32_t riff = declared > 0xffffffffu - 36 ? 0xffffffffu : declared + 36;
  std::string wav = "RIFF" + le32(riff) + "WAVE";
  wav += "fmt " + le32(16) + le16(1) + le16(2) + le32(48000) + le32(48000 * 4) + le16(4) + le16(16);
  return wav + "data" + le32(declared) + std::string(400, '\x11');
}

TEST_F(SoundFileTest, AHugeDeclaredSizeIsACutShortFileButAPipeWritersUnknownLengthIsNot) {
  const fs::path file = directory_ / "declared.wav";
  for (const auto& [declared, damaged] : std::vector<std::pair<std::uint32_t, bool>>{
           {0xfffffff0u, true},   // the file: damage
           {0x80000000u, true},   // just past sox's marker: damage
           {0x7ffff000u, false},  // sox's unknown length, a multiple of 4 bytes
           {0x7fffeffcu, true},   // for 4-byte frames sox writes 0x7ffff000 itself
           {0xffffffffu, false},  // ffmpeg's unknown length
           {400u, false}}) {      // the truth
    SCOPED_TRACE(declared);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << wav_declaring(declared);
    const SoundFileReader reader(file);
    EXPECT_EQ(reader.info().frames, 100);
    EXPECT_EQ(reader.declared_frames() > reader.info().frames, damaged) << reader.declared_frames();
  }
}

// A FIFO whose writer sends a header, a little audio, then stalls: a read
// waits for it, and the cancel flag ends the wait within a poll interval.
TEST_F(SoundFileTest, ACancelFlagEndsAReadWaitingOnAStalledFifo) {
  const fs::path fifo = directory_ / "in.wav";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const fs::path source = directory_ / "source.wav";
  write_file(source, 48000, 1, SF_FORMAT_WAV | SF_FORMAT_FLOAT, random_samples(100, 0.5f, 3));
  std::ifstream in(source, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::atomic<bool> cancel{false};
  int writer = -1;
  std::thread feeder([&] {
    writer = ::open(fifo.c_str(), O_WRONLY);
    if (writer >= 0) {
      EXPECT_EQ(::write(writer, bytes.data(), bytes.size()), ssize_t(bytes.size()));
    }
  });
  SoundFileReader reader(fifo, std::nullopt, &cancel);  // no wait for the writer: it polls
  feeder.join();
  ASSERT_GE(writer, 0);
  // 1000 frames asked, 100 there, the writer still open: libsndfile waits for the rest.
  std::vector<float> block(1000);
  std::thread canceller([&] {
    // The stimulus, not a wait: the cancel comes while the read is (most
    // likely) already blocked; either order must end the read.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cancel = true;
  });
  const auto started = std::chrono::steady_clock::now();
  try {
    reader.read(block);
    ADD_FAILURE() << "a cancelled read returned";
  } catch (const SoundFileError& e) {
    EXPECT_NE(std::string(e.what()).find("interrupted"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(2));
  canceller.join();
  ::close(writer);
}

TEST_F(SoundFileTest, ADirectoryIsRefusedAsInput) {
  try {
    SoundFileReader reader(directory_);
    ADD_FAILURE() << "a directory was opened as sound";
  } catch (const SoundFileError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tapstream

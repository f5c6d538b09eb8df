// `tapstream process --jobs FILE.csv` and `--shard`, end to end through the
// real binary: every row's output is exactly what `process IN OUT --taps F
// --gain G` gives for it (rows of different channel counts, rates, filters,
// gains and a matrix in one list; paths that need CSV quoting); a filter used
// by many rows is loaded once; bad rows are named by their line and skipped
// while the others are done (exit 3); a bad list is refused before any work;
// and the shards of a batch or a job list (K/N, Slurm's and Kubernetes'
// variables) cover every item exactly once. Sound files are written and read
// with libsndfile directly.

#include <gtest/gtest.h>
#include <sndfile.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "tests/process_support.hpp"
#include "tests/reference.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::random_signal;
using testing::read_text;
using testing::TempDir;

constexpr int kFloatWav = SF_FORMAT_WAV | SF_FORMAT_FLOAT;

struct Sound {
  int channels = 0;
  int rate = 0;
  std::vector<float> samples;  // interleaved
};

// Noise at a quarter of full scale; `title`, when given, as the file's title.
void write_sound(const fs::path& file, int channels, int rate, std::size_t frames,
                 std::uint64_t seed, int format = kFloatWav, const char* title = nullptr) {
  std::vector<float> samples = random_signal(frames * std::size_t(channels), seed);
  for (float& x : samples) x *= 0.25f;
  SF_INFO info{};
  info.channels = channels;
  info.samplerate = rate;
  info.format = format;
  SNDFILE* f = sf_open(file.c_str(), SFM_WRITE, &info);
  ASSERT_NE(f, nullptr) << file << ": " << sf_strerror(nullptr);
  if (title != nullptr) sf_set_string(f, SF_STR_TITLE, title);
  EXPECT_EQ(sf_writef_float(f, samples.data(), sf_count_t(frames)), sf_count_t(frames));
  sf_close(f);
}

std::string title_of(const fs::path& file) {
  SF_INFO info{};
  SNDFILE* f = sf_open(file.c_str(), SFM_READ, &info);
  if (f == nullptr) return "(cannot open)";
  const char* title = sf_get_string(f, SF_STR_TITLE);
  std::string result = title != nullptr ? title : "";
  sf_close(f);
  return result;
}

Sound read_sound(const fs::path& file) {
  Sound sound;
  SF_INFO info{};
  SNDFILE* f = sf_open(file.c_str(), SFM_READ, &info);
  if (f == nullptr) {
    ADD_FAILURE() << "cannot read " << file << ": " << sf_strerror(nullptr);
    return sound;
  }
  sound.channels = info.channels;
  sound.rate = info.samplerate;
  sound.samples.resize(std::size_t(info.frames) * std::size_t(info.channels));
  EXPECT_EQ(sf_readf_float(f, sound.samples.data(), info.frames), info.frames);
  sf_close(f);
  return sound;
}

void write_taps(const fs::path& file, std::size_t taps, std::uint64_t seed) {
  std::ofstream out(file);
  char line[64];
  for (const float t : random_signal(taps, seed)) {
    std::snprintf(line, sizeof line, "%.9g\n", double(t) * 0.1);
    out << line;
  }
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct RunResult {
  int exit_code = -1;
  std::string err;
};

// The binary with `args`; `environment` is prefixed as VAR=value assignments.
RunResult tapstream(const TempDir& dir, const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& environment = {}) {
  std::string command = "env";
  for (const auto& [name, value] : environment) command += ' ' + shell_quote(name + "=" + value);
  command += ' ' + shell_quote(TAPSTREAM_BINARY);
  for (const auto& a : args) command += ' ' + shell_quote(a);
  const fs::path err_file = dir.path().parent_path() / (dir.path().filename().string() + ".err");
  command += " </dev/null >/dev/null 2>" + shell_quote(err_file.string());
  const int status = std::system(command.c_str());
  RunResult run{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                read_text(err_file)};
  fs::remove(err_file);
  return run;
}

// A CSV field, quoted as RFC 4180 says when it must be.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void write_csv(const fs::path& csv, const std::vector<std::vector<std::string>>& lines) {
  std::ofstream out(csv, std::ios::binary);
  for (const auto& fields : lines) {
    for (std::size_t i = 0; i < fields.size(); ++i) out << (i ? "," : "") << csv_field(fields[i]);
    out << "\r\n";
  }
}

// Every file under `dir`, relative to it.
std::set<std::string> files_under(const fs::path& dir) {
  std::set<std::string> names;
  std::error_code error;
  for (const auto& e : fs::recursive_directory_iterator(dir, error)) {
    if (e.is_regular_file()) names.insert(fs::relative(e.path(), dir).string());
  }
  return names;
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t count = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

const std::vector<std::string> kCpu = {"--backend", "cpu", "--block", "512"};

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// A small dataset: inputs of 1 and 2 channels at two rates, two filters, a
// matrix, names that need quoting.
struct Dataset {
  fs::path csv;
  struct Row {
    std::string input, filter, output, gain;  // as in the CSV (relative)
  };
  std::vector<Row> rows;
};

Dataset make_dataset(const TempDir& dir) {
  fs::create_directories(dir / "set/clean");
  fs::create_directories(dir / "set/rirs");
  write_sound(dir / "set/clean/mono, \"one\".wav", 1, 16000, 3000, 1);
  write_sound(dir / "set/clean/mono2.wav", 1, 16000, 2500, 2);
  write_sound(dir / "set/clean/stereo.wav", 2, 48000, 4000, 3);
  write_sound(dir / "set/clean/mono44.wav", 1, 44100, 1000, 4);
  write_taps(dir / "set/rirs/room a.txt", 700, 10);
  write_taps(dir / "set/rirs/room-b.txt", 90, 11);
  fs::copy_file(fs::path(TAPSTREAM_SOURCE_DIR) / "config/matrix/crossfeed-2x2.toml",
                dir / "set/rirs/crossfeed.toml");
  for (const char* file : {"identity.txt", "crossfeed-lowpass-700-48k.txt"}) {
    fs::copy_file(fs::path(TAPSTREAM_SOURCE_DIR) / "config/matrix" / file, dir / "set/rirs" / file);
  }
  Dataset set;
  set.csv = dir / "set/jobs.csv";
  set.rows = {
      {"clean/mono, \"one\".wav", "rirs/room a.txt", "reverb/a.wav", ""},
      {"clean/mono2.wav", "rirs/room-b.txt", "reverb/b.wav", "-6"},
      {"clean/stereo.wav", "rirs/room a.txt", "reverb/c.wav", ""},
      {"clean/mono2.wav", "rirs/room a.txt", "reverb/d.wav", "3.5"},
      {"clean/mono44.wav", "rirs/room-b.txt", "reverb/e, 44.wav", ""},
      {"clean/stereo.wav", "rirs/crossfeed.toml", "reverb/f.wav", ""},
      {"clean/mono2.wav", (dir / "set/rirs/room a.txt").string(), "reverb/g.wav", ""},
  };
  // Columns in another order than the rows keep them.
  std::vector<std::vector<std::string>> lines = {{"output", "gain_db", "input", "filter"}};
  for (const auto& row : set.rows) lines.push_back({row.output, row.gain, row.input, row.filter});
  write_csv(set.csv, lines);
  return set;
}

TEST(ProcessJobs, EveryRowIsExactlyWhatItsOwnProcessRunGives) {
  TempDir dir;
  const Dataset set = make_dataset(dir);
  const RunResult run = tapstream(dir, with({"process", "--jobs", set.csv.string()}, kCpu));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("7 rows done"), std::string::npos) << run.err;
  std::set<std::string> expected;
  for (const auto& row : set.rows) expected.insert(row.output);
  EXPECT_EQ(
      files_under(dir / "set/reverb"),
      (std::set<std::string>{"a.wav", "b.wav", "c.wav", "d.wav", "e, 44.wav", "f.wav", "g.wav"}));
  for (const auto& row : set.rows) {
    SCOPED_TRACE(row.output);
    const fs::path filter =
        fs::path(row.filter).is_absolute() ? fs::path(row.filter) : dir / "set" / row.filter;
    std::vector<std::string> single = {
        "process", (dir / "set" / row.input).string(), (dir / "single.wav").string(),
        filter.extension() == ".toml" ? "--matrix" : "--taps", filter.string()};
    if (!row.gain.empty()) single = with(single, {"--gain", row.gain});
    ASSERT_EQ(tapstream(dir, with(single, kCpu)).exit_code, 0);
    const Sound alone = read_sound(dir / "single.wav");
    const Sound listed = read_sound(dir / "set" / row.output);
    EXPECT_EQ(listed.channels, alone.channels);
    EXPECT_EQ(listed.rate, alone.rate);
    EXPECT_EQ(listed.samples, alone.samples);
  }
}

TEST(ProcessJobs, ARowsSampleRateNameTakesTheFileForItsInputsRate) {
  TempDir dir;
  write_sound(dir / "a16.wav", 1, 16000, 2000, 21);
  write_sound(dir / "b44.wav", 1, 44100, 2000, 22);
  write_sound(dir / "c48.wav", 1, 48000, 2000, 23);
  write_taps(dir / "room_16000.txt", 50, 24);
  write_taps(dir / "room_44100.txt", 80, 25);
  const std::string pattern = "room_$samplerate$.txt";
  write_csv(dir / "jobs.csv", {{"input", "filter", "output"},
                               {"a16.wav", pattern, "a.wav"},
                               {"b44.wav", pattern, "b.wav"},
                               {"c48.wav", pattern, "c.wav"}});
  const RunResult run =
      tapstream(dir, with({"process", "--jobs", (dir / "jobs.csv").string()}, kCpu));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // Rows a and b: exactly their own rate's file, as a run that names it.
  for (const auto& [input, file, output] : {std::tuple{"a16.wav", "room_16000.txt", "a.wav"},
                                            std::tuple{"b44.wav", "room_44100.txt", "b.wav"}}) {
    SCOPED_TRACE(output);
    ASSERT_EQ(tapstream(dir, with({"process", (dir / input).string(), (dir / "single.wav").string(),
                                   "--taps", (dir / file).string()},
                                  kCpu))
                  .exit_code,
              0);
    EXPECT_EQ(read_sound(dir / output).samples, read_sound(dir / "single.wav").samples);
  }
  // Row c: 48000 Hz has no file; 44100's is the nearest, resampled, and said.
  EXPECT_NE(run.err.find("room_44100.txt: resampling the filter from 44100 Hz to 48000 Hz"),
            std::string::npos)
      << run.err;
  EXPECT_EQ(read_sound(dir / "c.wav").rate, 48000);
}

TEST(ProcessJobs, AFilterUsedByManyRowsIsLoadedOncePerChannelCountAndRate) {
  TempDir dir;
  const Dataset set = make_dataset(dir);
  const RunResult run = tapstream(dir, with({"process", "-v", "--jobs", set.csv.string()}, kCpu));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // "room a.txt": rows a and g (mono 16 kHz, one spelled absolute), d (the
  // same with its own gain) and c (stereo 48 kHz): three engines.
  // "room-b.txt": b (16 kHz) and e (44.1 kHz): two.
  EXPECT_EQ(occurrences(run.err, "taps " + (dir / "set/rirs/room a.txt").string() + ":"), 3u)
      << run.err;
  EXPECT_EQ(occurrences(run.err, "taps " + (dir / "set/rirs/room-b.txt").string() + ":"), 2u)
      << run.err;
  EXPECT_EQ(occurrences(run.err, "matrix " + (dir / "set/rirs/crossfeed.toml").string()), 1u)
      << run.err;
}

TEST(ProcessJobs, AutosFallBackToTheCpuIsSaidOnceForAWholeList) {
  TempDir dir;
  const Dataset set = make_dataset(dir);
  const RunResult run =
      tapstream(dir, {"process", "--jobs", set.csv.string(), "--backend", "auto"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  if (run.err.find("using the CPU engine") == std::string::npos) {
    GTEST_SKIP() << "a usable GPU: auto did not fall back";
  }
  // Six engines were made, each falling back.
  EXPECT_EQ(occurrences(run.err, "using the CPU engine"), 1u) << run.err;
}

TEST(ProcessJobs, BadRowsAreNamedByTheirLineAndSkippedAndTheOthersDone) {
  TempDir dir;
  fs::create_directories(dir / "out");
  write_sound(dir / "in.wav", 1, 48000, 2000, 1);
  write_sound(dir / "in2.wav", 1, 48000, 2000, 2);
  write_sound(dir / "stereo.wav", 2, 48000, 2000, 3);
  write_taps(dir / "f.txt", 50, 4);
  { std::ofstream(dir / "bad.txt") << "1.0\nnot a number\n"; }
  { std::ofstream(dir / "out/exists.wav") << "keep me"; }
  fs::copy_file(fs::path(TAPSTREAM_SOURCE_DIR) / "config/matrix/crossfeed-2x2.toml",
                dir / "m.toml");
  for (const char* file : {"identity.txt", "crossfeed-lowpass-700-48k.txt"}) {
    fs::copy_file(fs::path(TAPSTREAM_SOURCE_DIR) / "config/matrix" / file, dir / file);
  }
  write_csv(dir / "jobs.csv", {{"input", "filter", "output"},
                               {"in.wav", "f.txt", "out/good1.wav"},         // 2
                               {"missing.wav", "f.txt", "out/missing.wav"},  // 3
                               {"in.wav", "bad.txt", "out/bad.wav"},         // 4
                               {"in.wav", "m.toml", "out/mono-matrix.wav"},  // 5
                               {"in.wav", "f.txt", "out/exists.wav"},        // 6
                               {"in.wav", "f.txt", "in2.wav"},               // 7
                               {"in2.wav", "f.txt", "out/good1.wav"},        // 8
                               {"in.wav", "f.txt", "f.txt"},                 // 9
                               {"in.wav", "f.txt", "out/x.mp3"},             // 10
                               {"in.wav", "nofilter.txt", "out/nf.wav"},     // 11
                               {"stereo.wav", "f.txt", "out/good2.wav"}});   // 12
  const fs::path csv = dir / "jobs.csv";
  const RunResult run = tapstream(dir, with({"process", "--jobs", csv.string()}, kCpu));
  EXPECT_EQ(run.exit_code, 3) << run.err;
  const std::string at = csv.string() + ":";
  for (const auto& [line, why] :
       std::vector<std::pair<int, std::string>>{{3, "missing.wav"},
                                                {4, "bad.txt"},
                                                {5, "has 1 channels; the matrix"},
                                                {6, "exists (--overwrite replaces it)"},
                                                {7, "is the input of " + at + "8"},
                                                {8, "is also the output of " + at + "2"},
                                                {9, "is a taps file"},
                                                {10, "mp3"},
                                                {11, "nofilter.txt"}}) {
    const std::string named = "error: " + at + std::to_string(line) + ": ";
    const std::size_t found = run.err.find(named);
    ASSERT_NE(found, std::string::npos) << "line " << line << " not named: " << run.err;
    const std::string message = run.err.substr(found, run.err.find('\n', found) - found);
    EXPECT_NE(message.find(why), std::string::npos) << message;
  }
  EXPECT_NE(run.err.find("9 of 11 rows failed"), std::string::npos) << run.err;
  EXPECT_EQ(files_under(dir / "out"),
            (std::set<std::string>{"exists.wav", "good1.wav", "good2.wav"}));
  EXPECT_EQ(read_text(dir / "out/exists.wav"), "keep me");
  EXPECT_EQ(read_sound(dir / "in2.wav").samples.size(), 2000u);

  // --overwrite replaces what exists; the rows of a list that are all bad exit 1.
  write_csv(dir / "again.csv",
            {{"input", "filter", "output"}, {"in.wav", "f.txt", "out/exists.wav"}});
  ASSERT_EQ(
      tapstream(dir, with({"process", "--jobs", (dir / "again.csv").string()}, kCpu)).exit_code, 1);
  EXPECT_EQ(read_text(dir / "out/exists.wav"), "keep me");
  ASSERT_EQ(
      tapstream(dir, with({"process", "--jobs", (dir / "again.csv").string(), "--overwrite"}, kCpu))
          .exit_code,
      0);
  EXPECT_EQ(read_sound(dir / "out/exists.wav").samples.size(), 2000u);
}

TEST(ProcessJobs, ABadListIsRefusedBeforeAnyWork) {
  TempDir dir;
  write_sound(dir / "in.wav", 1, 48000, 2000, 1);
  write_taps(dir / "f.txt", 50, 4);
  // A good first row, then a row with too few fields: nothing is done.
  {
    std::ofstream(dir / "jobs.csv")
        << "input,filter,output\nin.wav,f.txt,out/a.wav\nin.wav,f.txt\n";
  }
  const RunResult run =
      tapstream(dir, with({"process", "--jobs", (dir / "jobs.csv").string()}, kCpu));
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.err.find((dir / "jobs.csv").string() + ":3: 2 fields, the header has 3"),
            std::string::npos)
      << run.err;
  EXPECT_FALSE(fs::exists(dir / "out"));
  // Options that make no sense with a job list are usage errors.
  for (const std::vector<std::string>& extra :
       std::vector<std::vector<std::string>>{{"--taps", "f.txt"},
                                             {(dir / "in.wav").string()},
                                             {"--out-dir", (dir / "o").string()},
                                             {"--normalize", "-1"}}) {
    const RunResult usage =
        tapstream(dir, with({"process", "--jobs", (dir / "jobs.csv").string()}, extra));
    EXPECT_EQ(usage.exit_code, 2) << extra[0] << ": " << usage.err;
  }
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// A batch writes each file as `process INPUT OUTPUT` writes it alone: the
// encoding, the dither (--dither, by default TPDF at 16 bits) and the
// metadata; the options a batch cannot honour are refused, naming them.
TEST(ProcessJobs, ABatchWritesEachFileAsItsOwnProcessRunWithTheSameDitherAndMetadata) {
  TempDir dir;
  fs::create_directories(dir / "in");
  write_sound(dir / "in/take.wav", 2, 48000, 6000, 11, SF_FORMAT_WAV | SF_FORMAT_PCM_16,
              "take one");
  write_taps(dir / "f.txt", 64, 12);
  { std::ofstream(dir / "jobs.csv") << "input,filter,output\nin/take.wav,f.txt,rows/take.wav\n"; }
  for (const std::string dither : {"auto", "none", "tpdf"}) {
    SCOPED_TRACE("--dither " + dither);
    const fs::path single = dir / ("single-" + dither + ".wav");
    ASSERT_EQ(tapstream(dir, with({"process", (dir / "in/take.wav").string(), single.string(),
                                   "--taps", (dir / "f.txt").string(), "--dither", dither},
                                  kCpu))
                  .exit_code,
              0);
    const fs::path out_dir = dir / ("out-" + dither);
    const RunResult batch =
        tapstream(dir, with({"process", (dir / "in").string(), "--out-dir", out_dir.string(),
                             "--taps", (dir / "f.txt").string(), "--dither", dither},
                            kCpu));
    ASSERT_EQ(batch.exit_code, 0) << batch.err;
    const RunResult rows = tapstream(dir, with({"process", "--jobs", (dir / "jobs.csv").string(),
                                                "--overwrite", "--dither", dither},
                                               kCpu));
    ASSERT_EQ(rows.exit_code, 0) << rows.err;
    const Sound alone = read_sound(single);
    for (const fs::path& listed : {out_dir / "take.wav", dir / "rows/take.wav"}) {
      SCOPED_TRACE(listed.string());
      EXPECT_EQ(read_sound(listed).samples, alone.samples);
      EXPECT_EQ(title_of(listed), "take one");
    }
  }
  // TPDF at 16 bits by default: auto is tpdf's output, not none's.
  EXPECT_EQ(read_sound(dir / "out-auto/take.wav").samples,
            read_sound(dir / "out-tpdf/take.wav").samples);
  EXPECT_NE(read_sound(dir / "out-auto/take.wav").samples,
            read_sound(dir / "out-none/take.wav").samples);
  for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
           {"--normalize", "-1"}, {"--type", "flac"}, {"--dither", "loud"}}) {
    const RunResult usage =
        tapstream(dir, with({"process", (dir / "in").string(), "--out-dir",
                             (dir / "refused").string(), "--taps", (dir / "f.txt").string()},
                            extra));
    EXPECT_EQ(usage.exit_code, 2) << extra[0] << ": " << usage.err;
    EXPECT_NE(usage.err.find(extra[0]), std::string::npos) << usage.err;
  }
  EXPECT_FALSE(fs::exists(dir / "refused"));
}

TEST(ProcessJobs, TheShippedExampleDatasetRunsFromMakeJobs) {
  if (std::system("python3 --version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 is not installed: tools/make-jobs.py cannot run";
  }
  TempDir dir;
  const fs::path examples = fs::path(TAPSTREAM_SOURCE_DIR) / "config/examples/dataset";
  const std::string make_jobs =
      shell_quote(std::string(TAPSTREAM_SOURCE_DIR) + "/tools/make-jobs.py") + " " +
      shell_quote((examples / "clean").string()) + " " + shell_quote((examples / "rirs").string()) +
      " " + shell_quote((dir / "reverb").string()) + " --seed 7 -o ";
  for (const char* csv : {"a.csv", "b.csv"}) {
    ASSERT_EQ(
        std::system(
            ("python3 " + make_jobs + shell_quote((dir / csv).string()) + " 2>/dev/null").c_str()),
        0);
  }
  // The same folders and seed: the same list.
  EXPECT_EQ(read_text(dir / "a.csv"), read_text(dir / "b.csv"));
  const RunResult run = tapstream(dir, {"process", "--jobs", (dir / "a.csv").string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::set<std::string> recordings;
  for (const auto& e : fs::directory_iterator(examples / "clean")) {
    recordings.insert(e.path().filename().string());
    const Sound clean = read_sound(e.path());
    const Sound reverb = read_sound(dir / "reverb" / e.path().filename());
    EXPECT_EQ(reverb.samples.size(), clean.samples.size()) << e.path();
  }
  EXPECT_EQ(recordings.size(), 6u);
  EXPECT_EQ(files_under(dir / "reverb"), recordings);
}

// Which of `names` each of `count` shards wrote into `out` (outputs of shard k in out/k).
void expect_every_item_once(const fs::path& out, std::size_t count,
                            const std::set<std::string>& names) {
  std::map<std::string, int> seen;
  for (std::size_t k = 0; k < count; ++k) {
    const std::set<std::string> mine = files_under(out / std::to_string(k));
    EXPECT_FALSE(mine.empty()) << "shard " << k << " did nothing";
    for (const auto& name : mine) ++seen[name];
  }
  std::set<std::string> all;
  for (const auto& [name, times] : seen) {
    EXPECT_EQ(times, 1) << name;
    all.insert(name);
  }
  EXPECT_EQ(all, names);
}

TEST(ProcessShards, TheShardsOfABatchCoverEveryFileExactlyOnce) {
  TempDir dir;
  fs::create_directories(dir / "in");
  std::set<std::string> names;
  for (int i = 0; i < 10; ++i) {
    const std::string name = "take" + std::to_string(i) + ".wav";
    write_sound(dir / "in" / name, 1 + i % 2, 48000, 500, std::uint64_t(i));
    names.insert(name);
  }
  write_taps(dir / "f.txt", 20, 4);
  const std::vector<std::string> common =
      with({"process", (dir / "in").string(), "--taps", (dir / "f.txt").string()}, kCpu);
  // K/N for shards 0 and 1, Slurm's variables (ids from 1) for 2, an Indexed Job for 3.
  ASSERT_EQ(tapstream(dir, with(common, {"--out-dir", (dir / "out/0").string(), "--shard", "0/4"}))
                .exit_code,
            0);
  ASSERT_EQ(tapstream(dir, with(common, {"--out-dir", (dir / "out/1").string(), "--shard", "1/4"}))
                .exit_code,
            0);
  const RunResult slurm =
      tapstream(dir, with(common, {"--out-dir", (dir / "out/2").string(), "--shard", "slurm"}),
                {{"SLURM_ARRAY_TASK_ID", "3"},
                 {"SLURM_ARRAY_TASK_MIN", "1"},
                 {"SLURM_ARRAY_TASK_COUNT", "4"}});
  ASSERT_EQ(slurm.exit_code, 0) << slurm.err;
  EXPECT_NE(slurm.err.find("shard 2 of 4"), std::string::npos) << slurm.err;
  const RunResult indexed =
      tapstream(dir, with(common, {"--out-dir", (dir / "out/3").string(), "--shard", "k8s/4"}),
                {{"JOB_COMPLETION_INDEX", "3"}});
  ASSERT_EQ(indexed.exit_code, 0) << indexed.err;
  expect_every_item_once(dir / "out", 4, names);
  // Shard 2 of 4 takes the 3rd and 7th of the sorted inputs.
  EXPECT_EQ(files_under(dir / "out/2"), (std::set<std::string>{"take2.wav", "take6.wav"}));
}

TEST(ProcessShards, TheShardsOfAJobListCoverEveryRowExactlyOnce) {
  TempDir dir;
  write_sound(dir / "in.wav", 1, 16000, 800, 1);
  write_taps(dir / "f.txt", 20, 4);
  std::vector<std::vector<std::string>> rows = {{"input", "filter", "output"}};
  std::set<std::string> names;
  for (int i = 0; i < 7; ++i) {
    const std::string name = "row" + std::to_string(i) + ".wav";
    rows.push_back({"in.wav", "f.txt", "out/" + name});
    names.insert(name);
  }
  write_csv(dir / "jobs.csv", rows);
  fs::create_directory(dir / "shards");
  for (int k = 0; k < 3; ++k) {
    const RunResult run = tapstream(dir, with({"process", "--jobs", (dir / "jobs.csv").string(),
                                               "--shard", std::to_string(k) + "/3"},
                                              kCpu));
    ASSERT_EQ(run.exit_code, 0) << run.err;
    fs::rename(dir / "out", dir / "shards" / std::to_string(k));
  }
  expect_every_item_once(dir / "shards", 3, names);
  EXPECT_EQ(files_under(dir / "shards/1"), (std::set<std::string>{"row1.wav", "row4.wav"}));
}

TEST(ProcessShards, BadShardValuesAreUsageErrorsNamingTheVariable) {
  TempDir dir;
  write_sound(dir / "in.wav", 1, 16000, 800, 1);
  write_taps(dir / "f.txt", 20, 4);
  const std::vector<std::string> batch = {"process",   (dir / "in.wav").string(),
                                          "--out-dir", (dir / "out").string(),
                                          "--taps",    (dir / "f.txt").string()};
  struct Case {
    std::string spec;
    std::map<std::string, std::string> environment;
    std::string named;
  };
  for (const Case& c : std::vector<Case>{
           {"4/4", {}, "--shard 4/4"},
           {"slurm", {{"SLURM_ARRAY_TASK_COUNT", "4"}}, "SLURM_ARRAY_TASK_ID is not set"},
           {"slurm",
            {{"SLURM_ARRAY_TASK_ID", "seven"}, {"SLURM_ARRAY_TASK_COUNT", "4"}},
            "SLURM_ARRAY_TASK_ID='seven'"},
           {"k8s/2", {{"JOB_COMPLETION_INDEX", "2"}}, "JOB_COMPLETION_INDEX=2"}}) {
    const RunResult run = tapstream(dir, with(batch, {"--shard", c.spec}), c.environment);
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_NE(run.err.find(c.named), std::string::npos) << run.err;
  }
  // One file has nothing to share.
  const RunResult single =
      tapstream(dir, {"process", (dir / "in.wav").string(), (dir / "o.wav").string(), "--taps",
                      (dir / "f.txt").string(), "--shard", "0/2"});
  EXPECT_EQ(single.exit_code, 2) << single.err;
  EXPECT_FALSE(fs::exists(dir / "out"));
  EXPECT_FALSE(fs::exists(dir / "o.wav"));
}

}  // namespace
}  // namespace tapstream

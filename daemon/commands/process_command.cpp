// `tapstream process IN OUT --taps FILE ...`: filters a sound file offline
// (or `--matrix FILE.toml`: through a routing matrix, its inputs in and its
// outputs out);
// `tapstream process IN... --out-dir DIR ...` filters many, and
// `tapstream process --jobs FILE.csv` a filter per file (process_batch).
// Nothing is lost or half-written: IN is only read, OUT appears (atomically,
// by rename) only when the whole job succeeded, and every failure is one line
// naming the culprit. "-" is standard input or output; a FIFO or device
// output is written through (dsp/files/sound_file.hpp). Exit status: 0 done, 1
// failed, 3 done from damaged input (cut short, or NaN/infinite samples
// replaced by 0), 128 + n ended by signal n.

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/commands/command.hpp"
#include "daemon/commands/offline_filter.hpp"
#include "daemon/commands/process_batch.hpp"
#include "daemon/commands/progress.hpp"
#include "daemon/commands/shard.hpp"
#include "daemon/config/gain_range.hpp"
#include "daemon/engine_factory.hpp"
#include "daemon/pipeline/offline_pipeline.hpp"
#include "dsp/files/float_spool.hpp"
#include "dsp/files/rate_file_name.hpp"
#include "dsp/files/sample_peak.hpp"
#include "dsp/files/sound_file.hpp"
#include "dsp/model/engine_tuning.hpp"
#include "dsp/realtime/non_finite.hpp"

namespace tapstream {

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMaxBlockFrames = 1u << 20;

struct ProcessArgs {
  std::vector<std::string> files;  // IN OUT, or with out_dir: IN...
  std::string out_dir;
  std::string jobs;  // --jobs FILE.csv: instead of files
  bool overwrite = false;
  std::string shard;    // --shard: empty, K/N, slurm, k8s/N
  std::string devices;  // --devices: empty (a batch: all), all, or 0,1
  std::string input;
  std::string output;
  std::string taps;
  std::string matrix;
  double gain_db = 0.0;
  std::string backend = "auto";
  std::size_t block_frames = 0;  // 0: the engine factory's choice
  std::string format;            // empty: the input's
  bool tail = false;
  bool ignore_rate = false;
  bool no_resample = false;
  std::size_t max_taps = 1u << 20;
  std::string algorithm = "auto";
  std::string type;             // --type: output container; empty: from the name
  std::string dither = "auto";  // auto: tpdf for 16 bits or fewer, as sox does
  bool strict = false;          // refuse damaged input instead of exit 3
  double normalize_dbfs = std::numeric_limits<double>::quiet_NaN();  // NaN: not asked
  std::string input_type;  // "raw": headerless samples, described by the next three
  int input_rate = 0;
  int input_channels = 0;
  std::string input_format = "float";
  std::vector<std::string> engine_options;  // --engine-option KEY=VALUE
};

// Set by SIGHUP/SIGINT/SIGTERM so that an interrupted run still removes its
// temporary file and exits with 128 + the signal; lock-free atomics are safe
// to store from a signal handler. The main thread reads them between blocks.
std::atomic<bool> interrupted{false};
std::atomic<int> interrupting_signal{0};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

extern "C" void on_interrupt(int signal_number) {
  interrupting_signal.store(signal_number, std::memory_order_relaxed);
  interrupted.store(true, std::memory_order_relaxed);
}

// Installs on_interrupt for SIGHUP, SIGINT and SIGTERM while alive, except
// where the signal was ignored when we started (nohup, a background job):
// that stays ignored. SA_RESETHAND: a second signal kills the process the
// ordinary way.
class InterruptGuard {
 public:
  static constexpr int kSignals[] = {SIGHUP, SIGINT, SIGTERM};

  InterruptGuard() {
    interrupted.store(false);
    interrupting_signal.store(0);
    struct sigaction action {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    for (std::size_t i = 0; i < std::size(kSignals); ++i) {
      sigaction(kSignals[i], nullptr, &old_[i]);
      if (old_[i].sa_handler != SIG_IGN) sigaction(kSignals[i], &action, nullptr);
    }
  }
  ~InterruptGuard() {
    for (std::size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &old_[i], nullptr);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  struct sigaction old_[std::size(kSignals)]{};
};

// -q hides warnings, but not those that say the output differs from what
// was asked (clipping, damaged input): those are logged at warning level
// whatever the level. Called from the main thread only, after the pipeline.
void warn_data_changed(const std::string& message) {
  auto& logger = *spdlog::default_logger();
  const auto level = logger.level();
  if (level > spdlog::level::warn) logger.set_level(spdlog::level::warn);
  logger.warn(message);
  logger.set_level(level);
}

Algorithm parse_algorithm(const std::string& name) {
  if (name == "auto") return Algorithm::automatic;
  if (name == "direct") return Algorithm::direct;
  if (name == "fft") return Algorithm::fft;
  throw std::invalid_argument("--algorithm: unknown value '" + name + "'");
}

bool same_file(const fs::path& a, const fs::path& b) {
  if (is_standard_stream(a) || is_standard_stream(b)) return false;
  std::error_code ec_a, ec_b;
  const fs::path canonical_a = fs::weakly_canonical(a, ec_a);
  const fs::path canonical_b = fs::weakly_canonical(b, ec_b);
  if (!ec_a && !ec_b && canonical_a == canonical_b) return true;
  std::error_code ec;
  // Hard links and other spellings of one file: only defined when both exist.
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec) && !ec;
}

// Refuses outputs that would overwrite something the job reads.
void check_paths(const ProcessArgs& args) {
  const fs::path in = args.input, out = args.output, taps = args.taps, matrix = args.matrix;
  if (same_file(in, out)) {
    throw std::invalid_argument("output '" + args.output + "' is the input file '" + args.input +
                                "': refusing to overwrite the input");
  }
  // A name with "$samplerate$" stands for a file per rate: none may be the output.
  const auto is_read = [&out](const fs::path& named) {
    if (same_file(named, out)) return true;
    for (const int rate : names_sample_rate(named) ? rates_on_disk(named) : std::vector<int>{}) {
      if (same_file(file_for_rate(named, rate), out)) return true;
    }
    return false;
  };
  if (is_read(taps)) {
    throw std::invalid_argument("output '" + args.output + "' is the taps file '" + args.taps +
                                "': refusing to overwrite it");
  }
  if (!args.matrix.empty() && is_read(matrix)) {
    throw std::invalid_argument("output '" + args.output + "' is the matrix file '" + args.matrix +
                                "': refusing to overwrite it");
  }
  if (is_standard_stream(taps)) {
    throw UsageError("--taps: the coefficients must come from a file, not '-'");
  }
  std::error_code ec;
  if (fs::is_directory(out, ec)) {
    throw std::invalid_argument("output '" + args.output + "' is a directory");
  }
}

std::string plural(std::uint64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

std::string signal_name(int signal_number) {
  switch (signal_number) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "signal " + std::to_string(signal_number);
  }
}

double dbfs(double linear) {
  return 20.0 * std::log10(linear);
}

// --normalize: the first pass filters into a spool and measures the peak; the
// second scales the spool so that the peak lands on `target_dbfs`. Returns
// what the first pass returned.
OfflineResult run_normalized(OfflineFilter& filter,
                             const std::function<std::size_t(std::span<float>)>& read,
                             SoundFileWriter& writer, const OfflineOptions& options,
                             double target_dbfs) {
  FloatSpool spool;
  float peak = 0.0f;
  const OfflineResult result = filter.run(
      read,
      [&spool, &peak](std::span<const float> frames) {
        peak = finite_peak(frames, peak);
        spool.write(frames);
      },
      options);
  double gain = 1.0;
  if (peak > 0.0f) {
    gain = std::pow(10.0, target_dbfs / 20.0) / double(peak);
    spdlog::info("normalize: peak {:.2f} dBFS to {:.2f} dBFS ({:+.2f} dB)", dbfs(peak), target_dbfs,
                 dbfs(gain));
  } else {
    spdlog::warn("normalize: the output is silent; nothing to scale");
  }
  spool.rewind();
  std::vector<float> block(options.block_frames * filter.output_channels());
  for (std::size_t got; (got = spool.read(block)) > 0;) {
    if (interrupted.load(std::memory_order_relaxed)) throw std::runtime_error("interrupted");
    for (std::size_t i = 0; i < got; ++i) block[i] = float(double(block[i]) * gain);
    writer.write(std::span<const float>(block.data(), got));
  }
  return result;
}

int process(const ProcessArgs& args) {
  const auto start = std::chrono::steady_clock::now();
  const Backend backend = parse_backend(args.backend);
  const Algorithm algorithm = parse_algorithm(args.algorithm);
  const SampleFormat format =
      args.format.empty() ? SampleFormat::same_as_input : parse_sample_format(args.format);
  if (!args.jobs.empty()) {
    if (!args.taps.empty() || !args.matrix.empty()) {
      throw UsageError("--jobs: each row names its filter; no --taps or --matrix");
    }
  } else if (args.taps.empty() == args.matrix.empty()) {
    throw UsageError("give the filters as --taps FILE or as --matrix FILE.toml (one of them)");
  }
  if ((!args.jobs.empty() || !args.out_dir.empty()) &&
      (!std::isnan(args.normalize_dbfs) || !args.input_type.empty() || !args.type.empty())) {
    throw UsageError(std::string(args.jobs.empty() ? "--out-dir" : "--jobs") +
                     ": --normalize, --input-type and --type apply to one file only (a batch "
                     "keeps each input's type, and writes each file in one pass)");
  }
  try {
    static_cast<void>(dither_for_format(args.dither, 0));
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--dither: ") + e.what());
  }
  if (args.overwrite && args.jobs.empty()) {
    throw UsageError(
        "--overwrite applies to --jobs (one file and --out-dir replace their outputs)");
  }
  Shard shard;
  if (!args.shard.empty()) {
    if (args.jobs.empty() && args.out_dir.empty()) {
      throw UsageError("--shard splits a batch: give --out-dir or --jobs");
    }
    try {
      shard = parse_shard(args.shard, process_environment);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  }
  DeviceList devices;  // empty: not given
  if (!args.devices.empty()) {
    if (backend == Backend::cpu) {
      throw UsageError("--devices " + args.devices +
                       ": --backend cpu runs on the CPU engine, not on GPUs (leave --devices out)");
    }
    try {
      devices = parse_device_list(args.devices);
    } catch (const std::invalid_argument& e) {
      throw UsageError("--devices " + args.devices + ": " + e.what());
    }
  }
  // The GPUs: a batch spreads its files over every one named (all by
  // default), one engine each; one file's channels are sharded over them only
  // when --devices names more than one.
  const bool batch_run = !args.out_dir.empty() || !args.jobs.empty();
  std::vector<int> gpus;
  if (batch_run || !devices.empty()) {
    try {
      gpus = engine_devices(backend, devices);
    } catch (const std::invalid_argument& e) {
      throw UsageError("--devices " + devices.text() + ": " + e.what());
    }
    if (gpus.empty() && !devices.empty()) {
      spdlog::warn("--devices {} is ignored: the CPU engine runs (no usable GPU)", devices.text());
    }
  }
  if (!args.matrix.empty() && algorithm != Algorithm::automatic) {
    throw UsageError("--algorithm applies to --taps; the matrix engines choose their own");
  }
  FilterChoice filters;
  filters.taps = args.taps;
  filters.matrix = args.matrix;
  filters.gain_db = args.gain_db;
  filters.backend = backend;
  filters.algorithm = algorithm;
  filters.block_frames = args.block_frames;
  filters.max_taps = args.max_taps;
  filters.ignore_rate = args.ignore_rate;
  filters.resample = !args.no_resample;
  filters.strict = args.strict;
  for (const std::string& assignment : args.engine_options) {
    try {
      set_engine_tuning(filters.engine, assignment);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--engine-option ") + e.what());
    }
  }
  if (!batch_run) filters.engine.devices = gpus;
  if (batch_run) {
    // A bad matrix is refused before the output directory is made.
    if (!args.matrix.empty()) load_offline_matrix(filters, 0);
    BatchSettings batch;
    batch.inputs.assign(args.files.begin(), args.files.end());
    batch.out_dir = args.out_dir;
    batch.job_list = args.jobs;
    batch.overwrite = args.overwrite;
    batch.shard = shard;
    batch.devices = gpus;
    batch.filters = filters;
    batch.format = format;
    batch.dither = args.dither;
    batch.tail = args.tail;
    batch.cancel = &interrupted;
    return run_batch(batch);
  }
  check_paths(args);

  std::optional<RawInput> raw;
  if (args.input_type == "raw") {
    if (args.input_rate == 0 || args.input_channels == 0) {
      throw UsageError("--input-type raw needs --input-rate and --input-channels");
    }
    raw = RawInput{args.input_rate, args.input_channels, parse_sample_format(args.input_format)};
  }
  SoundFileReader reader(args.input, raw, &interrupted);
  const SoundFileInfo info = reader.info();
  const std::string input_name = is_standard_stream(args.input) ? "standard input" : args.input;
  spdlog::debug("input {}: {} Hz, {}, {} frames", input_name, info.sample_rate,
                plural(std::uint64_t(info.channels), "channel"), info.frames);
  // A job's length is known from a file's header, not from a stream's.
  filters.backend = backend_for_job(filters.backend, std::size_t(info.channels),
                                    is_standard_stream(args.input) ? -1 : info.frames);
  if (filters.backend != Backend::cpu) start_cuda_in_background();
  // Before the filters are loaded and planned: a bad output name fails at once.
  const bool stream = output_is_stream(args.output);
  const OutputFormat chosen =
      choose_output_format(info.format, format, args.type, args.output, stream);
  if (!chosen.note.empty()) spdlog::info("{}", chosen.note);
  // Damaged input: a file whose header promises more frames than it holds.
  std::vector<std::string> damage;
  const auto cut_short = [&](std::int64_t promised, std::uint64_t held) {
    return input_name + ": cut short: the header promises " + std::to_string(promised) +
           " frames, the file holds " + std::to_string(held);
  };
  if (reader.declared_frames() > info.frames) {
    const std::string problem = cut_short(reader.declared_frames(), std::uint64_t(info.frames));
    if (args.strict) throw std::runtime_error(problem + " (refused: --strict)");
    damage.push_back(problem + "; filtering what is there");
  }

  filters.damage = &damage;
  OfflineFilter filter(filters, std::size_t(info.channels), info.sample_rate, input_name);
  spdlog::debug("engine: {}", filter.description());
  const int output_channels = int(filter.output_channels());

  SoundFileWriterOptions writer_options;
  writer_options.dither = dither_for_format(args.dither, chosen.format);
  writer_options.metadata = reader.metadata();
  writer_options.cancel = &interrupted;
  SoundFileWriter writer(args.output, info.sample_rate, output_channels, chosen.format,
                         writer_options);
  for (const auto& stale : writer.removed_stale()) {
    spdlog::info("removed {}, a temporary file left by an earlier run that ended abruptly",
                 stale.string());
  }
  const std::string output_name = is_standard_stream(args.output) ? "standard output" : args.output;
  spdlog::debug("output {}: {}, dither {}", output_name, describe_format(chosen.format),
                writer_options.dither == Dither::tpdf ? "tpdf" : "none");

  OfflineOptions options = filter.options();
  options.tail_frames = args.tail ? filter.max_taps() - 1 : 0;
  const std::uint64_t expected_frames =
      info.frames > 0 ? std::uint64_t(info.frames) + options.tail_frames : 0;
  ProgressBar progress(expected_frames, ProgressBar::stderr_is_terminal());
  options.on_progress = [&progress](std::uint64_t done) { progress.update(done); };
  options.cancel = &interrupted;

  // NaN and infinite samples are replaced by 0 before the filters (where one
  // would spread over a whole block), counted, and reported as damage.
  NonFiniteTally non_finite;
  std::uint64_t frames_read = 0;
  const auto channel_count = std::size_t(info.channels);
  const auto where_first = [&] {
    return fmt::format("frame {} (counting from 0) of channel {}", non_finite.first_frame,
                       non_finite.first_channel + 1);
  };
  const std::function<std::size_t(std::span<float>)> read = [&](std::span<float> buffer) {
    const std::size_t got = reader.read(buffer);
    non_finite.scan(buffer.first(got * channel_count), channel_count, frames_read);
    frames_read += got;
    if (args.strict && non_finite.count > 0) {
      throw std::runtime_error(input_name + ": a NaN or infinite sample at " + where_first() +
                               " (refused: --strict)");
    }
    return got;
  };
  const OfflineResult result =
      std::isnan(args.normalize_dbfs)
          ? filter.run(
                read, [&writer](std::span<const float> frames) { writer.write(frames); }, options)
          : run_normalized(filter, read, writer, options, args.normalize_dbfs);
  const std::int64_t promised = std::max(reader.declared_frames(), info.frames);
  if (promised > std::int64_t(result.input_frames) && damage.empty()) {
    const std::string problem = cut_short(promised, result.input_frames);
    if (args.strict) throw std::runtime_error(problem + " (refused: --strict)");
    damage.push_back(problem + "; filtered what was there");
  }
  if (non_finite.count > 0) {
    damage.push_back(fmt::format("{}: {} replaced by 0, the first at {}", input_name,
                                 plural(non_finite.count, "NaN or infinite sample"),
                                 where_first()));
  }
  if (interrupted.load()) throw std::runtime_error("interrupted");
  writer.commit();
  progress.finish();

  for (const auto& problem : damage) warn_data_changed(problem);
  const ClipStats& clip = writer.clip_stats();
  if (clip.clipped_samples > 0) {
    warn_data_changed(fmt::format(
        "clipped {} samples, peak {:.2f} dBFS (lower --gain, --normalize, or write --format float)",
        clip.clipped_samples, dbfs(double(clip.peak))));
  } else if (clip.peak > 1.0f) {
    spdlog::warn(
        "peak {:.2f} dBFS is above full scale: kept in the float output, but players and "
        "integer conversions will clip it (lower --gain, or --normalize)",
        dbfs(double(clip.peak)));
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double audio_seconds = double(result.output_frames) / double(info.sample_rate);
  const std::string channels = output_channels == info.channels
                                   ? plural(std::uint64_t(info.channels), "channel")
                                   : std::to_string(info.channels) + " -> " +
                                         plural(std::uint64_t(output_channels), "channel");
  spdlog::info("{:.2f} s of audio ({}, {}, {} Hz) through {} in {:.3f} s ({:.1f}x real time) -> {}",
               audio_seconds, plural(result.output_frames, "frame"), channels, info.sample_rate,
               filter.description(), wall, wall > 0.0 ? audio_seconds / wall : 0.0, output_name);
  return damage.empty() ? exit_code::ok : exit_code::partial;
}

int run_process(const ProcessArgs& args) {
  // From here on a signal only sets the flag; whatever runs then stops at its
  // next check (the pipeline between blocks, a blocked open or read with
  // EINTR) and unwinds, the writer's destructor removing its temporary file.
  const InterruptGuard interrupt_guard;
  try {
    return process(args);
  } catch (const std::exception&) {
    const int signal_number = interrupting_signal.load();
    if (signal_number == 0) throw;
    const std::string output_name =
        is_standard_stream(args.output) ? "standard output" : args.output;
    spdlog::error("process: interrupted by {}: {}", signal_name(signal_number),
                  output_is_stream(args.output) ? output_name + " is incomplete"
                                                : "nothing written to " + output_name);
    return exit_code::on_signal(signal_number);
  }
}

}  // namespace

Command add_process_command(CLI::App& app) {
  auto args = std::make_shared<ProcessArgs>();
  CLI::App* sub = app.add_subcommand("process", "Filter a sound file offline");
  sub->add_option("files", args->files,
                  "IN OUT: the sound file to filter (any format libsndfile reads, or - for "
                  "standard input) and where to write the result (a file, type from its "
                  "extension; - for standard output, a FIFO or a device); with --out-dir: IN... "
                  "(sound files and directories); none with --jobs");
  auto* out_dir =
      sub->add_option("-o,--out-dir", args->out_dir,
                      "Filter every IN into this directory, keeping file names (a batch)");
  sub->add_option("--jobs", args->jobs,
                  "A CSV job list: a header naming the columns input, filter, output (and "
                  "optionally gain_db), then a row per file; paths relative to the CSV's folder; "
                  "filter is a coefficient file or a matrix .toml")
      ->excludes(out_dir);
  sub->add_flag("--overwrite", args->overwrite,
                "With --jobs: replace outputs that exist (else such rows are refused)");
  sub->add_option("--devices", args->devices,
                  "GPUs to use: all, or numbers such as 0,1 (a batch or job list: one engine per "
                  "GPU, each file to the next free one; all by default. One file: its channels "
                  "sharded over the GPUs named; one GPU by default)");
  sub->add_option("--shard", args->shard,
                  "Do only a share of a batch or job list: K/N (items i with i mod N = K), slurm "
                  "(SLURM_ARRAY_TASK_ID of SLURM_ARRAY_TASK_COUNT), or k8s/N "
                  "(JOB_COMPLETION_INDEX of N)");
  sub->parse_complete_callback([args] {
    if (!args->jobs.empty()) {
      if (!args->files.empty()) {
        throw CLI::ValidationError("files", "--jobs names every file; no IN or OUT besides");
      }
      return;
    }
    if (!args->out_dir.empty()) {
      if (args->files.empty()) throw CLI::ValidationError("files", "--out-dir needs IN...");
      return;
    }
    if (args->files.size() != 2) {
      throw CLI::ValidationError("files", "expected IN OUT (or IN... --out-dir DIR), got " +
                                              std::to_string(args->files.size()) + " files");
    }
    args->input = args->files[0];
    args->output = args->files[1];
    const std::string problem = args->input == "-" ? "" : CLI::ExistingFile(args->input);
    if (!problem.empty()) throw CLI::ValidationError("input", problem);
  });
  auto* taps = sub->add_option(
      "-t,--taps", args->taps,
      "Coefficient file: text, .f32, .f64, or an impulse response (WAV, FLAC, ...)");
  sub->add_option("-m,--matrix", args->matrix,
                  "Routing matrix file (TOML, docs/routing-matrix.md) instead of --taps: the "
                  "input has its inputs, the output its outputs")
      ->excludes(taps);
  sub->add_option("-g,--gain", args->gain_db, "Gain in dB applied to the filters (or every path)")
      ->check(number_between(min_gain_db, max_gain_db, "dB"));
  sub->add_option("-b,--backend", args->backend, "Engine: cpu, cuda or auto (GPU if usable)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  sub->add_option("--block", args->block_frames,
                  "Frames per block (1 to 1048576; default: chosen for the engine, 4096 to "
                  "16384 frames on the CPU, up to 65536 on the GPU)")
      ->check(CLI::Range(std::size_t(1), kMaxBlockFrames));
  sub->add_option("-f,--format", args->format,
                  "Output sample format: float, pcm16, pcm24, pcm32 (default: the input's)")
      ->check(CLI::IsMember({"float", "pcm16", "pcm24", "pcm32"}));
  sub->add_flag("--tail", args->tail, "Also write the filters' decay (taps - 1 frames)");
  sub->add_flag("--no-resample", args->no_resample,
                "Refuse a filter made for another rate than the input's instead of resampling it "
                "(an impulse response's header, or the nearest rate's file for a $samplerate$ "
                "name)");
  sub->add_flag("--ignore-rate", args->ignore_rate,
                "Accept an impulse response whose sample rate differs from the input's");
  sub->add_option("--max-taps", args->max_taps, "Refuse filters longer than this")
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 26))
      ->capture_default_str();
  sub->add_option("--algorithm", args->algorithm, "auto, direct or fft")
      ->check(CLI::IsMember({"auto", "direct", "fft"}))
      ->capture_default_str();
  sub->add_option("--engine-option", args->engine_options,
                  "An engine tuning key as in the configuration's [engine] table, "
                  "e.g. cpu_threads=4 (repeatable; config/live-default.toml lists them)");
  sub->add_option("--type", args->type,
                  "Output type (wav, flac, aiff, au, raw, ...) when the name does not say it, "
                  "e.g. for standard output (default there: wav)");
  sub->add_option("--dither", args->dither,
                  "Dither for integer output: tpdf, none, or auto (tpdf at 16 bits or fewer)")
      ->check(CLI::IsMember({"auto", "tpdf", "none"}))
      ->capture_default_str();
  sub->add_flag("--strict", args->strict,
                "Refuse input or impulse responses that are cut short, and input with NaN or "
                "infinite samples (default: filter what is there, those samples as 0, warn, "
                "exit 3)");
  auto* normalize =
      sub->add_option("--normalize", args->normalize_dbfs,
                      "Scale the output so that its peak is at this level in dBFS (-200 to 0; a "
                      "second pass, like sox's gain -n)")
          ->check(number_between(-200.0, 0.0, "dBFS"));
  sub->get_option("--gain")->excludes(normalize);
  sub->add_option("--input-type", args->input_type,
                  "raw: the input is headerless samples (with --input-rate, --input-channels, "
                  "--input-format); other inputs are recognised by their header")
      ->check(CLI::IsMember({"raw"}));
  sub->add_option("--input-rate", args->input_rate, "Sample rate of raw input, in Hz")
      ->check(number_between(1, 10'000'000, "Hz"));
  sub->add_option("--input-channels", args->input_channels, "Channels of raw input")
      ->check(number_between(1, 1024, "channels"));
  sub->add_option("--input-format", args->input_format,
                  "Samples of raw input, little-endian: float, pcm16, pcm24, pcm32")
      ->check(CLI::IsMember({"float", "pcm16", "pcm24", "pcm32"}))
      ->capture_default_str();
  return Command{sub, [args] { return run_process(*args); }};
}

}  // namespace tapstream

// `tapstream process IN OUT --taps FILE ...`: filters a sound file offline.
// Nothing is lost or half-written: IN is only read, OUT appears (atomically,
// by rename) only when the whole job succeeded, and every failure is one line
// naming the culprit.

#include <signal.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "daemon/commands/command.hpp"
#include "daemon/commands/progress.hpp"
#include "daemon/engine_factory.hpp"
#include "daemon/gain_range.hpp"
#include "daemon/pipeline/offline_pipeline.hpp"
#include "dsp/coefficient_file.hpp"
#include "dsp/sound_file.hpp"

namespace tapstream {

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMaxBlockFrames = 1u << 20;

struct ProcessArgs {
  std::string input;
  std::string output;
  std::string taps;
  double gain_db = 0.0;
  std::string backend = "auto";
  std::size_t block_frames = 8192;
  std::string format;  // empty: the input's
  bool tail = false;
  bool ignore_rate = false;
  std::size_t max_taps = 1u << 20;
  std::string algorithm = "auto";
};

// Set by SIGINT/SIGTERM so that an interrupted run still removes its
// temporary file; a lock-free atomic is safe to store from a signal handler.
std::atomic<bool> interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_interrupt(int) {
  interrupted.store(true, std::memory_order_relaxed);
}

// Installs on_interrupt for SIGINT and SIGTERM while alive. SA_RESETHAND: a
// second signal kills the process the ordinary way.
class InterruptGuard {
 public:
  InterruptGuard() {
    interrupted.store(false);
    struct sigaction action {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~InterruptGuard() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

Algorithm parse_algorithm(const std::string& name) {
  if (name == "auto") return Algorithm::automatic;
  if (name == "direct") return Algorithm::direct;
  if (name == "fft") return Algorithm::fft;
  throw std::invalid_argument("--algorithm: unknown value '" + name + "'");
}

bool same_file(const fs::path& a, const fs::path& b) {
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
  const fs::path in = args.input, out = args.output, taps = args.taps;
  if (same_file(in, out)) {
    throw std::invalid_argument("output '" + args.output + "' is the input file '" + args.input +
                                "': refusing to overwrite the input");
  }
  if (same_file(taps, out)) {
    throw std::invalid_argument("output '" + args.output + "' is the taps file '" + args.taps +
                                "': refusing to overwrite it");
  }
  std::error_code ec;
  if (fs::is_directory(out, ec)) {
    throw std::invalid_argument("output '" + args.output + "' is a directory");
  }
}

std::string plural(std::uint64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

int run_process(const ProcessArgs& args) {
  const auto start = std::chrono::steady_clock::now();
  // From here on a signal only sets the flag; the pipeline then stops and the
  // writer's destructor removes its temporary file.
  const InterruptGuard interrupt_guard;
  const Backend backend = parse_backend(args.backend);
  const Algorithm algorithm = parse_algorithm(args.algorithm);
  const SampleFormat format =
      args.format.empty() ? SampleFormat::same_as_input : parse_sample_format(args.format);
  check_paths(args);

  SoundFileReader reader(args.input);
  const SoundFileInfo info = reader.info();
  spdlog::debug("input {}: {} Hz, {}, {} frames", args.input, info.sample_rate,
                plural(std::uint64_t(info.channels), "channel"), info.frames);

  CoefficientFileOptions taps_options;
  taps_options.channels = std::size_t(info.channels);
  taps_options.max_taps = args.max_taps;
  taps_options.sample_rate = info.sample_rate;
  taps_options.ignore_sample_rate = args.ignore_rate;
  FilterBank bank = load_filter_bank(args.taps, taps_options);
  if (args.gain_db != 0.0) bank = bank.scaled(float(std::pow(10.0, args.gain_db / 20.0)));
  spdlog::debug("taps {}: {} per channel at most, {}", args.taps, bank.max_taps(),
                bank.is_shared() ? "one filter for all channels" : "one filter per channel");

  EngineOptions engine_options;
  engine_options.max_block_frames = args.block_frames;
  engine_options.algorithm = algorithm;
  const std::unique_ptr<Engine> engine = make_engine(backend, bank, engine_options);
  spdlog::debug("engine: {}", engine->description());

  SoundFileWriter writer(args.output, info.sample_rate, info.channels,
                         output_format(info.format, format, args.output));

  OfflineOptions options;
  options.block_frames = args.block_frames;
  options.tail_frames = args.tail ? bank.max_taps() - 1 : 0;
  const std::uint64_t expected_frames =
      info.frames > 0 ? std::uint64_t(info.frames) + options.tail_frames : 0;
  ProgressBar progress(expected_frames, ProgressBar::stderr_is_terminal());
  options.on_progress = [&progress](std::uint64_t done) { progress.update(done); };
  options.cancel = &interrupted;

  const OfflineResult result = run_offline(*engine, reader, writer, options);
  writer.commit();
  progress.finish();

  const ClipStats& clip = writer.clip_stats();
  if (clip.clipped_samples > 0) {
    spdlog::warn("clipped {} samples, peak {:.2f} dBFS (lower --gain or write --format float)",
                 clip.clipped_samples, 20.0 * std::log10(double(clip.peak)));
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double audio_seconds = double(result.output_frames) / double(info.sample_rate);
  spdlog::info("{:.2f} s of audio ({}, {}, {} Hz) through {} in {:.3f} s ({:.1f}x real time) -> {}",
               audio_seconds, plural(result.output_frames, "frame"),
               plural(std::uint64_t(info.channels), "channel"), info.sample_rate,
               engine->description(), wall, wall > 0.0 ? audio_seconds / wall : 0.0, args.output);
  return 0;
}

}  // namespace

Command add_process_command(CLI::App& app) {
  auto args = std::make_shared<ProcessArgs>();
  CLI::App* sub = app.add_subcommand("process", "Filter a sound file offline");
  sub->add_option("input", args->input, "Sound file to filter (any format libsndfile reads)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("output", args->output, "Where to write the result")->required();
  sub->add_option("-t,--taps", args->taps,
                  "Coefficient file: text, .f32, .f64, or an impulse response (WAV, FLAC, ...)")
      ->required();
  sub->add_option("-g,--gain", args->gain_db, "Gain in dB applied to the filters")
      ->check(number_between(min_gain_db, max_gain_db, "dB"));
  sub->add_option("-b,--backend", args->backend, "Engine: cpu, cuda or auto (GPU if usable)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  sub->add_option("--block", args->block_frames, "Frames per block (1 to 1048576)")
      ->check(CLI::Range(std::size_t(1), kMaxBlockFrames))
      ->capture_default_str();
  sub->add_option("-f,--format", args->format,
                  "Output sample format: float, pcm16, pcm24, pcm32 (default: the input's)")
      ->check(CLI::IsMember({"float", "pcm16", "pcm24", "pcm32"}));
  sub->add_flag("--tail", args->tail, "Also write the filters' decay (taps - 1 frames)");
  sub->add_flag("--ignore-rate", args->ignore_rate,
                "Accept an impulse response whose sample rate differs from the input's");
  sub->add_option("--max-taps", args->max_taps, "Refuse filters longer than this")
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 26))
      ->capture_default_str();
  sub->add_option("--algorithm", args->algorithm, "auto, direct or fft")
      ->check(CLI::IsMember({"auto", "direct", "fft"}))
      ->capture_default_str();
  return Command{sub, [args] { return run_process(*args); }};
}

}  // namespace tapstream

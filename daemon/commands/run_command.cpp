// `tapstream run --config FILE`: the live daemon. Audio from a device or a
// file goes through the engine to a device or a file, block after block,
// until SIGINT/SIGTERM (or the end of an input file); SIGHUP reloads the
// configuration, `tapstream ctl` and the file watcher swap filters.
//
// Threads: the main thread owns everything here and handles the signals
// synchronously (they are blocked in every thread and taken with
// sigtimedwait, so no code runs in a signal handler); the PortAudio callback
// or the file driver and the engine thread run the pipeline
// (daemon/pipeline/live_pipeline.hpp); the control socket and the file watcher call
// back into FilterSwapper, which serialises them with a mutex (none of that
// is on the audio path: the engine only polls the mailbox).

#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "daemon/io/audio_device.hpp"
#include "daemon/commands/command.hpp"
#include "daemon/config.hpp"
#include "daemon/control/control_api.hpp"
#include "daemon/control/control_socket.hpp"
#include "daemon/control/state_file.hpp"
#include "daemon/control/websocket_server.hpp"
#include "daemon/engine_factory.hpp"
#include "daemon/io/file_endpoints.hpp"
#include "daemon/control/file_watcher.hpp"
#include "daemon/pipeline/live_pipeline.hpp"
#include "dsp/coefficient_file.hpp"

namespace tapstream {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct RunArgs {
  std::string config;
  std::string input;
  std::string output;
  std::string input_device;
  std::string output_device;
};

// Command-line choices replace the configuration's endpoints.
void apply_overrides(LiveConfig& config, const RunArgs& args) {
  const auto device = [](EndpointConfig& endpoint, const std::string& selector) {
    endpoint = EndpointConfig{};
    int index = -1;
    if (!selector.empty() && selector.find_first_not_of("0123456789") == std::string::npos) {
      index = std::stoi(selector);
    }
    if (index >= 0) {
      endpoint.device_index = index;
    } else if (selector != "default") {
      endpoint.device_name = selector;
    }
  };
  if (!args.input_device.empty()) device(config.input, args.input_device);
  if (!args.output_device.empty()) device(config.output, args.output_device);
  if (!args.input.empty()) {
    const bool realtime = config.input.is_file() ? config.input.realtime : true;
    config.input = EndpointConfig{};
    config.input.file = fs::absolute(args.input);
    config.input.realtime = realtime;
  }
  if (!args.output.empty()) {
    config.output = EndpointConfig{};
    config.output.file = fs::absolute(args.output);
  }
  // Unpaced only makes sense with a file at both ends.
  if (config.input.is_file() && !config.output.is_file()) config.input.realtime = true;
}

std::string selector_of(const EndpointConfig& endpoint) {
  if (!endpoint.device_name.empty()) return endpoint.device_name;
  if (endpoint.device_index >= 0) return std::to_string(endpoint.device_index);
  return "default";
}

float gain_factor(double gain_db) {
  return static_cast<float>(std::pow(10.0, gain_db / 20.0));
}

CoefficientFileOptions file_options(const LiveConfig& config, std::size_t channels,
                                    std::size_t max_taps) {
  CoefficientFileOptions options;
  options.channels = channels;
  if (max_taps != 0) options.max_taps = max_taps;
  options.sample_rate = config.sample_rate;
  options.ignore_sample_rate = config.ignore_filter_sample_rate;
  return options;
}

// The bank a configuration names: one file for all channels or one per channel.
FilterBank load_configured_bank(const LiveConfig& config, std::size_t max_taps) {
  if (config.filter_files.size() == 1) {
    return load_filter_bank(config.filter_files.front(),
                            file_options(config, config.channels, max_taps))
        .scaled(gain_factor(config.gain_db));
  }
  std::vector<std::vector<float>> taps;
  std::vector<std::string> sources;
  for (const auto& file : config.filter_files) {
    const FilterBank one = load_filter_bank(file, file_options(config, 1, max_taps));
    taps.emplace_back(one.taps(0).begin(), one.taps(0).end());
    sources.push_back(file.string());
  }
  return FilterBank::per_channel(std::move(taps), std::move(sources))
      .scaled(gain_factor(config.gain_db));
}

// Every way a new filter arrives ends here: loaded and validated on the
// calling (control) thread, then posted to the engine and waited for. A bank
// that fails never reaches the mailbox, and the running one keeps running.
class FilterSwapper {
 public:
  FilterSwapper(LivePipeline& pipeline, const LiveConfig& config, FilterBank initial)
      : pipeline_(pipeline),
        config_(config),
        current_(std::make_shared<const FilterBank>(initial)) {}

  // Installs a whole new bank (SIGHUP, watcher of a shared file, ctl all).
  // Returns "" on success, else the reason.
  std::string install(const std::function<FilterBank()>& build, const std::string& what) {
    std::lock_guard lock(mutex_);
    std::shared_ptr<const FilterBank> bank;
    try {
      bank = std::make_shared<const FilterBank>(build());
      check(*bank);
    } catch (const std::exception& e) {
      spdlog::error("{} rejected, the running filters keep running: {}", what, e.what());
      return e.what();
    }
    const std::uint64_t sequence = pipeline_.mailbox().post(bank);
    if (!pipeline_.mailbox().wait_acknowledged(sequence, std::chrono::seconds(5))) {
      const std::string reason = pipeline_.mailbox().rejected() == sequence
                                     ? "the engine refused it (see the log)"
                                     : "the engine did not take it within 5 s";
      spdlog::error("{} not installed: {}", what, reason);
      return reason;
    }
    {
      std::lock_guard current_lock(current_mutex_);
      current_ = bank;
    }
    spdlog::info("{} installed at block {} ({} taps max)", what, pipeline_.stats().last_swap_block,
                 bank->max_taps());
    return {};
  }

  // `tapstream ctl load CHANNEL|all FILE`.
  std::string load(const std::string& channel, const fs::path& file) {
    const std::size_t channels = pipeline_.channels();
    if (channel == "all") {
      return install(
          [&] {
            return load_filter_bank(file,
                                    file_options(config_, channels, pipeline_.engine_max_taps()))
                .scaled(gain_factor(config_.gain_db));
          },
          fmt::format("filter {} for all channels", file.string()));
    }
    std::size_t index = 0;
    try {
      std::size_t used = 0;
      index = std::stoul(channel, &used);
      if (used != channel.size()) throw std::invalid_argument(channel);
    } catch (const std::exception&) {
      return fmt::format("channel '{}': expected a channel number or 'all'", channel);
    }
    if (index >= channels) {
      return fmt::format("channel {}: the stream has channels 0..{}", index, channels - 1);
    }
    return install(
        [&] {
          const FilterBank one =
              load_filter_bank(file, file_options(config_, 1, pipeline_.engine_max_taps()))
                  .scaled(gain_factor(config_.gain_db));
          std::shared_ptr<const FilterBank> base = current();
          std::vector<std::vector<float>> taps;
          std::vector<std::string> sources;
          for (std::size_t c = 0; c < channels; ++c) {
            const auto t = c == index ? one.taps(0) : base->taps(c);
            taps.emplace_back(t.begin(), t.end());
            sources.push_back(c == index ? file.string() : base->source(c));
          }
          return FilterBank::per_channel(std::move(taps), std::move(sources));
        },
        fmt::format("filter {} for channel {}", file.string(), index));
  }

  // config_ is written under both mutexes and read under either, so that
  // status (current_mutex_ only) never waits for a swap in progress.
  void set_config(const LiveConfig& config) {
    std::scoped_lock lock(mutex_, current_mutex_);
    config_ = config;
  }
  LiveConfig config() const {
    std::lock_guard lock(current_mutex_);
    return config_;
  }
  std::shared_ptr<const FilterBank> current() const {
    std::lock_guard lock(current_mutex_);
    return current_;
  }

 private:
  void check(const FilterBank& bank) const {
    if (bank.channels() != pipeline_.channels()) {
      throw std::invalid_argument(fmt::format("the bank has {} channels, the stream {}",
                                              bank.channels(), pipeline_.channels()));
    }
    if (bank.max_taps() > pipeline_.engine_max_taps()) {
      throw std::invalid_argument(fmt::format(
          "{} taps, more than the {} the engine was built for (raise [filter] max_taps)",
          bank.max_taps(), pipeline_.engine_max_taps()));
    }
  }

  LivePipeline& pipeline_;
  mutable std::mutex mutex_;  // one swap at a time
  LiveConfig config_;
  mutable std::mutex current_mutex_;
  std::shared_ptr<const FilterBank> current_;
};

// The device ends of the pipeline: PortAudio streams, reopened with back-off
// when they stop on their own (device unplugged, sound server restarted).
class DeviceLink {
 public:
  DeviceLink(const LiveConfig& config, LivePipeline& pipeline)
      : config_(config), pipeline_(pipeline) {}
  ~DeviceLink() { close(); }
  DeviceLink(const DeviceLink&) = delete;
  DeviceLink& operator=(const DeviceLink&) = delete;

  bool needed() const { return !config_.input.is_file() || !config_.output.is_file(); }
  const std::string& input_name() const { return input_name_; }
  const std::string& output_name() const { return output_name_; }

  void open() {
    library_ = std::make_unique<PortAudioLibrary>();
    const int channels = static_cast<int>(config_.channels);
    std::optional<AudioDeviceInfo> input, output;
    if (!config_.input.is_file()) {
      input = choose_audio_device(selector_of(config_.input), Direction::input, channels);
      input_name_ = input->name;
    }
    if (!config_.output.is_file()) {
      output = choose_audio_device(selector_of(config_.output), Direction::output, channels);
      output_name_ = output->name;
    }
    AudioStreamOptions options;
    options.channels = channels;
    options.sample_rate = config_.sample_rate;
    options.callback = &LivePipeline::device_callback;
    options.context = &pipeline_;
    if (input && output && input->host_api == output->host_api) {
      // One duplex stream: input and output share one clock and one callback.
      options.input_device = input->index;
      options.output_device = output->index;
      streams_.push_back(std::make_unique<AudioStream>(options));
    } else {
      if (input) {
        options.input_device = input->index;
        options.output_device.reset();
        streams_.push_back(std::make_unique<AudioStream>(options));
      }
      if (output) {
        options.input_device.reset();
        options.output_device = output->index;
        streams_.push_back(std::make_unique<AudioStream>(options));
      }
    }
    on_jack_ = (input && input->host_api.find("JACK") != std::string::npos) ||
               (output && output->host_api.find("JACK") != std::string::npos);
    for (auto& stream : streams_) stream->start();
    double device_latency = 0.0;
    for (auto& stream : streams_)
      device_latency += stream->input_latency() + stream->output_latency();
    spdlog::info(
        "devices open: input {}, output {} (PortAudio's device latency estimate {:.1f} ms)",
        input ? fmt::format("'{}'", input_name_) : "file",
        output ? fmt::format("'{}'", output_name_) : "file", 1000.0 * device_latency);
  }

  void close() {
    bool abandoned = false;
    for (auto& stream : streams_) {
      if (on_jack_ && !stream->active()) {
        // Its server is gone: closing would abort the process (see abandon()).
        stream->abandon();
        abandoned = true;
        continue;
      }
      try {
        stream->stop();
      } catch (const std::exception& e) {
        spdlog::warn("closing the audio stream: {}", e.what());
      }
    }
    streams_.clear();
    // Pa_Terminate would close the abandoned streams: keep the library up.
    if (abandoned) {
      static_cast<void>(library_.release());
    } else {
      library_.reset();
    }
  }

  // Starts the devices at a restart after a lost JACK server: a failure is
  // not fatal, supervise() retries with back-off from `backoff`.
  void open_or_retry(std::chrono::milliseconds backoff) {
    backoff_ = backoff;
    try {
      open();
      backoff_ = std::chrono::milliseconds(500);
    } catch (const std::exception& e) {
      close();
      retry_at_ = Clock::now() + backoff_;
      spdlog::warn("opening the audio device failed ({}); next try in {} ms", e.what(),
                   backoff_.count());
    }
  }

  // True once a JACK stream has died: PortAudio can only reach a restarted
  // JACK server from a fresh process (its JACK client cannot be reset).
  bool restart_needed() const { return restart_needed_; }
  std::chrono::milliseconds backoff() const { return backoff_; }

  // Called every tick by the main thread: reopens dead streams with back-off
  // (0.5 s doubling to 8 s). Xruns meanwhile are counted by the pipeline.
  void supervise() {
    if (!needed()) return;
    const auto now = Clock::now();
    if (!streams_.empty()) {
      bool alive = true;
      for (const auto& stream : streams_) alive = alive && stream->active();
      if (alive) {
        backoff_ = std::chrono::milliseconds(500);
        return;
      }
      if (on_jack_) {
        restart_needed_ = true;
        return;
      }
      spdlog::warn("audio device stopped; reopening in {} ms", backoff_.count());
      close();
      retry_at_ = now + backoff_;
      return;
    }
    if (now < retry_at_) return;
    try {
      open();
      backoff_ = std::chrono::milliseconds(500);
      spdlog::info("audio device reopened");
    } catch (const std::exception& e) {
      close();
      backoff_ = std::min(backoff_ * 2, std::chrono::milliseconds(8000));
      retry_at_ = now + backoff_;
      spdlog::warn("reopening the audio device failed ({}); next try in {} ms", e.what(),
                   backoff_.count());
    }
  }

 private:
  LiveConfig config_;
  LivePipeline& pipeline_;
  std::unique_ptr<PortAudioLibrary> library_;
  bool on_jack_ = false;
  bool restart_needed_ = false;
  std::vector<std::unique_ptr<AudioStream>> streams_;
  std::string input_name_;
  std::string output_name_;
  std::chrono::milliseconds backoff_{500};
  Clock::time_point retry_at_{};
};

// Blocks SIGINT, SIGTERM and SIGHUP in this thread and every thread started
// after it; they are then taken one by one with sigtimedwait.
class BlockedSignals {
 public:
  BlockedSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set_, &previous_);
  }
  ~BlockedSignals() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  // The next pending signal, or 0 after `timeout`.
  int wait(std::chrono::milliseconds timeout) {
    timespec ts{};
    ts.tv_sec = timeout.count() / 1000;
    ts.tv_nsec = (timeout.count() % 1000) * 1'000'000;
    const int signal = sigtimedwait(&set_, nullptr, &ts);
    return signal > 0 ? signal : 0;
  }

 private:
  sigset_t set_{};
  sigset_t previous_{};
};

void add_log_file(const fs::path& file) {
  if (file.empty()) return;
  auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(file.string());
  sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] %l: %v");
  spdlog::default_logger()->sinks().push_back(sink);
}

void log_xruns(const LiveStats& now, LiveStats& reported) {
  if (now.underruns != reported.underruns) {
    spdlog::warn("underruns: {} ({} frames of silence played so far)", now.underruns,
                 now.underrun_frames);
  }
  if (now.overruns != reported.overruns) {
    spdlog::warn("overruns: {} ({} input frames lost so far)", now.overruns, now.overrun_frames);
  }
  reported = now;
}

DaemonStatus make_status(const LivePipeline& pipeline, const FilterSwapper& swapper,
                         const LiveConfig& config, const std::string& input_name,
                         const std::string& output_name, Clock::time_point started) {
  DaemonStatus status;
  status.backend = pipeline.engine_name();
  status.engine = pipeline.engine_description();
  status.input_device = input_name.empty() ? config.input.describe() : input_name;
  status.output_device = output_name.empty() ? config.output.describe() : output_name;
  status.sample_rate = config.sample_rate;
  status.block_frames = config.block_frames;
  status.channels = config.channels;
  status.latency_frames = pipeline.latency_frames();
  const auto bank = swapper.current();
  for (std::size_t c = 0; c < bank->channels(); ++c) {
    status.filters.push_back({bank->tap_count(c), bank->source(c)});
  }
  const LiveStats stats = pipeline.stats();
  status.blocks = stats.blocks;
  status.underruns = stats.underruns;
  status.overruns = stats.overruns;
  status.swaps = stats.swaps;
  status.rejected_swaps = stats.rejected_swaps;
  status.uptime_s = std::chrono::duration<double>(Clock::now() - started).count();
  status.processing = pipeline.processing_times().summary();
  return status;
}

// Reloads the configured filters when one of their files is rewritten (the
// watcher reports a file only once it is completely written).
std::unique_ptr<FileWatcher> make_watcher(const LiveConfig& config, FilterSwapper& swapper,
                                          const LivePipeline& pipeline) {
  if (!config.watch_filters) return nullptr;
  auto watcher = std::make_unique<FileWatcher>(
      config.filter_files, [&swapper, &pipeline](const fs::path& file) {
        const LiveConfig current = swapper.config();
        swapper.install([&] { return load_configured_bank(current, pipeline.engine_max_taps()); },
                        fmt::format("filter file {} (changed on disk)", file.string()));
      });
  watcher->start();
  spdlog::info("watching {} filter file(s) for changes", config.filter_files.size());
  return watcher;
}

// The environment variable that tells a restarted daemon to retry its
// devices with back-off (value: the back-off in ms) instead of failing.
constexpr const char* device_retry_variable = "TAPSTREAM_DEVICE_RETRY_MS";

// Replaces this process with a fresh tapstream run (same arguments, same
// PID, so a service manager sees no exit). Returns only if exec fails.
void restart_self(std::chrono::milliseconds backoff) {
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> words;
  for (std::string word; std::getline(cmdline, word, '\0');) words.push_back(word);
  std::vector<char*> argv;
  for (auto& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  setenv(device_retry_variable, std::to_string(backoff.count()).c_str(), 1);
  spdlog::default_logger()->flush();
  execv("/proc/self/exe", argv.data());
  spdlog::error("restarting failed: execv: {}", std::strerror(errno));
}

// The page's files: [web] root, else installed beside the executable, else the source tree's.
fs::path web_root(const LiveConfig& config) {
  if (!config.web_root.empty()) return config.web_root;
  std::error_code error;
  const fs::path installed =
      fs::read_symlink("/proc/self/exe", error).parent_path().parent_path() / "share/tapstream/web";
  if (!error && fs::is_directory(installed, error)) return installed;
  return TAPSTREAM_WEB_SOURCE_ROOT;
}

// The API's view of the daemon (volume and meters it takes from the pipeline itself).
ApiHooks make_api_hooks(FilterSwapper& swapper, LivePipeline& pipeline, const DeviceLink& devices,
                        std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> log) {
  ApiHooks hooks;
  hooks.filters = [&swapper] { return swapper.current(); };
  hooks.load_filter = [&swapper](std::optional<std::size_t> channel, const fs::path& file) {
    return swapper.load(channel ? std::to_string(*channel) : "all", file);
  };
  hooks.config = [&swapper] { return swapper.config(); };
  hooks.apply_config = [&swapper, &pipeline](const LiveConfig& next,
                                             std::vector<std::string>& restart_needed) {
    const LiveConfig now = swapper.config();
    const auto differs = [&](bool changed, const char* key) {
      if (changed) restart_needed.emplace_back(key);
    };
    differs(next.sample_rate != now.sample_rate, "sample_rate");
    differs(next.block_frames != now.block_frames, "block_frames");
    differs(next.ring_margin_frames != now.ring_margin_frames, "ring_margin_frames");
    differs(next.input.describe() != now.input.describe(), "input");
    differs(next.output.describe() != now.output.describe(), "output");
    differs(next.filter_files != now.filter_files && next.watch_filters, "filter.watch");
    differs(next.web_port != now.web_port || next.web_address != now.web_address ||
                next.web_token != now.web_token,
            "web");
    const std::string error =
        swapper.install([&] { return load_configured_bank(next, pipeline.engine_max_taps()); },
                        "configuration filters (API)");
    if (error.empty()) swapper.set_config(next);
    return error;
  };
  hooks.devices = [&devices] {
    return std::make_pair(devices.input_name(), devices.output_name());
  };
  hooks.log = [log](std::size_t limit) { return log->last_formatted(limit); };
  return hooks;
}

DaemonState current_state(LivePipeline& pipeline, const FilterSwapper& swapper,
                          const ControlApi& api) {
  DaemonState state;
  const OutputStage& stage = pipeline.output_stage();
  state.master = level_of(stage, std::nullopt);
  for (std::size_t c = 0; c < stage.channels(); ++c) state.channels.push_back(level_of(stage, c));
  state.config_text = api.applied_config_text();
  const auto bank = swapper.current();
  for (std::size_t c = 0; c < bank->channels(); ++c) state.filters.push_back(bank->source(c));
  return state;
}

int run_daemon(RunArgs args) {
  // SIGHUP reads it again: keep its absolute name.
  args.config = fs::absolute(args.config).string();
  LiveConfig config = load_live_config(args.config);
  apply_overrides(config, args);
  spdlog::set_level(std::min(spdlog::get_level(), config.log_level));
  add_log_file(config.log_file);
  // The API's log view keeps the newest lines.
  auto log_ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000);
  log_ring->set_pattern("[%Y-%m-%d %H:%M:%S.%e] %l: %v");
  spdlog::default_logger()->sinks().push_back(log_ring);

  // What a person set at run time comes back from the state file.
  std::unique_ptr<StateFile> state_file;
  std::optional<DaemonState> saved;
  if (!config.state_file.empty()) {
    state_file = std::make_unique<StateFile>(config.state_file);
    try {
      saved = state_file->load();
    } catch (const std::exception& e) {
      spdlog::warn("{}; starting from the configuration", e.what());
    }
  }
  std::string restored_config_text;
  if (saved && !saved->config_text.empty()) {
    try {
      LiveConfig restored =
          parse_live_config(saved->config_text, fs::path(args.config).parent_path(),
                            "configuration in the state file");
      restored.config_file = config.config_file;
      restored.state_file = config.state_file;
      apply_overrides(restored, args);
      config = restored;
      restored_config_text = saved->config_text;
      spdlog::info("configuration restored from the state file {}", config.state_file.string());
    } catch (const std::exception& e) {
      spdlog::warn("the state file's configuration is not used: {}", e.what());
    }
  }

  // Signals are blocked before any thread (PortAudio's, the engine's) starts.
  BlockedSignals signals;
  if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0) {
    spdlog::debug("mlockall refused: pages of the audio path may be swapped out");
  }

  const FilterBank bank = load_configured_bank(config, config.engine.max_taps);
  EngineOptions engine_options = config.engine;
  engine_options.max_block_frames = config.block_frames;
  auto engine = make_engine(config.backend, bank, engine_options);
  spdlog::info("engine: {}", engine->description());

  LivePipelineOptions pipeline_options;
  pipeline_options.sample_rate = config.sample_rate;
  pipeline_options.block_frames = config.block_frames;
  pipeline_options.margin_frames = config.ring_margin_frames;
  LivePipeline pipeline(std::move(engine), pipeline_options);
  FilterSwapper swapper(pipeline, config, bank);

  std::unique_ptr<FileEndpoints> files;
  if (config.input.is_file() || config.output.is_file()) {
    FileEndpointOptions file_options;
    if (config.input.is_file()) file_options.input = config.input.file;
    if (config.output.is_file()) file_options.output = config.output.file;
    file_options.paced = config.input.realtime || !config.input.is_file();
    file_options.period_frames = config.block_frames;
    files = std::make_unique<FileEndpoints>(pipeline, file_options);
  }
  DeviceLink devices(config, pipeline);

  // The one number users tune for: printed on stdout, whatever the log level.
  std::printf("latency: %zu frames, %.3f ms (block %zu + ring margin %zu frames at %d Hz)\n",
              pipeline.latency_frames(), pipeline.latency_ms(), config.block_frames,
              config.ring_margin_frames, config.sample_rate);
  std::fflush(stdout);

  pipeline.start();
  if (devices.needed()) {
    if (const char* retry = std::getenv(device_retry_variable)) {
      const auto backoff = std::chrono::milliseconds(std::clamp(std::atoi(retry), 500, 8000));
      unsetenv(device_retry_variable);
      devices.open_or_retry(backoff);
    } else {
      devices.open();
    }
  }
  if (files) files->start();
  const auto started = Clock::now();

  ControlApi api(pipeline, make_api_hooks(swapper, pipeline, devices, log_ring),
                 config.state_file.empty() ? config.control_socket.parent_path() / "uploads"
                                           : config.state_file.parent_path() / "tapstream-uploads");
  if (!restored_config_text.empty()) api.remember_applied_config(restored_config_text);
  if (saved) {
    apply_levels(*saved, pipeline.output_stage());
    const auto bank = swapper.current();
    for (std::size_t c = 0; c < saved->filters.size() && c < bank->channels(); ++c) {
      const fs::path file = saved->filters[c];
      if (file.is_absolute() && file != bank->source(c) && fs::exists(file)) {
        const std::string error = swapper.load(std::to_string(c), file);
        if (!error.empty())
          spdlog::warn("state file: filter {} not restored: {}", file.string(), error);
      }
    }
  }
  if (state_file) {
    api.set_state_changed([&] {
      try {
        state_file->save(current_state(pipeline, swapper, api));
      } catch (const std::exception& e) {
        spdlog::error("{}", e.what());
      }
    });
  }
  std::unique_ptr<WebsocketServer> web;
  if (config.web_port != 0) {
    WebsocketServerOptions web_options;
    web_options.address = config.web_address;
    web_options.port = config.web_port;
    web_options.token = config.web_token;
    web_options.web_root = web_root(config);
    web = std::make_unique<WebsocketServer>(web_options, api);
    web->start();
    std::printf("web: http://%s:%d/\n", config.web_address.c_str(), web->port());
    std::fflush(stdout);
  }
  std::unique_ptr<ControlServer> control;
  if (!config.control_socket.empty()) {
    ControlHandlers handlers;
    handlers.status = [&] {
      return make_status(pipeline, swapper, swapper.config(), devices.input_name(),
                         devices.output_name(), started);
    };
    handlers.load = [&](std::optional<std::size_t> channel, const fs::path& file) {
      const std::string which = channel ? std::to_string(*channel) : "all";
      const std::string error = swapper.load(which, file);
      if (!error.empty()) throw std::runtime_error(error);
      return fmt::format("{} installed for {} at block {}", file.string(),
                         channel ? "channel " + which : "all channels",
                         pipeline.stats().last_swap_block);
    };
    handlers.json = [&api](std::string_view line) {
      ApiSession session;
      session.can_subscribe = false;
      return api.handle(line, session);
    };
    control = std::make_unique<ControlServer>(config.control_socket, std::move(handlers));
    control->start();
    spdlog::info("control socket {}", config.control_socket.string());
  }
  std::unique_ptr<FileWatcher> watcher = make_watcher(config, swapper, pipeline);
  spdlog::info("running: {} -> {} -> {}; {} ch, {} Hz, block {}", config.input.describe(),
               pipeline.engine_name(), config.output.describe(), config.channels,
               config.sample_rate, config.block_frames);

  LiveStats reported{};
  bool stopping = false;
  while (!stopping) {
    const int signal = signals.wait(std::chrono::milliseconds(100));
    if (signal == SIGINT || signal == SIGTERM) {
      spdlog::info("{}: stopping", signal == SIGINT ? "SIGINT" : "SIGTERM");
      api.set_stop_reason(signal == SIGINT ? "SIGINT" : "SIGTERM");
      stopping = true;
      break;
    }
    if (signal == SIGHUP) {
      spdlog::info("SIGHUP: reloading {}", args.config);
      try {
        LiveConfig reloaded = load_live_config(args.config);
        apply_overrides(reloaded, args);
        if (reloaded.sample_rate != config.sample_rate || reloaded.channels != config.channels ||
            reloaded.block_frames != config.block_frames ||
            reloaded.ring_margin_frames != config.ring_margin_frames ||
            reloaded.input.describe() != config.input.describe() ||
            reloaded.output.describe() != config.output.describe()) {
          spdlog::warn(
              "SIGHUP: rate, channels, block, margin and devices take effect only at a restart; "
              "reloading the filters and gain");
        }
        const std::string error = swapper.install(
            [&] { return load_configured_bank(reloaded, pipeline.engine_max_taps()); },
            "configuration filters");
        if (error.empty()) {
          const bool rewatch = reloaded.filter_files != config.filter_files ||
                               reloaded.watch_filters != config.watch_filters;
          swapper.set_config(reloaded);
          if (rewatch) {
            watcher.reset();
            watcher = make_watcher(reloaded, swapper, pipeline);
          }
          config.filter_files = reloaded.filter_files;
          config.watch_filters = reloaded.watch_filters;
          config.gain_db = reloaded.gain_db;
        }
      } catch (const std::exception& e) {
        spdlog::error("SIGHUP: {} rejected, the running configuration stays: {}", args.config,
                      e.what());
      }
    }
    devices.supervise();
    if (devices.restart_needed()) {
      spdlog::warn(
          "the JACK server went away; PortAudio reaches a new one only from a fresh process, "
          "so tapstream restarts itself (same arguments and PID) and retries with back-off");
      watcher.reset();
      if (web) web->stop();
      if (control) control->stop();
      if (files) files->stop();
      pipeline.stop();
      restart_self(std::min(devices.backoff() * 2, std::chrono::milliseconds(8000)));
      return 1;
    }
    log_xruns(pipeline.stats(), reported);
    if (files && files->finished()) {
      spdlog::info("end of {}", config.input.file.string());
      api.set_stop_reason("end of input");
      break;
    }
  }

  // Drain: let what came in before the stop leave the output, then close.
  if (stopping) {
    pipeline.begin_drain();
    const auto limit = Clock::now() + std::chrono::milliseconds(500) +
                       std::chrono::milliseconds(2 * static_cast<int>(pipeline.latency_ms()));
    while (!pipeline.drained() && Clock::now() < limit) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  watcher.reset();
  if (web) web->stop();
  if (control) control->stop();  // removes the socket file
  devices.close();
  if (files) files->stop();
  pipeline.stop();
  const LiveStats stats = pipeline.stats();
  spdlog::info(
      "stopped: {} blocks, {} frames in, {} out, underruns {}, overruns {}, swaps {}, "
      "rejected swaps {}",
      stats.blocks, stats.frames_in, stats.frames_out, stats.underruns, stats.overruns, stats.swaps,
      stats.rejected_swaps);
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto* sub = app.add_subcommand("run", "Run the live daemon: filter a device or file stream");
  sub->add_option("--config", args->config, "TOML configuration (see config/live-default.toml)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--input", args->input, "Read this sound file instead of the input device");
  sub->add_option("--output", args->output, "Write this sound file instead of the output device");
  sub->add_option("--input-device", args->input_device, "Input device: name, part of it, or index");
  sub->add_option("--output-device", args->output_device,
                  "Output device: name, part of it, or index");
  sub->get_option("--input")->excludes(sub->get_option("--input-device"));
  sub->get_option("--output")->excludes(sub->get_option("--output-device"));
  return {sub, [args] { return run_daemon(*args); }};
}

}  // namespace tapstream

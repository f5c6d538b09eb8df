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
// back into the Swapper (daemon/control/swapper.hpp), which serialises them
// with a mutex (none of that is on the audio path: the engine
// only polls the mailbox).

#include <fmt/format.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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

#include "daemon/commands/command.hpp"
#include "daemon/config/config.hpp"
#include "daemon/config/config_keys.hpp"
#include "daemon/control/control_api.hpp"
#include "daemon/control/control_socket.hpp"
#include "daemon/control/file_watcher.hpp"
#include "daemon/control/state_file.hpp"
#include "daemon/control/swapper.hpp"
#include "daemon/control/websocket_server.hpp"
#include "daemon/engine_factory.hpp"
#include "daemon/io/audio_device.hpp"
#include "daemon/io/file_endpoints.hpp"
#include "daemon/pipeline/device_change.hpp"
#include "daemon/pipeline/live_pipeline.hpp"
#include "dsp/files/coefficient_file.hpp"
#include "dsp/realtime/memory_lock.hpp"

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
  std::string latency;  // "", "buffered" or "zero"
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
  if (!args.latency.empty()) {
    config.latency = args.latency == "zero" ? LatencyMode::zero : LatencyMode::buffered;
  }
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

// The devices a configuration names and the streams to open on them, checked
// against the sample rate (a PortAudioLibrary must be alive). Throws
// AudioDeviceError naming a rate the devices refuse and the rates they offer.
struct DevicePlan {
  std::optional<AudioDeviceInfo> input;
  std::optional<AudioDeviceInfo> output;
  std::vector<AudioStreamOptions> streams;  // without callback
};

DevicePlan plan_devices(const LiveConfig& config) {
  DevicePlan plan;
  const int inputs = static_cast<int>(config.input_channels());
  const int outputs = static_cast<int>(config.output_channels());
  // A device short of channels: say which matrix wants them.
  const auto choose = [&](const EndpointConfig& endpoint, Direction direction, int channels) {
    try {
      return choose_audio_device(selector_of(endpoint), direction, channels);
    } catch (const AudioDeviceError& e) {
      if (!config.has_matrix()) throw;
      throw AudioDeviceError(fmt::format("{} (the matrix {} has {} inputs and {} outputs)",
                                         e.what(), config.matrix_file.string(), inputs, outputs));
    }
  };
  if (!config.input.is_file()) plan.input = choose(config.input, Direction::input, inputs);
  if (!config.output.is_file()) plan.output = choose(config.output, Direction::output, outputs);
  AudioStreamOptions options;
  options.input_channels = inputs;
  options.output_channels = outputs;
  options.sample_rate = config.sample_rate;
  if (plan.input && plan.output && plan.input->host_api == plan.output->host_api) {
    // One duplex stream: input and output share one clock and one callback.
    options.input_device = plan.input->index;
    options.output_device = plan.output->index;
    plan.streams.push_back(options);
  } else {
    if (plan.input) {
      options.input_device = plan.input->index;
      options.output_device.reset();
      plan.streams.push_back(options);
    }
    if (plan.output) {
      options.input_device.reset();
      options.output_device = plan.output->index;
      plan.streams.push_back(options);
    }
  }
  for (const auto& stream : plan.streams) {
    if (sample_rate_supported(stream)) continue;
    std::string devices;
    for (const auto& device : {stream.input_device ? plan.input : std::nullopt,
                               stream.output_device ? plan.output : std::nullopt}) {
      if (!device) continue;
      const std::string name = fmt::format("'{}' ({})", device->name, device->host_api);
      if (devices.find(name) == std::string::npos)
        devices += (devices.empty() ? "" : " and ") + name;
    }
    std::string offered;
    for (const int rate : offered_sample_rates(stream)) {
      offered += (offered.empty() ? "" : ", ") + std::to_string(rate);
    }
    throw AudioDeviceError(fmt::format(
        "sample_rate = {} ({}): the device {} does not run at {} Hz; it offers {}",
        config.sample_rate,
        config.config_file.empty() ? std::string("configuration") : config.config_file.string(),
        devices, config.sample_rate,
        offered.empty() ? std::string("none of the standard rates from 8000 to 384000 Hz")
                        : offered + " Hz"));
  }
  return plan;
}

// The rate the configuration's devices run at (sample_rate = "device"): the
// output device's default rate (a JACK server's rate under JACK), else the
// input device's. A PortAudioLibrary must be alive. Throws AudioDeviceError.
int device_rate(const LiveConfig& config) {
  const bool output = !config.output.is_file();
  const AudioDeviceInfo device =
      output ? choose_audio_device(selector_of(config.output), Direction::output,
                                   static_cast<int>(config.output_channels()))
             : choose_audio_device(selector_of(config.input), Direction::input,
                                   static_cast<int>(config.input_channels()));
  const auto rate = static_cast<int>(std::lround(device.default_sample_rate));
  if (rate < 1000 || rate > 768000) {
    throw AudioDeviceError(
        fmt::format("sample_rate = \"device\": the {} device '{}' says it runs at "
                    "{} Hz, outside 1000..768000",
                    output ? "output" : "input", device.name, rate));
  }
  return rate;
}

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

  // Opens the streams; false (nothing opened) when, with sample_rate =
  // "device", the device runs at another rate than the filters were read for:
  // rate_change() then says which.
  bool open() {
    library_ = std::make_unique<PortAudioLibrary>(config_.jack.client_name);
    if (config_.sample_rate_from_device) {
      const int rate = device_rate(config_);
      if (rate != config_.sample_rate) {
        rate_change_ = DeviceChange{DeviceChangeKind::rate, std::size_t(config_.sample_rate),
                                    std::size_t(rate)};
        library_.reset();
        return false;
      }
    }
    const DevicePlan plan = plan_devices(config_);
    const auto& input = plan.input;
    const auto& output = plan.output;
    if (input) input_name_ = input->name;
    if (output) output_name_ = output->name;
    for (AudioStreamOptions options : plan.streams) {
      options.callback = &LivePipeline::device_callback;
      options.context = &pipeline_;
      streams_.push_back(std::make_unique<AudioStream>(options));
    }
    on_jack_ = (input && input->host_api.find("JACK") != std::string::npos) ||
               (output && output->host_api.find("JACK") != std::string::npos);
    for (auto& stream : streams_) stream->start();
    std::string client;
    if (on_jack_) {
      client = jack_client_name();
      const bool jack_input = input && input->host_api.find("JACK") != std::string::npos;
      const bool jack_output = output && output->host_api.find("JACK") != std::string::npos;
      apply_jack_connections(config_.jack, client, jack_input ? config_.input_channels() : 0,
                             jack_output ? config_.output_channels() : 0);
    }
    double device_latency = 0.0;
    for (auto& stream : streams_)
      device_latency += stream->input_latency() + stream->output_latency();
    spdlog::info(
        "devices open: input {}, output {} (PortAudio's device latency estimate {:.1f} ms){}",
        input ? fmt::format("'{}'", input_name_) : "file",
        output ? fmt::format("'{}'", output_name_) : "file", 1000.0 * device_latency,
        client.empty() ? std::string() : fmt::format("; JACK client '{}'", client));
    return true;
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
      if (open()) backoff_ = std::chrono::milliseconds(500);
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
  // The device's rate when, with sample_rate = "device", it is not the one
  // the filters were read for (daemon/pipeline/device_change.hpp); nothing
  // is open while it says so.
  const std::optional<DeviceChange>& rate_change() const { return rate_change_; }

  // Called every tick by the main thread: reopens dead streams with back-off
  // (0.5 s doubling to 4 s, so that a server's or device's return is seen
  // within 4 s). Xruns meanwhile are counted by the pipeline.
  void supervise() {
    if (!needed() || rate_change_) return;
    const auto now = Clock::now();
    if (!streams_.empty()) {
      bool alive = true;
      for (const auto& stream : streams_) alive = alive && stream->active();
      if (alive) {
        backoff_ = std::chrono::milliseconds(500);
        // A JACK (or PipeWire) server may change its rate under the stream:
        // the pipeline reports it as a DeviceChange, which the main loop
        // follows (a restart in place with sample_rate = "device").
        pipeline_.note_device_rate(static_cast<int>(std::lround(streams_.front()->sample_rate())));
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
      if (!open()) return;  // at another rate: format_change() says which
      backoff_ = std::chrono::milliseconds(500);
      spdlog::info("audio device reopened");
    } catch (const std::exception& e) {
      close();
      backoff_ = std::min(backoff_ * 2, max_backoff);
      retry_at_ = now + backoff_;
      spdlog::warn("reopening the audio device failed ({}); next try in {} ms", e.what(),
                   backoff_.count());
    }
  }

 private:
  LiveConfig config_;
  LivePipeline& pipeline_;
  std::unique_ptr<PortAudioLibrary> library_;
  static constexpr std::chrono::milliseconds max_backoff{4000};
  bool on_jack_ = false;
  bool restart_needed_ = false;
  std::optional<DeviceChange> rate_change_;
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

// Logs a change of the device's stream and what the pipeline does about it;
// false when the daemon cannot go on with it and stops.
bool follow_device_change(const DeviceChange& change, const LivePipeline& pipeline) {
  if (change.kind == DeviceChangeKind::rate) {
    spdlog::error(
        "the device's sample rate changed: {} -> {} Hz, but the filters run at {} Hz "
        "(sample_rate = {}): stopping cleanly; sample_rate = \"device\" follows the server's "
        "rate, or set the server back to {} Hz",
        change.from, change.to, pipeline.sample_rate(), pipeline.sample_rate(),
        pipeline.sample_rate());
    return false;
  }
  const double period_ms = 1000.0 * double(change.to) / pipeline.sample_rate();
  if (change.from == 0) {
    spdlog::info("device period: {} frames ({:.3f} ms at {} Hz)", change.to, period_ms,
                 pipeline.sample_rate());
    return true;
  }
  spdlog::info("device period changed: {} -> {} frames ({:.3f} ms at {} Hz), followed", change.from,
               change.to, period_ms, pipeline.sample_rate());
  if (pipeline.latency_mode() == LatencyMode::zero) {
    if (pipeline.engine_in_callback()) {
      spdlog::info(
          "latency: 0 frames added (same-period mode; the engine in the callback follows "
          "the period)");
    } else {
      spdlog::info(
          "latency: 0 frames added (same-period mode; the engine thread keeps its "
          "{}-frame block)",
          pipeline.block_frames());
    }
    return true;
  }
  spdlog::info("latency: {} frames, {:.3f} ms (buffered mode keeps its {}-frame block)",
               pipeline.latency_frames(), pipeline.latency_ms(), pipeline.block_frames());
  if (change.to > pipeline.latency_frames()) {
    spdlog::warn(
        "the period ({} frames) is longer than the buffered latency ({} frames): expect underruns "
        "(raise block_frames or ring_margin_frames)",
        change.to, pipeline.latency_frames());
  }
  return true;
}

// The device callback's scheduling, once it is known and whenever it changes.
void log_callback_scheduling(const LivePipeline& pipeline, CallbackScheduling& reported,
                             std::size_t period_frames) {
  const CallbackScheduling now = pipeline.callback_scheduling();
  if (now.thread_id == 0 ||
      (now.thread_id == reported.thread_id && now.priority == reported.priority &&
       now.raise_error == reported.raise_error)) {
    return;
  }
  reported = now;
  const double period_us = 1e6 * double(period_frames) / pipeline.sample_rate();
  if (now.raise_error != 0) {
    spdlog::warn(
        "audio callback: real-time scheduling refused ({}): the engine runs in the device's "
        "callback at normal priority, where any process on the machine may preempt it for "
        "milliseconds of a {:.0f} us period (late periods); run the JACK server real-time "
        "(jackd -R) or grant rtprio (limits.d, LimitRTPRIO= in a system unit)",
        std::strerror(now.raise_error), period_us);
  } else if (now.raised) {
    spdlog::info(
        "audio callback: SCHED_FIFO priority {}, raised by tapstream: the engine runs in the "
        "device's callback, which the device left at normal priority",
        now.priority);
  } else if (now.priority > 0) {
    spdlog::info("audio callback: SCHED_FIFO priority {}, the device's", now.priority);
  } else {
    spdlog::info("audio callback: normal priority; the engine runs on its own thread");
  }
}

void log_xruns(const LiveStats& now, LiveStats& reported) {
  if (now.late_periods != reported.late_periods) {
    spdlog::warn("late periods: {} (their output missed the deadline and played as silence)",
                 now.late_periods);
  }
  if (now.underruns != reported.underruns) {
    spdlog::warn("underruns: {} ({} frames of silence played so far)", now.underruns,
                 now.underrun_frames);
  }
  if (now.overruns != reported.overruns) {
    spdlog::warn("overruns: {} ({} input frames lost so far)", now.overruns, now.overrun_frames);
  }
  reported = now;
}

DaemonStatus make_status(const LivePipeline& pipeline, const Swapper& swapper,
                         const LiveConfig& config, const std::string& input_name,
                         const std::string& output_name, Clock::time_point started) {
  DaemonStatus status;
  status.backend = pipeline.engine_name();
  status.engine = pipeline.engine_description();
  status.input_device = input_name.empty() ? config.input.describe() : input_name;
  status.output_device = output_name.empty() ? config.output.describe() : output_name;
  status.sample_rate = config.sample_rate;
  status.sample_rate_from = config.sample_rate_from_device ? "device" : "configuration";
  status.block_frames = pipeline.engine_block_frames();
  status.period_frames = pipeline.device_period_frames();
  status.channels = pipeline.output_channels();
  status.input_channels = pipeline.input_channels();
  status.latency_frames = pipeline.latency_frames();
  status.latency_mode = pipeline.latency_mode() == LatencyMode::zero ? "zero" : "buffered";
  // The file in use: a "$samplerate$" in the configured name resolved.
  if (!swapper.matrix_file().empty())
    status.matrix_file = swapper.in_force(swapper.matrix_file()).string();
  for (const MatrixPath& path : swapper.current()->paths()) {
    status.paths.push_back({path.input, path.output, path.source, path.taps.size(), path.gain_db,
                            path.delay_frames, path.invert});
  }
  const LiveStats stats = pipeline.stats();
  status.blocks = stats.blocks;
  status.underruns = stats.underruns;
  status.overruns = stats.overruns;
  status.late_periods = stats.late_periods;
  status.late_unstarted = stats.late_unstarted;
  status.nonfinite_inputs = stats.nonfinite_inputs;
  status.period_changes = stats.period_changes;
  status.replans = stats.replans;
  status.swaps = stats.swaps;
  status.rejected_swaps = swapper.rejected();
  status.uptime_s = std::chrono::duration<double>(Clock::now() - started).count();
  status.processing = pipeline.processing_times().summary();
  const CallbackScheduling callback = pipeline.callback_scheduling();
  status.callback_thread = callback.thread_id;
  status.callback_priority = callback.priority;
  status.callback_raised = callback.raised;
  status.callback_raise_error =
      callback.raise_error != 0 ? std::strerror(callback.raise_error) : "";
  return status;
}

// Reloads the filters when one of `files` is rewritten (the watcher reports
// a file only once it is completely written).
std::unique_ptr<FileWatcher> make_watcher(const std::vector<fs::path>& files, Swapper& swapper) {
  if (files.empty()) return nullptr;
  auto watcher = std::make_unique<FileWatcher>(files, [&swapper](const fs::path& file) {
    std::string summary;
    if (swapper.reload(swapper.config(), &summary).empty()) {
      spdlog::info("filter file {} written on disk: {}", file.string(), summary);
    }
  });
  watcher->start();
  spdlog::info("watching {} filter file(s) for changes", files.size());
  return watcher;
}

// The environment variable that tells a restarted daemon to retry its
// devices with back-off (value: the back-off in ms) instead of failing.
constexpr const char* device_retry_variable = "TAPSTREAM_DEVICE_RETRY_MS";
// ...and the one that names the output file the daemon committed before it
// restarted, so that the restarted daemon continues it instead of starting
// it anew.
constexpr const char* continued_output_variable = "TAPSTREAM_CONTINUE_OUTPUT";
// ...and the one that holds the latency line it printed (see run_daemon).
constexpr const char* printed_latency_variable = "TAPSTREAM_PRINTED_LATENCY";
// ...and the one that holds the rate it ran at (sample_rate = "device"): the
// restarted daemon's rate until its device says its own.
constexpr const char* rate_in_force_variable = "TAPSTREAM_RATE_IN_FORCE";

// Replaces this process with a fresh tapstream run (same arguments, same
// PID, so a service manager sees no exit). Returns only if exec fails.
void restart_self(std::chrono::milliseconds backoff, const fs::path& committed_output) {
  if (!committed_output.empty()) setenv(continued_output_variable, committed_output.c_str(), 1);
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

// The input device has stopped (closed, or its server gone): the file output
// takes every frame it received, then stops (bounded, in case the engine is
// stuck).
void finish_file_output(LivePipeline& pipeline, FileEndpoints& files) {
  files.finish_after(static_cast<std::int64_t>(pipeline.stats().frames_in));
  pipeline.flush_input();
  const auto limit = Clock::now() + std::chrono::milliseconds(500) +
                     std::chrono::milliseconds(2 * static_cast<int>(pipeline.latency_ms()));
  while (!files.finished() && Clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
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

// Throws what a start would throw for `config`'s filters: a file that does
// not load, or filters longer than its [filter] max_taps.
void check_startable(const LiveConfig& config) {
  engine_max_taps(config, load_configured_filters(config).max_filter_taps());
}

// The API's view of the daemon (volume and meters it takes from the pipeline itself).
ApiHooks make_api_hooks(Swapper& swapper, const RunArgs& args,
                        std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> log) {
  ApiHooks hooks;
  hooks.matrix = [&swapper] { return swapper.current(); };
  hooks.load = [&swapper](const LoadRequest& request) { return swapper.load(request); };
  hooks.set_paths = [&swapper](const auto& taps, const std::string& what) {
    return swapper.set_paths(taps, what);
  };
  hooks.config = [&swapper] { return swapper.config(); };
  // The command line's --input, --output and --latency hold over the API's
  // configuration as over the file's.
  hooks.apply_config = [&swapper, &args](const LiveConfig& next,
                                         std::vector<std::string>& restart_needed,
                                         std::string& summary) {
    LiveConfig effective = next;
    apply_overrides(effective, args);
    const LiveConfig running = swapper.config();
    restart_needed = config_changes(running, effective).restart_needed();
    // As a reload: the filters and gain of `next`, re-reading only what changed.
    return swapper.reload(with_reloaded_keys(running, effective), &summary);
  };
  hooks.check_start = [&args](const LiveConfig& next) {
    LiveConfig effective = next;
    apply_overrides(effective, args);
    try {
      check_startable(effective);
      return std::string();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  };
  hooks.log = [log](std::size_t limit) { return log->last_formatted(limit); };
  return hooks;
}

DaemonState current_state(LivePipeline& pipeline, const Swapper& swapper, const ControlApi& api) {
  DaemonState state;
  const OutputStage& stage = pipeline.output_stage();
  state.master = level_of(stage, std::nullopt);
  for (std::size_t c = 0; c < stage.channels(); ++c) state.channels.push_back(level_of(stage, c));
  state.config_text = api.applied_config_text();
  // A matrix comes back from its configuration alone.
  if (swapper.per_channel()) {
    for (const MatrixPath& path : swapper.current()->paths()) state.filters.push_back(path.source);
  }
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
  // What the file says: the start falls back to it when the configuration
  // the API stored does not start (a rate the device refuses, an engine the
  // machine lacks), so that no stored configuration keeps the daemon down.
  const LiveConfig file_config = config;
  const auto fall_back = [&](const std::exception& e) {
    spdlog::warn("the state file's configuration does not start ({}); starting from {}", e.what(),
                 args.config);
    config = file_config;
    restored_config_text.clear();
  };
  if (saved && !saved->config_text.empty()) {
    try {
      LiveConfig restored =
          parse_live_config(saved->config_text, fs::path(args.config).parent_path(),
                            "configuration in the state file");
      restored.config_file = config.config_file;
      apply_overrides(restored, args);
      // The keys only the file changes come from the file: the API could not
      // change them, so a difference means the file changed since.
      const auto file_only = config_changes(config, restored).file_only;
      if (!file_only.empty()) {
        throw std::runtime_error(fmt::format("{} changed in {} since the API stored it",
                                             join_keys(file_only), args.config));
      }
      check_startable(restored);
      config = restored;
      restored_config_text = saved->config_text;
      spdlog::info("configuration restored from the state file {}", config.state_file.string());
    } catch (const std::exception& e) {
      spdlog::warn("the state file's configuration is not used: {}", e.what());
    }
  }

  // Signals are blocked before any thread (PortAudio's, the engine's) starts.
  BlockedSignals signals;

  // A device that refuses the sample rate is said before anything else. The
  // library stays up until the devices open (PortAudio counts its users, so
  // they are not scanned twice). A restarted daemon waits for its devices
  // instead (see DeviceLink::open_or_retry).
  const char* device_retry = std::getenv(device_retry_variable);
  const bool uses_a_device = !config.input.is_file() || !config.output.is_file();
  if (config.sample_rate_from_device && !uses_a_device) {
    throw ConfigError(fmt::format(
        "sample_rate = \"device\" ({}): input and output are files, there is no device to take "
        "the rate from (give the rate in Hz)",
        args.config));
  }
  // sample_rate = "device": the rate in force is the device's, found before
  // any filter is read.
  const auto take_device_rate = [&config] {
    if (!config.sample_rate_from_device) return;
    config.sample_rate = device_rate(config);
    spdlog::info("sample_rate = \"device\": the device runs at {} Hz", config.sample_rate);
  };
  std::unique_ptr<PortAudioLibrary> early_library;
  if (uses_a_device && device_retry == nullptr) {
    early_library = std::make_unique<PortAudioLibrary>(config.jack.client_name);
    try {
      take_device_rate();
      plan_devices(config);
    } catch (const std::exception& e) {
      if (restored_config_text.empty()) throw;
      fall_back(e);
      take_device_rate();
      plan_devices(config);
    }
  } else if (uses_a_device && config.sample_rate_from_device) {
    // Restarted (a lost server, a new rate): the device may not be back yet.
    // Until it says its rate, the one it ran at before; DeviceLink::open
    // reports a different one when it comes back (another restart, at once).
    try {
      const PortAudioLibrary probe(config.jack.client_name);
      take_device_rate();
    } catch (const std::exception& e) {
      if (const char* before = std::getenv(rate_in_force_variable)) {
        config.sample_rate = std::clamp(std::atoi(before), 1000, 768000);
      }
      spdlog::info("sample_rate = \"device\": the device is not there yet ({}); {} Hz until it is",
                   e.what(), config.sample_rate);
    }
  }
  fs::path continued_output;
  if (const char* committed = std::getenv(continued_output_variable)) {
    if (config.output.is_file() && fs::path(committed) == config.output.file)
      continued_output = committed;
    unsetenv(continued_output_variable);
  }
  // Every swap builds banks of megabytes on one thread and frees the old ones
  // on another. glibc's default raises its mmap threshold to the largest
  // block freed, so later banks come from the arenas' heaps, where
  // fragmentation lifts the top now and then; under mlockall those pages
  // never go back, and resident memory grew in steps of a few MiB over a
  // 10-minute run of swaps every 3 s. A fixed threshold maps every large
  // block by itself and unmaps it when freed.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  const MemoryLock memory_lock = lock_all_memory();
  if (memory_lock.locked) {
    spdlog::debug("{}", describe(memory_lock));
  } else {
    spdlog::warn("{}", describe(memory_lock));
  }

  std::unique_ptr<LivePipeline> live;
  std::unique_ptr<Swapper> filters;
  const auto build_pipeline = [&] {
    EngineOptions engine_options = config.engine;
    engine_options.max_block_frames = config.block_frames;
    // Same-period mode runs the CPU engine inside the callback (its non-uniform
    // form), and the CPU matrix engine where its cost model says a call fits
    // the period; the CUDA engines keep the engine thread's hand-off.
    engine_options.realtime_calls = config.latency == LatencyMode::zero;
    engine_options.sample_rate = config.sample_rate;
    LivePipelineOptions pipeline_options;
    pipeline_options.sample_rate = config.sample_rate;
    pipeline_options.block_frames = config.block_frames;
    pipeline_options.margin_frames = config.ring_margin_frames;
    pipeline_options.latency = config.latency;
    pipeline_options.engine_spin = config.engine_spin;
    RoutingMatrix matrix = load_configured_filters(config);
    engine_options.max_taps = engine_max_taps(config, matrix.max_filter_taps());
    if (!config.devices.empty()) {
      try {
        engine_options.devices = engine_devices(config.backend, config.devices);
      } catch (const std::invalid_argument& e) {
        throw ConfigError(config.config_file.string() +
                          ": engine.devices = " + config.devices.text() + ": " + e.what());
      }
    }
    pipeline_options.response_frames = matrix.max_taps();
    // A device period that changes re-plans the engine in the callback for
    // it, with the filters running then (on the pipeline's swap thread).
    pipeline_options.engine_for_block = [backend = config.backend, engine_options,
                                         &filters](std::size_t block_frames) {
      EngineOptions options = engine_options;
      options.max_block_frames = block_frames;
      return make_engine(backend, *filters->current(), options);
    };
    auto engine = make_engine(config.backend, matrix, engine_options);
    spdlog::info("engine: {}", engine->description());
    live = std::make_unique<LivePipeline>(std::move(engine), pipeline_options);
    filters = std::make_unique<Swapper>(*live, config, std::move(matrix));
  };
  try {
    build_pipeline();
  } catch (const std::exception& e) {
    if (restored_config_text.empty()) throw;
    filters.reset();
    live.reset();
    fall_back(e);
    build_pipeline();
  }
  LivePipeline& pipeline = *live;
  Swapper& swapper = *filters;

  std::unique_ptr<FileEndpoints> files;
  if (config.input.is_file() || config.output.is_file()) {
    FileEndpointOptions file_options;
    if (config.input.is_file()) file_options.input = config.input.file;
    if (config.output.is_file()) file_options.output = config.output.file;
    // A file output after an input device follows the device's clock.
    file_options.paced = config.input.is_file() && config.input.realtime;
    file_options.period_frames = config.block_frames;
    file_options.continue_output = !continued_output.empty();
    files = std::make_unique<FileEndpoints>(pipeline, file_options);
  }
  DeviceLink devices(config, pipeline);

  // The one number users tune for: printed on stdout, whatever the log level;
  // a restarted daemon (restart_self) prints it again only when it changed.
  const std::string latency_line =
      config.latency == LatencyMode::zero
          ? fmt::format(
                "latency: 0 frames, 0.000 ms added (same-period mode: each period's output leaves "
                "in its own callback; engine block {} frames at {} Hz; {})\n",
                config.block_frames, config.sample_rate,
                pipeline.engine_in_callback() ? "engine inside the callback"
                                              : "engine thread, handed each period")
          : fmt::format(
                "latency: {} frames, {:.3f} ms (block {} + ring margin {} frames at {} Hz)\n",
                pipeline.latency_frames(), pipeline.latency_ms(), config.block_frames,
                config.ring_margin_frames, config.sample_rate);
  const char* printed_latency = std::getenv(printed_latency_variable);
  if (printed_latency == nullptr || latency_line != printed_latency) {
    std::fputs(latency_line.c_str(), stdout);
    std::fflush(stdout);
    setenv(printed_latency_variable, latency_line.c_str(), 1);
  }

  pipeline.start();
  if (devices.needed()) {
    if (device_retry != nullptr) {
      const auto backoff =
          std::chrono::milliseconds(std::clamp(std::atoi(device_retry), 500, 4000));
      unsetenv(device_retry_variable);
      devices.open_or_retry(backoff);
    } else {
      devices.open();
    }
  }
  early_library.reset();
  if (files) files->start();
  const auto started = Clock::now();
  std::unique_ptr<FileWatcher> watcher;
  std::vector<fs::path> watching;  // what `watcher` watches; under reload_mutex
  std::atomic<bool> stop_requested{false};
  // SIGHUP (main thread) and `ctl reload` (control thread): reads the
  // configuration again and takes its filters and gain, re-reading only the
  // files that changed. Returns what it did; throws with the reason.
  std::mutex reload_mutex;
  // Under reload_mutex: makes the watcher follow the files the filters come
  // from now (a reload, or a `ctl load` of a matrix or path, changes them).
  const auto follow_filter_files = [&] {
    std::vector<fs::path> wanted;
    // The swapper's: the API's apply_config changes [filter] watch too.
    if (swapper.config().watch_filters) wanted = swapper.watched_files();
    if (wanted == watching) return;
    watcher.reset();
    watching = wanted;
    try {
      watcher = make_watcher(wanted, swapper);
    } catch (const std::exception& e) {
      spdlog::error("filter files are not watched: {}", e.what());
    }
  };
  const std::function<std::string()> reload_configuration = [&] {
    std::lock_guard lock(reload_mutex);
    LiveConfig reloaded;
    try {
      reloaded = load_live_config(args.config);
      apply_overrides(reloaded, args);
    } catch (const std::exception& e) {
      throw std::runtime_error(
          swapper.reject(args.config, std::string("the running configuration stays: ") + e.what()));
    }
    std::string restart_note;
    const LiveConfig running = swapper.config();
    const auto restart_needed = config_changes(running, reloaded).restart_needed();
    if (!restart_needed.empty()) {
      restart_note = fmt::format(" ({} change{} only at a restart)", join_keys(restart_needed),
                                 restart_needed.size() == 1 ? "s" : "");
      spdlog::warn("reload: {}", restart_note.substr(2, restart_note.size() - 3));
    }
    std::string summary;
    const std::string error = swapper.reload(with_reloaded_keys(running, reloaded), &summary);
    if (!error.empty()) throw std::runtime_error(error);
    config.filter_files = reloaded.filter_files;
    config.matrix_file = reloaded.matrix_file;
    config.watch_filters = reloaded.watch_filters;
    follow_filter_files();
    config.gain_db = reloaded.gain_db;
    return fmt::format("reloaded {}: {}{}", args.config, summary, restart_note);
  };

  ApiHooks hooks = make_api_hooks(swapper, args, log_ring);
  hooks.status = [&] {
    DaemonStatus status = make_status(pipeline, swapper, swapper.config(), devices.input_name(),
                                      devices.output_name(), started);
    status.memory_locked = memory_lock.locked;
    return status;
  };
  hooks.reload = reload_configuration;
  hooks.stop = [&] {
    stop_requested.store(true);
    return std::string("stopping (draining the output first)");
  };
  ControlApi api(pipeline, std::move(hooks),
                 config.state_file.empty() ? config.control_socket.parent_path() / "uploads"
                                           : config.state_file.parent_path() / "tapstream-uploads");
  if (!restored_config_text.empty()) api.remember_applied_config(restored_config_text);
  if (saved) {
    apply_levels(*saved, pipeline.output_stage());
    const auto matrix = swapper.per_channel() ? swapper.current() : nullptr;
    for (std::size_t c = 0; matrix && c < saved->filters.size() && c < matrix->inputs(); ++c) {
      const fs::path file = saved->filters[c];
      if (file.is_absolute() && file != matrix->paths()[c].source && fs::exists(file)) {
        const std::string error = swapper.load(LoadRequest::channel(c, file));
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
    web_options.hosts = config.web_hosts;
    web_options.web_root = web_root(config);
    web_options.idle_timeout = config.web_idle_timeout;
    web_options.max_messages_per_second = config.web_requests_per_second;
    web = std::make_unique<WebsocketServer>(web_options, api);
    web->start();
    // An IPv6 address goes in brackets, as a browser (and the Host check) wants it.
    const bool v6 = config.web_address.find(':') != std::string::npos;
    std::printf("web: http://%s%s%s:%d/\n", v6 ? "[" : "", config.web_address.c_str(),
                v6 ? "]" : "", web->port());
    std::fflush(stdout);
  }
  std::unique_ptr<ControlServer> control;
  if (!config.control_socket.empty()) {
    // Only the owner reaches the socket: its requests are the owner's.
    const auto answer = [&api](std::string_view line) {
      ApiSession session;
      session.can_subscribe = false;
      session.owner = true;
      return api.handle(line, session);
    };
    control = std::make_unique<ControlServer>(config.control_socket, answer);
    control->start();
    spdlog::info("control socket {}", config.control_socket.string());
  }
  {
    std::lock_guard lock(reload_mutex);
    follow_filter_files();
  }
  spdlog::info("running: {} -> {} -> {}; {}, {} Hz, block {}", config.input.describe(),
               pipeline.engine_name(), config.output.describe(),
               config.has_matrix()
                   ? fmt::format("matrix {} -> {} ch, {} paths", config.input_channels(),
                                 config.output_channels(), swapper.current()->paths().size())
                   : fmt::format("{} ch", config.channels),
               config.sample_rate, config.block_frames);

  const bool device_into_file = !config.input.is_file() && config.output.is_file();
  LiveStats reported{};
  CallbackScheduling reported_scheduling{};
  bool stopping = false;
  int exit_status = exit_code::ok;
  while (!stopping) {
    const int signal = signals.wait(std::chrono::milliseconds(100));
    if (signal == SIGINT || signal == SIGTERM) {
      spdlog::info("{}: stopping", signal == SIGINT ? "SIGINT" : "SIGTERM");
      api.set_stop_reason(signal == SIGINT ? "SIGINT" : "SIGTERM");
      stopping = true;
      exit_status = exit_code::on_signal(signal);
      break;
    }
    if (stop_requested.load()) {
      spdlog::info("ctl stop: stopping");
      stopping = true;
      break;
    }
    if (signal == SIGHUP) {
      try {
        spdlog::info("SIGHUP: {}", reload_configuration());
      } catch (const std::exception& e) {
        spdlog::error("SIGHUP: {}", e.what());
      }
    }
    devices.supervise();
    // A rate change reaches us from the device link (a stream reopened at
    // another rate) or from the callback (a server that changed its rate under
    // the stream): one event either way. With sample_rate = "device" it is
    // followed by a restart with that rate's filters; otherwise the pipeline's
    // handling (follow_device_change) stops cleanly.
    std::optional<DeviceChange> rate_change = devices.rate_change();
    if (!rate_change) {
      const auto change = pipeline.next_device_change();
      if (change && change->kind == DeviceChangeKind::rate && config.sample_rate_from_device) {
        rate_change = change;
      } else if (change && !follow_device_change(*change, pipeline)) {
        api.set_stop_reason("device sample rate changed");
        stopping = true;
        exit_status = exit_code::runtime_error;
        break;
      }
    }
    if (devices.restart_needed() || rate_change) {
      if (rate_change) {
        // A new rate means new filters and maybe a longer engine: the fresh
        // process reads them for it and builds through the one factory.
        // Audio stops here and resumes at the new rate, its history gone.
        spdlog::warn(
            "the device runs at {} Hz now, the filters were read for {} Hz: tapstream restarts "
            "itself (same arguments and PID) with the filters for {} Hz",
            rate_change->to, config.sample_rate, rate_change->to);
      } else {
        spdlog::warn(
            "the JACK server went away; PortAudio reaches a new one only from a fresh process, "
            "so tapstream restarts itself (same arguments and PID) and retries with back-off");
      }
      setenv(rate_in_force_variable,
             std::to_string(rate_change ? int(rate_change->to) : config.sample_rate).c_str(), 1);
      if (control) control->stop();  // first: `ctl reload` may make a new watcher
      watcher.reset();
      if (web) web->stop();
      devices.close();
      if (device_into_file) finish_file_output(pipeline, *files);
      if (files) files->stop();
      pipeline.stop();
      restart_self(rate_change ? std::chrono::milliseconds(500)
                               : std::min(devices.backoff() * 2, std::chrono::milliseconds(4000)),
                   config.output.is_file() ? config.output.file : fs::path());
      return 1;
    }
    log_xruns(pipeline.stats(), reported);
    log_callback_scheduling(pipeline, reported_scheduling, pipeline.device_period_frames());
    // Not behind a reload that waits for the engine: the next tick will do.
    if (std::unique_lock lock(reload_mutex, std::try_to_lock); lock) follow_filter_files();
    if (files && files->finished()) {
      spdlog::info("end of {}", config.input.file.string());
      api.set_stop_reason("end of input");
      break;
    }
  }

  // Drain: let what came in before the stop leave the output, then close. A
  // file output after an input device: the device stops first, and the file
  // takes exactly what it received.
  if (stopping && device_into_file) {
    devices.close();
    finish_file_output(pipeline, *files);
  } else if (stopping) {
    pipeline.begin_drain();
    const auto limit = Clock::now() + std::chrono::milliseconds(500) +
                       std::chrono::milliseconds(2 * static_cast<int>(pipeline.latency_ms()));
    while (!pipeline.drained() && Clock::now() < limit) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (control) control->stop();  // removes the socket file; first: `ctl reload` may make a watcher
  watcher.reset();
  if (web) web->stop();
  devices.close();
  if (files) files->stop();
  pipeline.stop();
  const LiveStats stats = pipeline.stats();
  spdlog::info(
      "stopped: {} blocks, {} frames in, {} out, underruns {}, overruns {}, late periods {}, "
      "swaps {}, rejected swaps {}",
      stats.blocks, stats.frames_in, stats.frames_out, stats.underruns, stats.overruns,
      stats.late_periods, stats.swaps, swapper.rejected());
  return exit_status;
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
  sub->add_option("--latency", args->latency,
                  "buffered (engine thread, block + margin behind) or zero (each period's "
                  "output in its own callback); replaces the configuration's latency")
      ->check(CLI::IsMember({"buffered", "zero"}));
  sub->get_option("--input")->excludes(sub->get_option("--input-device"));
  sub->get_option("--output")->excludes(sub->get_option("--output-device"));
  return {sub, [args] { return run_daemon(*args); }};
}

}  // namespace tapstream

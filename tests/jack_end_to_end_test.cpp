// End to end through a real audio server, without sound hardware: the test
// starts JACK's dummy driver, runs `tapstream run` on the JACK device through
// PortAudio, feeds a known signal into the daemon's input ports from one JACK
// client and records its output ports with another, then compares the
// recording with `tapstream process` of the same signal.
//
// SLOW: the dummy driver runs in real time, so this test takes as long as the
// audio it streams: 60 s by default (TAPSTREAM_JACK_SECONDS overrides it).
//
// Sample alignment: JACK runs the graph feeder -> daemon -> recorder in that
// order within every cycle, so the recorder's frame k is the daemon's output
// frame k when both start in the same cycle; the daemon's added latency is
// then exactly the lag between the fed and the recorded signal.

#include <gtest/gtest.h>
#include <jack/jack.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dsp/files/coefficient_file.hpp"
#include "dsp/files/sound_file.hpp"
#include "tests/jack_support.hpp"
#include "tests/reference.hpp"
#include "tests/wait_for.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int rate = 48000;
constexpr std::size_t channels = 2;
constexpr std::size_t jack_period = 256;

using testing::activate_stream_clients;
using testing::Child;
using testing::DaemonPorts;
using testing::find_ports;
using testing::open_client;
using testing::open_feeder_and_recorder;
using testing::portaudio_reaches_jack;
using testing::PrivateJackServer;
using testing::read_text;
using testing::route_through_daemon;
using testing::stop_stream;
using testing::TempDir;
using testing::use_jack_server;
using testing::wait_for_daemon_ports;

// Shared by the two JACK process callbacks and the test thread.
struct Stream {
  std::vector<float> signal;  // interleaved, fed from frame 0
  std::size_t signal_frames = 0;
  std::vector<float> recording;  // interleaved, recorder's frame 0 = feeder's frame 0
  std::size_t record_frames = 0;

  jack_client_t* feeder = nullptr;
  jack_client_t* recorder = nullptr;
  jack_port_t* out_ports[channels] = {};
  jack_port_t* in_ports[channels] = {};

  std::atomic<bool> armed{false};
  std::atomic<std::uint64_t> cycles{0};  // the feeder's, for testing::wait_for_cycles
  std::atomic<bool> fed_started{false};
  jack_nframes_t start_time = 0;  // published by fed_started (release/acquire)
  std::size_t fed = 0;            // feeder only
  jack_nframes_t record_first_time = 0;
  bool record_started = false;  // recorder only
  std::atomic<std::size_t> recorded{0};
  std::atomic<int> feeder_gaps{0};
  std::atomic<int> recorder_gaps{0};
  jack_nframes_t feeder_last = 0;
  jack_nframes_t recorder_last = 0;
};

int feed(jack_nframes_t frames, void* arg) {
  auto& s = *static_cast<Stream*>(arg);
  float* out[channels];
  for (std::size_t c = 0; c < channels; ++c) {
    out[c] = static_cast<float*>(jack_port_get_buffer(s.out_ports[c], frames));
  }
  const jack_nframes_t now = jack_last_frame_time(s.feeder);
  s.cycles.fetch_add(1, std::memory_order_release);
  if (!s.armed.load(std::memory_order_acquire)) {
    for (std::size_t c = 0; c < channels; ++c) std::fill(out[c], out[c] + frames, 0.0f);
    return 0;
  }
  if (!s.fed_started.load(std::memory_order_relaxed)) {
    s.start_time = now;
    s.fed_started.store(true, std::memory_order_release);
  } else if (now != s.feeder_last + frames) {
    s.feeder_gaps.fetch_add(1, std::memory_order_relaxed);
  }
  s.feeder_last = now;
  for (jack_nframes_t i = 0; i < frames; ++i, ++s.fed) {
    for (std::size_t c = 0; c < channels; ++c) {
      out[c][i] = s.fed < s.signal_frames ? s.signal[s.fed * channels + c] : 0.0f;
    }
  }
  return 0;
}

int record(jack_nframes_t frames, void* arg) {
  auto& s = *static_cast<Stream*>(arg);
  if (!s.fed_started.load(std::memory_order_acquire)) return 0;
  const jack_nframes_t now = jack_last_frame_time(s.recorder);
  if (!s.record_started) {
    if (static_cast<std::int32_t>(now - s.start_time) < 0) return 0;
    s.record_first_time = now;
    s.record_started = true;
  } else if (now != s.recorder_last + frames) {
    s.recorder_gaps.fetch_add(1, std::memory_order_relaxed);
  }
  s.recorder_last = now;
  const std::size_t at = s.recorded.load(std::memory_order_relaxed);
  for (std::size_t c = 0; c < channels; ++c) {
    const auto* in = static_cast<const float*>(jack_port_get_buffer(s.in_ports[c], frames));
    for (jack_nframes_t i = 0; i < frames && at + i < s.record_frames; ++i) {
      s.recording[(at + i) * channels + c] = in[i];
    }
  }
  s.recorded.store(std::min(s.record_frames, at + frames), std::memory_order_release);
  return 0;
}

TEST(JackEndToEnd, SixtySecondsThroughJackDummyEqualOfflineProcessingAndTheReportedLatency) {
  if (!fs::exists("/usr/bin/jackd")) GTEST_SKIP() << "jackd not installed (package jackd2)";
  const double seconds = std::getenv("TAPSTREAM_JACK_SECONDS") != nullptr
                             ? std::atof(std::getenv("TAPSTREAM_JACK_SECONDS"))
                             : 60.0;
  std::printf("SLOW TEST: streams %.0f s of audio through JACK's dummy driver in real time\n",
              seconds);
  const std::uint64_t seed = 60606;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));

  PrivateJackServer jack("tapstream-jack", rate, jack_period);
  const fs::path& dir = jack.dir.path();

  Stream s;
  ASSERT_NO_FATAL_FAILURE(open_feeder_and_recorder(jack, s.feeder, s.recorder));
  ASSERT_EQ(jack_get_sample_rate(s.feeder), static_cast<jack_nframes_t>(rate));
  if (!portaudio_reaches_jack()) {
    GTEST_SKIP() << "this PortAudio has no JACK host API (the ALSA file/null PCM variant of "
                    "this test is not written yet)";
  }

  // The signal, its filter, and the offline result from `tapstream process`.
  s.signal_frames = static_cast<std::size_t>(seconds * rate);
  s.signal = testing::random_signal(s.signal_frames * channels, seed);
  const auto taps = testing::random_signal(1024, seed + 1);
  save_text_taps(dir / "taps.txt", taps, "jack end-to-end test filter");
  {
    SoundFileWriter writer(dir / "in.wav", rate, channels, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
    writer.write(s.signal);
    writer.commit();
  }
  Child process(
      {TAPSTREAM_BINARY, "process", (dir / "in.wav").string(), (dir / "offline.wav").string(),
       "--taps", (dir / "taps.txt").string(), "--backend", "cpu"},
      dir / "process.out", dir / "process.err");
  ASSERT_EQ(process.wait_for(std::chrono::seconds(120)), 0)
      << "tapstream process failed: " << read_text(dir / "process.err");
  std::vector<float> offline(s.signal.size());
  {
    SoundFileReader reader(dir / "offline.wav");
    ASSERT_EQ(reader.info().frames, static_cast<std::int64_t>(s.signal_frames));
    std::size_t done = 0;
    while (done < offline.size()) {
      const std::size_t frames = reader.read(std::span<float>(offline).subspan(done));
      ASSERT_GT(frames, 0u);
      done += frames * channels;
    }
  }

  // The daemon on JACK's "system" device, its own engine thread, CPU engine.
  const std::size_t margin = 1024;  // generous: the CI machine is shared and loaded
  {
    std::ofstream config(dir / "live.toml");
    config << "sample_rate = " << rate << "\nblock_frames = 256\nchannels = " << channels
           << "\nring_margin_frames = " << margin << "\n[input]\ndevice = \"system\"\n"
           << "[output]\ndevice = \"system\"\n[filter]\nfile = \"taps.txt\"\nwatch = false\n"
           << "max_taps = 1024\n[engine]\nbackend = \"cpu\"\n[control]\nsocket = \"\"\n";
  }
  Child daemon({TAPSTREAM_BINARY, "run", "--config", (dir / "live.toml").string()},
               dir / "daemon.out", dir / "daemon.err");
  ASSERT_TRUE(daemon.started());

  // Its ports appear once PortAudio has opened the stream.
  DaemonPorts ports;
  ASSERT_NO_FATAL_FAILURE(
      wait_for_daemon_ports(s.feeder, daemon, channels, dir / "daemon.err", ports));
  const std::vector<std::string>& daemon_in = ports.in;
  const std::vector<std::string>& daemon_out = ports.out;

  const std::string daemon_stdout = read_text(dir / "daemon.out");
  const auto latency_at = daemon_stdout.find("latency: ");
  ASSERT_NE(latency_at, std::string::npos)
      << "the daemon did not print its latency: " << daemon_stdout;
  const std::size_t reported = std::stoul(daemon_stdout.substr(latency_at + 9));
  std::printf("reported latency %zu frames\n", reported);

  s.record_frames = s.signal_frames + reported + 4096;
  s.recording.assign(s.record_frames * channels, 0.0f);
  ASSERT_NO_FATAL_FAILURE(
      activate_stream_clients(s.feeder, s.recorder, s.out_ports, s.in_ports, feed, record, &s));
  ASSERT_NO_FATAL_FAILURE(
      route_through_daemon(s.feeder, s.recorder, s.out_ports, s.in_ports, daemon_in, daemon_out));
  ASSERT_TRUE(testing::wait_for_cycles(s.cycles)) << "the connections in use";
  s.armed.store(true, std::memory_order_release);

  // Real time: the recording takes `seconds`; twice that and a minute on a loaded machine.
  ASSERT_TRUE(testing::wait_until(
      std::chrono::duration_cast<std::chrono::seconds>(
          std::chrono::duration<double>(2 * seconds + 60)),
      [&] {
        return !daemon.running() || s.recorded.load(std::memory_order_acquire) >= s.record_frames;
      },
      [&] { return std::to_string(s.recorded.load()) + " frames recorded"; },
      std::chrono::milliseconds(100)));
  ASSERT_TRUE(daemon.running()) << "the daemon exited: " << read_text(dir / "daemon.err");
  stop_stream(s.feeder, s.recorder, daemon, dir / "daemon.err");
  const std::string daemon_log = read_text(dir / "daemon.err");

  ASSERT_EQ(s.recorded.load(), s.record_frames) << "recording incomplete";
  EXPECT_EQ(s.record_first_time, s.start_time) << "feeder and recorder started in one cycle";
  std::printf("JACK cycles skipped: feeder %d, recorder %d\n", s.feeder_gaps.load(),
              s.recorder_gaps.load());

  // Measured latency: the lag at which the recording matches the offline output.
  const std::size_t window = 8192;
  std::size_t measured = 0;
  double best = -1.0;
  for (std::size_t lag = 0; lag <= 8192; ++lag) {
    double err = 0.0;
    for (std::size_t i = 0; i < window; ++i) {
      const double d = s.recording[(lag + i) * channels] - offline[i * channels];
      err += d * d;
    }
    if (best < 0 || err < best) {
      best = err;
      measured = lag;
    }
  }
  std::printf("measured latency %zu frames (%.3f ms), reported %zu\n", measured,
              1000.0 * double(measured) / rate, reported);
  EXPECT_EQ(measured, reported) << "the measured input-to-output latency is the reported one";

  for (std::size_t i = 0; i < reported * channels; ++i) {
    ASSERT_EQ(s.recording[i], 0.0f) << "silence before the latency, sample " << i;
  }
  for (std::size_t c = 0; c < channels; ++c) {
    std::vector<float> got, want;
    for (std::size_t f = 0; f < s.signal_frames; ++f) {
      got.push_back(s.recording[(reported + f) * channels + c]);
      want.push_back(offline[f * channels + c]);
    }
    const double error = testing::relative_error(got, want);
    std::printf("channel %zu: relative error %.3g over %zu frames\n", c, error, s.signal_frames);
    EXPECT_LT(error, 1e-5) << "channel " << c << " (a dropped or repeated sample shows here)";
  }
  EXPECT_NE(daemon_log.find("underruns 0, overruns 0"), std::string::npos)
      << "the daemon counted xruns: " << daemon_log;
}

// A lost sound server is not the end: the daemon notices its JACK stream
// died, restarts itself in place, and reconnects with back-off once a server
// is back. (About 10 s: the servers run in real time.)
TEST(JackEndToEnd, TheDaemonReconnectsWhenTheJackServerRestarts) {
  if (!fs::exists("/usr/bin/jackd")) GTEST_SKIP() << "jackd not installed (package jackd2)";
  const TempDir temp_dir("tapstream-jack-re");
  const fs::path& dir = temp_dir.path();
  const std::string server = use_jack_server("tapstream-test-re-" + std::to_string(getpid()));
  const std::vector<std::string> jackd_argv{"jackd",
                                            "-S",
                                            "--no-realtime",
                                            "-d",
                                            "dummy",
                                            "-r",
                                            std::to_string(rate),
                                            "-p",
                                            std::to_string(jack_period)};
  // Waits until the server answers and the daemon's ports are registered
  // (false at once if the daemon exits).
  const auto daemon_ports_up = [&](Child& daemon) {
    // One probe client for the whole wait (see jack_daemon_test's wait_for_ports).
    jack_client_t* probe = nullptr;
    std::size_t seen = 0;
    const bool up = testing::wait_until(
        testing::long_wait,
        [&] {
          if (!daemon.running()) return true;
          if (probe == nullptr) probe = open_client("probe", server);
          if (probe != nullptr) seen = find_ports(probe, "tapstream.*:", 0).size();
          return seen == 2 * channels;
        },
        [&] { return std::to_string(seen) + " daemon ports"; }, std::chrono::milliseconds(100));
    if (probe != nullptr) jack_client_close(probe);
    return up && daemon.running();
  };

  auto first = std::make_unique<Child>(jackd_argv, dir / "jackd1.out", dir / "jackd1.err");
  ASSERT_TRUE(first->started());
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] {
        jack_client_t* probe = open_client("probe", server);
        if (probe != nullptr) jack_client_close(probe);
        return probe != nullptr;
      },
      [&] { return read_text(dir / "jackd1.err"); }, std::chrono::milliseconds(100)))
      << "the first JACK server did not come up";
  if (!portaudio_reaches_jack()) GTEST_SKIP() << "this PortAudio has no JACK host API";
  save_text_taps(dir / "taps.txt", testing::random_signal(64, 1), "reconnect test");
  {
    std::ofstream config(dir / "live.toml");
    config << "sample_rate = " << rate << "\nblock_frames = 256\nchannels = " << channels
           << "\n[input]\ndevice = \"system\"\n[output]\ndevice = \"system\"\n"
           << "[filter]\nfile = \"taps.txt\"\nwatch = false\n[engine]\nbackend = \"cpu\"\n"
           << "[control]\nsocket = \"\"\n";
  }
  Child daemon({TAPSTREAM_BINARY, "run", "--config", (dir / "live.toml").string()},
               dir / "daemon.out", dir / "daemon.err");
  ASSERT_TRUE(daemon_ports_up(daemon)) << read_text(dir / "daemon.err");

  first.reset();  // the server goes away (SIGTERM, waited for)
  // The daemon notices and restarts itself in place (exec, same PID and log).
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] {
        return !daemon.running() ||
               read_text(dir / "daemon.err").find("restarts itself") != std::string::npos;
      },
      [&] { return read_text(dir / "daemon.err"); }));
  ASSERT_TRUE(daemon.running()) << "the daemon died with the server: "
                                << read_text(dir / "daemon.err");
  Child second(jackd_argv, dir / "jackd2.out", dir / "jackd2.err");
  ASSERT_TRUE(second.started());
  EXPECT_TRUE(daemon_ports_up(daemon))
      << "the daemon did not reconnect: " << read_text(dir / "daemon.err");
  daemon.signal(SIGTERM);
  // A signal ends it with 128 + the signal (README, "Exit codes"), after a clean drain.
  EXPECT_EQ(daemon.wait_for(testing::long_wait), 128 + SIGTERM) << read_text(dir / "daemon.err");
  const std::string log = read_text(dir / "daemon.err");
  EXPECT_NE(log.find("restarts itself"), std::string::npos) << log;
  const auto first_open = log.find("devices open:");
  ASSERT_NE(first_open, std::string::npos) << log;
  EXPECT_NE(log.find("devices open:", first_open + 1), std::string::npos)
      << "opened again on the new server: " << log;
}

}  // namespace
}  // namespace tapstream

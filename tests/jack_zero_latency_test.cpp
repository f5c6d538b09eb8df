// Same-period mode measured through a real audio server, without sound
// hardware: a private JACK dummy server at 64, 256 and 1024-frame periods,
// `tapstream run --latency zero` on its "system" device with three channels
// filtered by 1, 4096 and 65536 taps, an impulse fed into every input by one
// JACK client of the test and the outputs recorded by another.
//
// JACK runs feeder -> daemon -> recorder in that order within each cycle, so
// the recorder's frame k is the daemon's output frame k: a daemon that adds
// no latency answers the impulse with its filter starting at frame 0. The
// recording must be the filter itself, period by period; a period whose
// output missed its deadline is whole silence (counted by the daemon as a
// late period) and may only be rare. About 5 s per period size.

#include <gtest/gtest.h>
#include <jack/jack.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "dsp/files/coefficient_file.hpp"
#include "tests/jack_support.hpp"
#include "tests/reference.hpp"
#include "tests/wait_for.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::activate_stream_clients;
using testing::Child;
using testing::DaemonPorts;
using testing::open_feeder_and_recorder;
using testing::portaudio_reaches_jack;
using testing::PrivateJackServer;
using testing::read_text;
using testing::route_through_daemon;
using testing::stop_stream;
using testing::wait_for_daemon_ports;

constexpr int rate = 48000;
constexpr std::size_t channels = 3;
const std::size_t filter_taps[channels] = {1, 4096, 65536};

// Shared by the two JACK process callbacks and the test thread: the feeder
// publishes the cycle of the impulse with a release store of `fed_at_set`,
// the recorder publishes how much it recorded with a release store.
struct ImpulseStream {
  jack_client_t* feeder = nullptr;
  jack_client_t* recorder = nullptr;
  jack_port_t* out_ports[channels] = {};
  jack_port_t* in_ports[channels] = {};
  std::atomic<bool> armed{false};
  std::atomic<std::uint64_t> cycles{0};  // the feeder's, for testing::wait_for_cycles
  std::atomic<bool> fed_at_set{false};
  jack_nframes_t fed_at = 0;  // the cycle's first frame time holding the impulse
  std::vector<float> recording[channels];
  std::atomic<std::size_t> recorded{0};
};

int feed_impulse(jack_nframes_t frames, void* arg) {
  auto& s = *static_cast<ImpulseStream*>(arg);
  const bool now =
      s.armed.load(std::memory_order_acquire) && !s.fed_at_set.load(std::memory_order_relaxed);
  for (std::size_t c = 0; c < channels; ++c) {
    auto* out = static_cast<float*>(jack_port_get_buffer(s.out_ports[c], frames));
    std::fill(out, out + frames, 0.0f);
    if (now) out[0] = 1.0f;
  }
  if (now) {
    s.fed_at = jack_last_frame_time(s.feeder);
    s.fed_at_set.store(true, std::memory_order_release);
  }
  s.cycles.fetch_add(1, std::memory_order_release);
  return 0;
}

int record_response(jack_nframes_t frames, void* arg) {
  auto& s = *static_cast<ImpulseStream*>(arg);
  if (!s.fed_at_set.load(std::memory_order_acquire)) return 0;
  if (static_cast<std::int32_t>(jack_last_frame_time(s.recorder) - s.fed_at) < 0) return 0;
  const std::size_t at = s.recorded.load(std::memory_order_relaxed);
  const std::size_t room = s.recording[0].size() - at;
  const std::size_t n = std::min<std::size_t>(frames, room);
  for (std::size_t c = 0; c < channels; ++c) {
    const auto* in = static_cast<const float*>(jack_port_get_buffer(s.in_ports[c], frames));
    std::copy(in, in + n, s.recording[c].begin() + std::ptrdiff_t(at));
  }
  s.recorded.store(at + n, std::memory_order_release);
  return 0;
}

void measure(std::size_t period) {
  if (!fs::exists("/usr/bin/jackd")) GTEST_SKIP() << "jackd not installed (package jackd2)";
  const std::uint64_t seed = 10000 + period;
  std::printf("period %zu, seed %llu\n", period, static_cast<unsigned long long>(seed));
  // Same-period mode is for a real-time JACK (its callback waits for the engine).
  PrivateJackServer jack("tapstream-zero", rate, period, channels, geteuid() == 0);
  const fs::path& dir = jack.dir.path();
  ImpulseStream s;
  ASSERT_NO_FATAL_FAILURE(open_feeder_and_recorder(jack, s.feeder, s.recorder));
  ASSERT_EQ(jack_get_buffer_size(s.feeder), static_cast<jack_nframes_t>(period));
  if (!portaudio_reaches_jack()) GTEST_SKIP() << "this PortAudio has no JACK host API";

  std::vector<std::vector<float>> filters;
  std::string files;
  for (std::size_t c = 0; c < channels; ++c) {
    auto h = testing::random_signal(filter_taps[c], seed + c);
    for (auto& t : h) t /= std::sqrt(float(h.size()));
    h[0] = 0.5f;  // the first output frame tells the latency
    const fs::path file = dir / ("taps-" + std::to_string(c) + ".txt");
    save_text_taps(file, h, "zero-latency test filter");
    files += (c == 0 ? "\"" : ", \"") + file.string() + "\"";
    filters.push_back(std::move(h));
  }
  {
    std::ofstream config(dir / "zero.toml");
    config << "sample_rate = " << rate << "\nblock_frames = " << period
           << "\nchannels = " << channels << "\n[input]\ndevice = \"system\"\n"
           << "[output]\ndevice = \"system\"\n[filter]\nfiles = [" << files
           << "]\nwatch = false\n[engine]\nbackend = \"cpu\"\n[control]\nsocket = \"\"\n";
  }
  setenv("TAPSTREAM_FFTW_PLANNER", "estimate", 1);  // the daemon starts at once
  Child daemon(
      {TAPSTREAM_BINARY, "run", "--config", (dir / "zero.toml").string(), "--latency", "zero"},
      dir / "daemon.out", dir / "daemon.err");
  ASSERT_TRUE(daemon.started());
  DaemonPorts ports;
  ASSERT_NO_FATAL_FAILURE(
      wait_for_daemon_ports(s.feeder, daemon, channels, dir / "daemon.err", ports));
  const std::vector<std::string>& daemon_in = ports.in;
  const std::vector<std::string>& daemon_out = ports.out;
  const std::string printed = read_text(dir / "daemon.out");
  EXPECT_NE(printed.find("latency: 0 frames, 0.000 ms"), std::string::npos) << printed;

  const std::size_t record_frames = 65536 + 2 * period;
  for (auto& r : s.recording) r.assign(record_frames, 0.0f);
  ASSERT_NO_FATAL_FAILURE(activate_stream_clients(s.feeder, s.recorder, s.out_ports, s.in_ports,
                                                  feed_impulse, record_response, &s));
  ASSERT_NO_FATAL_FAILURE(
      route_through_daemon(s.feeder, s.recorder, s.out_ports, s.in_ports, daemon_in, daemon_out));
  ASSERT_TRUE(testing::wait_for_cycles(s.cycles)) << "the connections in use";
  s.armed.store(true, std::memory_order_release);
  EXPECT_TRUE(testing::wait_until(
      testing::long_wait,
      [&] { return s.recorded.load(std::memory_order_acquire) >= record_frames; },
      [&] { return std::to_string(s.recorded.load()) + " frames recorded"; }));
  stop_stream(s.feeder, s.recorder, daemon, dir / "daemon.err");
  ASSERT_EQ(s.recorded.load(), record_frames) << "recording incomplete";
  const std::string log = read_text(dir / "daemon.err");
  const auto late_at = log.find("late periods ");
  const long late = late_at == std::string::npos ? -1 : std::atol(log.c_str() + late_at + 13);

  for (std::size_t c = 0; c < channels; ++c) {
    const auto& h = filters[c];
    const auto& y = s.recording[c];
    std::size_t first = 0;
    while (first < y.size() && std::abs(y[first]) < 0.25f) ++first;
    std::size_t exact = 0, silent = 0, periods = record_frames / period;
    double scale = 0.0;
    for (float v : h) scale = std::max(scale, double(std::abs(v)));
    for (std::size_t p = 0; p < periods; ++p) {
      double err = 0.0;
      bool zero = true;
      for (std::size_t f = p * period; f < (p + 1) * period; ++f) {
        const double want = f < h.size() ? h[f] : 0.0;
        err = std::max(err, std::abs(double(y[f]) - want));
        zero = zero && y[f] == 0.0f;
      }
      if (err <= 1e-5 * scale) {
        ++exact;
      } else if (zero) {
        ++silent;  // a late period plays silence
      } else {
        ADD_FAILURE() << "channel " << c << ", period " << p
                      << ": neither the filter's response nor a late period's silence (max error "
                      << err << ")";
      }
    }
    std::printf(
        "period %zu, %zu taps: first output at frame %zu (added latency), %zu of %zu "
        "periods exact, %zu silent; daemon late periods %ld\n",
        period, h.size(), first, exact, periods, silent, late);
    EXPECT_EQ(first, 0u) << "added latency, channel " << c << " (" << h.size() << " taps)";
    EXPECT_LE(silent, periods / 20) << "late periods are rare";
    if (late >= 0) {
      EXPECT_LE(silent, std::size_t(late));
    }
  }
}

TEST(JackZeroLatency, AddsNoFrameAt64FramePeriodsWith1And4096And65536Taps) {
  measure(64);
}
TEST(JackZeroLatency, AddsNoFrameAt256FramePeriodsWith1And4096And65536Taps) {
  measure(256);
}
TEST(JackZeroLatency, AddsNoFrameAt1024FramePeriodsWith1And4096And65536Taps) {
  measure(1024);
}

}  // namespace
}  // namespace tapstream

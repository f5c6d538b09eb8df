// A JACK server's period changed under a running daemon in same-period mode:
// a private JACK dummy server at 256 frames, `tapstream run --latency zero`
// on it with two channels of 4096 taps, a random signal fed by one client of
// the test and the outputs recorded by another, and the buffer size changed to
// 128 and then to 512 frames while it streams (jack_set_buffer_size, what
// jack_bufsize does). The daemon follows without a restart: its status shows
// the new period and a re-planned engine, and every recorded cycle is exactly
// the convolution of the whole fed signal (no added latency before or after a
// change, no glitch), or a late period's silence, at most one per change
// beyond what the machine causes anyway. About 6 s.

#include <gtest/gtest.h>
#include <jack/jack.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dsp/files/coefficient_file.hpp"
#include "tests/daemon_period.hpp"
#include "tests/jack_support.hpp"
#include "tests/noise_stream.hpp"
#include "tests/reference.hpp"
#include "tests/wait_for.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::Child;
using testing::read_text;

constexpr int rate = 48000;
constexpr std::size_t channels = 2;
constexpr std::size_t taps = 4096;
using Stream = testing::NoiseStream<channels>;

TEST(JackPeriodChange, SamePeriodModeFollows256To128To512FramesExactlyWithoutAddedLatency) {
  if (!fs::exists("/usr/bin/jackd")) GTEST_SKIP() << "jackd not installed (package jackd2)";
  const std::uint64_t seed = 24024;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  testing::PrivateJackServer jack("tapstream-period", rate, 256, channels, geteuid() == 0);
  const fs::path& dir = jack.dir.path();
  Stream s(&jack_port_get_buffer, &jack_last_frame_time);
  ASSERT_NO_FATAL_FAILURE(testing::open_feeder_and_recorder(jack, s.feeder, s.recorder));
  if (!testing::portaudio_reaches_jack()) GTEST_SKIP() << "this PortAudio has no JACK host API";

  std::vector<std::vector<float>> filters;
  std::string files;
  for (std::size_t c = 0; c < channels; ++c) {
    auto h = testing::random_signal(taps, seed + c);
    for (auto& t : h) t /= std::sqrt(float(h.size()));
    const fs::path file = dir / ("taps-" + std::to_string(c) + ".txt");
    save_text_taps(file, h, "period change test filter");
    files += (c == 0 ? "\"" : ", \"") + file.string() + "\"";
    filters.push_back(std::move(h));
  }
  const fs::path socket = dir / "ctl.sock";
  {
    std::ofstream config(dir / "zero.toml");
    config << "sample_rate = " << rate << "\nblock_frames = 256\nchannels = " << channels
           << "\n[input]\ndevice = \"system\"\n[output]\ndevice = \"system\"\n[filter]\nfiles = ["
           << files << "]\nwatch = false\n[engine]\nbackend = \"cpu\"\n[control]\nsocket = \""
           << socket.string() << "\"\n";
  }
  setenv("TAPSTREAM_FFTW_PLANNER", "estimate", 1);  // the daemon starts at once
  Child daemon(testing::dies_with_test({TAPSTREAM_BINARY, "run", "--config",
                                        (dir / "zero.toml").string(), "--latency", "zero"}),
               dir / "daemon.out", dir / "daemon.err");
  ASSERT_TRUE(daemon.started());
  testing::DaemonPorts ports;
  ASSERT_NO_FATAL_FAILURE(
      testing::wait_for_daemon_ports(s.feeder, daemon, channels, dir / "daemon.err", ports));

  // 2 s of signal; the recording goes on past its end (the filters' tails).
  const std::size_t signal_frames = 2 * rate, record_frames = signal_frames + taps + 4096;
  for (std::size_t c = 0; c < channels; ++c) {
    s.signal[c] = testing::random_signal(signal_frames, seed + 100 + c);
  }
  s.prepare(record_frames, record_frames / 128 + 2);
  ASSERT_NO_FATAL_FAILURE(testing::activate_stream_clients(
      s.feeder, s.recorder, s.out_ports, s.in_ports, &Stream::feed, &Stream::record, &s));
  ASSERT_NO_FATAL_FAILURE(testing::route_through_daemon(s.feeder, s.recorder, s.out_ports,
                                                        s.in_ports, ports.in, ports.out));
  ASSERT_TRUE(testing::wait_for_cycles(s.cycles)) << "the connections in use";
  EXPECT_TRUE(testing::wait_for_period(socket, dir, 256, 0));
  s.armed.store(true, std::memory_order_release);

  const auto recorded_past = [&](std::size_t frames) {
    return testing::wait_until(
        testing::long_wait, [&] { return s.recorded.load(std::memory_order_acquire) >= frames; },
        [&] { return std::to_string(s.recorded.load()) + " frames recorded"; },
        std::chrono::milliseconds(5));
  };
  // Each change lands on a stretch of signal, well before its end.
  ASSERT_TRUE(recorded_past(rate / 5));
  ASSERT_EQ(jack_set_buffer_size(s.feeder, 128), 0);
  EXPECT_TRUE(testing::wait_for_period(socket, dir, 128, 1));
  ASSERT_TRUE(recorded_past(s.recorded.load() + rate / 10));
  ASSERT_EQ(jack_set_buffer_size(s.feeder, 512), 0);
  EXPECT_TRUE(testing::wait_for_period(socket, dir, 512, 2));
  EXPECT_TRUE(recorded_past(record_frames));
  const auto status = testing::status_of(socket, dir);
  testing::stop_stream(s.feeder, s.recorder, daemon, dir / "daemon.err");
  ASSERT_EQ(s.recorded.load(), record_frames) << "recording incomplete";

  const std::string log = read_text(dir / "daemon.err");
  EXPECT_NE(log.find("device period changed: 256 -> 128 frames"), std::string::npos) << log;
  EXPECT_NE(log.find("device period changed: 128 -> 512 frames"), std::string::npos) << log;
  EXPECT_NE(log.find("engine re-planned for 512-frame calls"), std::string::npos) << log;
  EXPECT_EQ(status.value("latency_frames", 1u), 0u) << status.dump();
  EXPECT_EQ(status.value("period_changes", 0u), 2u) << status.dump();
  const std::uint64_t late = status.value("late_periods", 0u);

  const std::size_t cycles = s.recorded_cycles.load();
  std::size_t at = 0, sizes[3] = {0, 0, 0};
  for (std::size_t k = 0; k < cycles; ++k) {
    const std::uint32_t n = s.cycle_frames[k];
    if (n == 256) ++sizes[0];
    if (n == 128) ++sizes[1];
    if (n == 512 || at + n == record_frames) ++sizes[2];
    at += n;
  }
  EXPECT_GT(sizes[0], 10u);
  EXPECT_GT(sizes[1], 10u);
  EXPECT_GT(sizes[2], 10u);
  // Both changes, and the old engine's run on silence after each, within the signal.
  std::size_t last_change = 0;
  for (std::size_t k = 1, frame = s.cycle_frames[0]; k < cycles; frame += s.cycle_frames[k++]) {
    if (s.cycle_frames[k] != s.cycle_frames[k - 1] && frame + s.cycle_frames[k] < record_frames) {
      last_change = frame;
    }
  }
  EXPECT_LT(last_change + 2 * taps, signal_frames) << "the changes within the signal";
  for (std::size_t c = 0; c < channels; ++c) {
    // What went in: the signal, then silence (the convolution of as many frames as recorded).
    std::vector<float> fed(record_frames, 0.0f);
    std::copy(s.signal[c].begin(), s.signal[c].end(), fed.begin());
    const auto want = testing::reference_convolution(fed, filters[c]);
    const auto check = testing::check_cycles(s.recording[c], want, s.cycle_frames, cycles, 1e-4);
    std::printf(
        "channel %zu: %zu cycles (%zu of 256, %zu of 128, %zu of 512 frames): %zu exact, %zu "
        "silent (late), %zu wrong; daemon late periods %llu\n",
        c, cycles, sizes[0], sizes[1], sizes[2], check.exact, check.silent, check.wrong,
        static_cast<unsigned long long>(late));
    EXPECT_EQ(check.wrong, 0u) << "channel " << c << ": first wrong frame " << check.first_wrong
                               << " (cycle " << check.first_wrong_cycle << " of "
                               << s.cycle_frames[check.first_wrong_cycle] << " frames), error "
                               << check.worst_error;
    EXPECT_LE(check.silent, std::size_t(late)) << "a silent cycle is a late period";
    // At most one late period per change, and the rare one a loaded machine causes.
    EXPECT_LE(check.silent, 2u + cycles / 50) << "channel " << c;
  }
}

}  // namespace
}  // namespace tapstream

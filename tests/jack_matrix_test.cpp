// A routing matrix live, end to end through JACK's dummy driver (a private
// server, a few seconds each): `tapstream run` with the shipped 2 -> 4
// crossover ([filter] matrix) opens 2 capture and 4 playback ports, and what
// it plays equals `tapstream process --matrix` of the same input after the
// reported latency, in both latency modes; `ctl load path` swaps one path's
// filter with the one-block crossfade and no sample lost, while refused swaps
// keep the running matrix; `ctl status` lists the paths; a device with fewer
// channels than the matrix is refused by name.
//
// Sample alignment as in jack_end_to_end_test: the feeder, the daemon and
// the recorder run in that order in every cycle, so the recording lags the
// fed signal by exactly the daemon's latency; the daemon's engine blocks
// (block_frames = the JACK period) start at recording frames latency + k x
// block, which is where a swap's crossfade must sit.

#include <gtest/gtest.h>
#include <jack/jack.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
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
using testing::Child;
using testing::find_ports;
using testing::open_client;
using testing::portaudio_reaches_jack;
using testing::PrivateJackServer;
using testing::read_text;

constexpr int rate = 48000;
constexpr std::size_t inputs = 2;
constexpr std::size_t outputs = 4;
constexpr std::size_t period = 256;  // JACK's, and the daemon's engine block

const fs::path crossover_dir = fs::path(TAPSTREAM_SOURCE_DIR) / "config" / "matrix";

// Shared by the two JACK process callbacks and the test thread (as in
// jack_end_to_end_test: armed/fed_started publish with release/acquire).
struct Stream {
  std::vector<float> signal;  // interleaved, `inputs` channels
  std::size_t signal_frames = 0;
  std::vector<float> recording;  // interleaved, `outputs` channels
  std::size_t record_frames = 0;
  jack_client_t* feeder = nullptr;
  jack_client_t* recorder = nullptr;
  jack_port_t* out_ports[inputs] = {};
  jack_port_t* in_ports[outputs] = {};
  std::atomic<bool> armed{false};
  std::atomic<std::uint64_t> cycles{0};  // the feeder's, for testing::wait_for_cycles
  std::atomic<bool> fed_started{false};
  jack_nframes_t start_time = 0;
  std::size_t fed = 0;
  bool record_started = false;
  std::atomic<std::size_t> recorded{0};
};

int feed(jack_nframes_t frames, void* arg) {
  auto& s = *static_cast<Stream*>(arg);
  float* out[inputs];
  for (std::size_t c = 0; c < inputs; ++c)
    out[c] = static_cast<float*>(jack_port_get_buffer(s.out_ports[c], frames));
  s.cycles.fetch_add(1, std::memory_order_release);
  if (!s.armed.load(std::memory_order_acquire)) {
    for (auto* o : out) std::fill(o, o + frames, 0.0f);
    return 0;
  }
  if (!s.fed_started.load(std::memory_order_relaxed)) {
    s.start_time = jack_last_frame_time(s.feeder);
    s.fed_started.store(true, std::memory_order_release);
  }
  for (jack_nframes_t i = 0; i < frames; ++i, ++s.fed) {
    for (std::size_t c = 0; c < inputs; ++c)
      out[c][i] = s.fed < s.signal_frames ? s.signal[s.fed * inputs + c] : 0.0f;
  }
  return 0;
}

int record(jack_nframes_t frames, void* arg) {
  auto& s = *static_cast<Stream*>(arg);
  if (!s.fed_started.load(std::memory_order_acquire)) return 0;
  if (!s.record_started) {
    if (static_cast<std::int32_t>(jack_last_frame_time(s.recorder) - s.start_time) < 0) return 0;
    s.record_started = true;
  }
  const std::size_t at = s.recorded.load(std::memory_order_relaxed);
  for (std::size_t c = 0; c < outputs; ++c) {
    const auto* in = static_cast<const float*>(jack_port_get_buffer(s.in_ports[c], frames));
    for (jack_nframes_t i = 0; i < frames && at + i < s.record_frames; ++i)
      s.recording[(at + i) * outputs + c] = in[i];
  }
  s.recorded.store(std::min(s.record_frames, at + frames), std::memory_order_release);
  return 0;
}

// `tapstream process --matrix` of in.wav into `out`, read back interleaved.
std::vector<float> process_offline(const fs::path& dir, const fs::path& matrix,
                                   const std::string& out) {
  Child process({TAPSTREAM_BINARY, "process", (dir / "in.wav").string(), (dir / out).string(),
                 "--matrix", matrix.string(), "--backend", "cpu"},
                dir / "process.out", dir / "process.err");
  EXPECT_EQ(process.wait_for(std::chrono::seconds(120)), 0) << read_text(dir / "process.err");
  SoundFileReader reader(dir / out);
  EXPECT_EQ(reader.info().channels, static_cast<int>(outputs));
  std::vector<float> samples(static_cast<std::size_t>(reader.info().frames) * outputs);
  for (std::size_t done = 0; done < samples.size();) {
    const std::size_t frames = reader.read(std::span<float>(samples).subspan(done));
    if (frames == 0) break;
    done += frames * outputs;
  }
  return samples;
}

class JackMatrixTest : public ::testing::Test {
 protected:
  // Starts jackd with `ports` capture and playback ports; false (with a
  // skip) where this machine cannot run the test.
  bool start_jack(std::size_t ports) {
    if (!fs::exists("/usr/bin/jackd")) {
      skip_ = "jackd not installed (package jackd2)";
      return false;
    }
    jack_ = std::make_unique<PrivateJackServer>("tapstream-matrix", rate, period, ports);
    s_.feeder = jack_->open_client_when_up("feeder");
    if (s_.feeder == nullptr) {
      skip_ = "jackd did not come up: " + read_text(dir() / "jackd.err");
      return false;
    }
    s_.recorder = open_client("recorder", jack_->server);
    if (!portaudio_reaches_jack()) {
      skip_ = "this PortAudio has no JACK host API";
      return false;
    }
    return true;
  }
  void TearDown() override {
    if (s_.recorder) jack_client_close(s_.recorder);
    if (s_.feeder) jack_client_close(s_.feeder);
  }
  const fs::path& dir() const { return jack_->dir.path(); }
  fs::path socket() const { return dir() / "ctl" / "control.sock"; }

  void write_config(const std::string& latency) {
    std::ofstream(dir() / "live.toml")
        << "sample_rate = " << rate << "\nblock_frames = " << period
        << "\nring_margin_frames = 1024\nlatency = \"" << latency
        << "\"\n[input]\ndevice = \"system\"\n[output]\ndevice = \"system\"\n"
        << "[filter]\nmatrix = \"" << (crossover_dir / "crossover-2way.toml").string()
        << "\"\nwatch = false\n[engine]\nbackend = \"cpu\"\n[control]\nsocket = \""
        << socket().string() << "\"\n";
  }

  nlohmann::json ctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv{TAPSTREAM_BINARY, "ctl", "--socket", socket().string()};
    argv.insert(argv.end(), args.begin(), args.end());
    {
      Child child(argv, dir() / "ctl.out", dir() / "ctl.err");
      child.wait_for(std::chrono::seconds(20));
    }
    const std::string reply = read_text(dir() / "ctl.out");
    std::printf("ctl %s %s -> %s", args[0].c_str(), args.size() > 1 ? args[1].c_str() : "",
                reply.c_str());
    return nlohmann::json::parse(reply, nullptr, false);
  }

  // Streams `seconds` of a random signal through the daemon running
  // live.toml; `during(seconds streamed)` is called while it runs. Returns
  // the latency the daemon reported.
  template <typename During>
  std::size_t stream(double seconds, std::uint64_t seed, During during) {
    s_.signal_frames = static_cast<std::size_t>(seconds * rate);
    s_.signal = testing::random_signal(s_.signal_frames * inputs, seed);
    {
      SoundFileWriter writer(dir() / "in.wav", rate, inputs, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
      writer.write(s_.signal);
      writer.commit();
    }
    daemon_ = std::make_unique<Child>(std::vector<std::string>{TAPSTREAM_BINARY, "run", "--config",
                                                               (dir() / "live.toml").string()},
                                      dir() / "daemon.out", dir() / "daemon.err");
    std::vector<std::string> in, out;
    EXPECT_TRUE(testing::wait_until(
        testing::long_wait,
        [&] {
          in = find_ports(s_.feeder, "tapstream.*:in_", JackPortIsInput);
          out = find_ports(s_.feeder, "tapstream.*:out_", JackPortIsOutput);
          return !daemon_->running() ||
                 (in.size() >= inputs && out.size() >= outputs &&
                  read_text(dir() / "daemon.err").find("running:") != std::string::npos);
        },
        [&] { return read_text(dir() / "daemon.err"); }, std::chrono::milliseconds(20)))
        << "the daemon's ports and its \"running:\" line";
    EXPECT_EQ(in.size(), inputs) << read_text(dir() / "daemon.err");
    EXPECT_EQ(out.size(), outputs) << read_text(dir() / "daemon.err");
    if (in.size() != inputs || out.size() != outputs) return 0;
    const std::string printed = read_text(dir() / "daemon.out");
    const std::size_t latency = std::stoul(printed.substr(printed.find("latency: ") + 9));
    std::printf("%s", printed.c_str());

    s_.record_frames = s_.signal_frames + latency + period;
    s_.recording.assign(s_.record_frames * outputs, 0.0f);
    for (std::size_t c = 0; c < inputs; ++c) {
      s_.out_ports[c] = jack_port_register(s_.feeder, ("out_" + std::to_string(c + 1)).c_str(),
                                           JACK_DEFAULT_AUDIO_TYPE, JackPortIsOutput, 0);
    }
    for (std::size_t c = 0; c < outputs; ++c) {
      s_.in_ports[c] = jack_port_register(s_.recorder, ("in_" + std::to_string(c + 1)).c_str(),
                                          JACK_DEFAULT_AUDIO_TYPE, JackPortIsInput, 0);
    }
    jack_set_process_callback(s_.feeder, feed, &s_);
    jack_set_process_callback(s_.recorder, record, &s_);
    EXPECT_EQ(jack_activate(s_.feeder), 0);
    EXPECT_EQ(jack_activate(s_.recorder), 0);
    for (std::size_t c = 0; c < inputs; ++c) {
      for (const auto& source : find_ports(s_.feeder, "system:capture_.*", JackPortIsOutput))
        jack_disconnect(s_.feeder, source.c_str(), in[c].c_str());
      EXPECT_EQ(jack_connect(s_.feeder, jack_port_name(s_.out_ports[c]), in[c].c_str()), 0);
    }
    for (std::size_t c = 0; c < outputs; ++c)
      EXPECT_EQ(jack_connect(s_.recorder, out[c].c_str(), jack_port_name(s_.in_ports[c])), 0);
    EXPECT_TRUE(testing::wait_for_cycles(s_.cycles)) << "the connections in use";
    s_.armed.store(true, std::memory_order_release);

    // Real time: `seconds` of streaming; twice that and 30 s on a loaded
    // machine. `during` is called at every poll.
    EXPECT_TRUE(testing::wait_until(
        std::chrono::duration_cast<std::chrono::seconds>(
            std::chrono::duration<double>(2 * seconds + 30)),
        [&] {
          if (!daemon_->running()) return true;
          const std::size_t recorded = s_.recorded.load(std::memory_order_acquire);
          if (recorded >= s_.record_frames) return true;
          during(double(recorded) / rate);
          return false;
        },
        [&] { return std::to_string(s_.recorded.load()) + " frames recorded"; },
        std::chrono::milliseconds(20)));
    EXPECT_EQ(s_.recorded.load(), s_.record_frames)
        << "recording incomplete: " << read_text(dir() / "daemon.err");
    jack_deactivate(s_.recorder);
    jack_deactivate(s_.feeder);
    daemon_->signal(SIGTERM);
    EXPECT_EQ(daemon_->wait_for(testing::long_wait), 128 + SIGTERM)
        << read_text(dir() / "daemon.err");
    const std::string log = read_text(dir() / "daemon.err");
    const auto late_at = log.find("late periods ");
    late_periods_ = late_at == std::string::npos ? 0 : std::atol(log.c_str() + late_at + 13);
    if (late_periods_allowed_) {
      // Same-period mode: a late period plays silence and the stream stays
      // aligned (README); the caller leaves those periods out.
      EXPECT_NE(log.find("overruns 0"), std::string::npos) << log;
    } else {
      EXPECT_NE(log.find("underruns 0, overruns 0"), std::string::npos)
          << "xruns shift the stream: " << log;
    }
    return latency;
  }

  // Output channel `c` of the recording from signal frame `from` to `to`
  // (after the latency), against `want` there.
  double error(std::size_t latency, const std::vector<float>& want, std::size_t c, std::size_t from,
               std::size_t to) const {
    std::vector<float> got, expected;
    for (std::size_t f = from; f < to; ++f) {
      got.push_back(s_.recording[(latency + f) * outputs + c]);
      expected.push_back(want[f * outputs + c]);
    }
    return testing::relative_error(got, expected);
  }

  std::unique_ptr<PrivateJackServer> jack_;
  std::unique_ptr<Child> daemon_;
  bool late_periods_allowed_ = false;
  long late_periods_ = 0;  // as the daemon's last line counted them
  Stream s_;
  std::string skip_;
};

TEST_F(JackMatrixTest, TheCrossoverLiveEqualsProcessAndACtlSwapCrossfadesOverOneBlock) {
  if (!start_jack(outputs)) GTEST_SKIP() << skip_;
  const std::uint64_t seed = 1111;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  // The swap's filter for the left tweeter, and matrices to refuse.
  std::vector<float> taps = testing::random_signal(255, seed + 1);
  for (float& t : taps) t *= 0.1f;
  save_text_taps(dir() / "tweeter.txt", taps, "jack matrix test");
  std::string crossover = read_text(crossover_dir / "crossover-2way.toml");
  const auto absolute = [&](std::string text) {
    for (const char* name : {"lr4-lowpass-2k-48k.txt", "lr4-highpass-2k-48k.txt"}) {
      for (auto at = text.find(std::string("\"") + name); at != std::string::npos;
           at = text.find(std::string("\"") + name, at + 2)) {
        text.replace(at + 1, std::string(name).size(), (crossover_dir / name).string());
      }
    }
    return text;
  };
  // The crossover with path 1 (left -> left tweeter) through tweeter.txt: what the swap makes.
  std::string swapped = absolute(crossover);
  const auto second = swapped.find("[[path]]", swapped.find("[[path]]") + 1);
  const auto file_at = swapped.find("file = ", second);
  swapped.replace(file_at, swapped.find('\n', file_at) - file_at,
                  "file = \"" + (dir() / "tweeter.txt").string() + "\"");
  std::ofstream(dir() / "swapped.toml") << swapped;
  std::string broken = absolute(crossover);
  broken.replace(broken.rfind("file = "),
                 broken.find('\n', broken.rfind("file = ")) - broken.rfind("file = "),
                 "file = \"missing-tweeter.txt\"");
  std::ofstream(dir() / "broken.toml") << broken;
  write_config("buffered");

  bool swapped_now = false;
  const double seconds = 5.0;
  const std::size_t latency = stream(seconds, seed + 2, [&](double streamed) {
    if (swapped_now || streamed < 2.0) return;
    swapped_now = true;
    const auto ok = ctl({"load", "path", "0", "1", (dir() / "tweeter.txt").string()});
    EXPECT_TRUE(ok.value("ok", false));
    EXPECT_NE(ok.value("message", "").find("installed for input 0 -> output 1 at block"),
              std::string::npos);
    const auto absent = ctl({"load", "path", "0", "3", (dir() / "tweeter.txt").string()});
    EXPECT_FALSE(absent.value("ok", true));
    EXPECT_NE(absent.value("error", "")
                  .find("input 0 -> output 3 is not a path of the running "
                        "matrix (paths: 0->0, 0->1, 1->2, 1->3); adding a "
                        "path needs a restart"),
              std::string::npos);
    const auto bad = ctl({"load", "matrix", (dir() / "broken.toml").string()});
    EXPECT_FALSE(bad.value("ok", true));
    EXPECT_NE(bad.value("error", "")
                  .find("broken.toml: path[3].file = 'missing-tweeter.txt': no "
                        "such file"),
              std::string::npos);
    const auto one_channel = ctl({"load", "0", (dir() / "tweeter.txt").string()});
    EXPECT_NE(one_channel.value("error", "").find("runs the routing matrix"), std::string::npos);
    const auto status = ctl({"status"});
    EXPECT_EQ(status.value("inputs", 0), 2);
    EXPECT_EQ(status.value("outputs", 0), 4);
    EXPECT_EQ(status.value("swaps", 0), 1);
    EXPECT_EQ(status.value("rejected_swaps", 0), 2);
    const auto& paths = status["matrix"]["paths"];
    ASSERT_EQ(paths.size(), 4u);
    EXPECT_EQ(paths[1]["input"], 0);
    EXPECT_EQ(paths[1]["output"], 1);
    EXPECT_EQ(paths[1]["file"], (dir() / "tweeter.txt").string());
    EXPECT_EQ(paths[1]["taps"], 255);
    EXPECT_DOUBLE_EQ(paths[1]["gain_db"].get<double>(), -2.0);
    EXPECT_EQ(paths[3]["taps"], 1023);
    EXPECT_EQ(paths[3]["invert"], false);
  });
  ASSERT_TRUE(swapped_now);
  ASSERT_GT(latency, 0u);
  const std::vector<float> before =
      process_offline(dir(), crossover_dir / "crossover-2way.toml", "before.wav");
  const std::vector<float> after = process_offline(dir(), dir() / "swapped.toml", "after.wav");
  const std::size_t frames = s_.signal_frames;
  ASSERT_EQ(before.size(), frames * outputs);

  for (std::size_t i = 0; i < latency * outputs; ++i)
    ASSERT_EQ(s_.recording[i], 0.0f) << "silence before the latency, sample " << i;
  // The swap's block: the first block whose left tweeter leaves the old matrix's output (by
  // more than float rounding against the channel's level: the linear-phase filters start
  // near zero, where a block's own relative error means nothing).
  double level = 0.0;
  for (std::size_t f = 0; f < frames; ++f)
    level += double(before[f * outputs + 1]) * before[f * outputs + 1];
  level = std::sqrt(level / double(frames));
  std::size_t swap = frames;
  for (std::size_t f = 0; f + period <= frames && swap == frames; f += period) {
    double differs = 0.0;
    for (std::size_t i = f; i < f + period; ++i) {
      const double d = double(s_.recording[(latency + i) * outputs + 1]) - before[i * outputs + 1];
      differs += d * d;
    }
    if (std::sqrt(differs / double(period)) > 1e-4 * level) swap = f;
  }
  std::printf("latency %zu frames; swap at signal frame %zu (%.3f s)\n", latency, swap,
              double(swap) / rate);
  ASSERT_GT(swap, 0u);
  ASSERT_LT(swap + period, frames);
  std::vector<float> blend(before.size());
  for (std::size_t f = 0; f < period; ++f) {
    const float w = float(f + 1) / float(period);
    for (std::size_t c = 0; c < outputs; ++c) {
      const std::size_t i = (swap + f) * outputs + c;
      blend[i] = before[i] + w * (after[i] - before[i]);
    }
  }
  for (std::size_t c = 0; c < outputs; ++c) {
    const double old_part = error(latency, before, c, 0, swap);
    const double fade = error(latency, blend, c, swap, swap + period);
    const double new_part = error(latency, after, c, swap + period, frames);
    std::printf("output %zu: relative error %.3g before, %.3g in the crossfade, %.3g after\n", c,
                old_part, fade, new_part);
    EXPECT_LT(old_part, 1e-5) << "output " << c << " before the swap";
    EXPECT_LT(fade, 1e-5) << "output " << c << ": the swap's block is the one-block crossfade";
    EXPECT_LT(new_part, 1e-5) << "output " << c << " after the swap (a lost sample shows here)";
  }
}

TEST_F(JackMatrixTest, ZeroLatencyModeRunsTheCrossoverWithNothingAdded) {
  if (!start_jack(outputs)) GTEST_SKIP() << skip_;
  const std::uint64_t seed = 1112;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  write_config("zero");
  late_periods_allowed_ = true;
  const std::size_t latency = stream(3.0, seed, [](double) {});
  EXPECT_EQ(latency, 0u);
  const std::vector<float> want =
      process_offline(dir(), crossover_dir / "crossover-2way.toml", "offline.wav");
  // A late period (rare; it happens on a loaded machine) is silent on every
  // output and shifts nothing: leave out the silent periods, as many as the
  // daemon counted late, and compare the rest.
  const std::size_t periods = s_.signal_frames / period;
  std::vector<bool> silent(periods, false);
  std::size_t silent_count = 0;
  for (std::size_t p = 0; p < periods; ++p) {
    bool zero = true, expected_zero = true;
    for (std::size_t i = p * period * outputs; i < (p + 1) * period * outputs; ++i) {
      zero = zero && s_.recording[i] == 0.0f;
      expected_zero = expected_zero && want[i] == 0.0f;
    }
    silent[p] = zero && !expected_zero;
    silent_count += silent[p];
  }
  std::printf("%zu of %zu periods silent, %ld late periods counted\n", silent_count, periods,
              late_periods_);
  EXPECT_LE(silent_count, static_cast<std::size_t>(late_periods_)) << "silence not counted late";
  EXPECT_LE(silent_count, periods / 20) << "late periods are rare";
  for (std::size_t c = 0; c < outputs; ++c) {
    std::vector<float> got, expected;
    for (std::size_t f = 0; f < periods * period; ++f) {
      if (silent[f / period]) continue;
      got.push_back(s_.recording[f * outputs + c]);
      expected.push_back(want[f * outputs + c]);
    }
    const double e = testing::relative_error(got, expected);
    std::printf("output %zu: relative error %.3g\n", c, e);
    EXPECT_LT(e, 1e-5) << "output " << c;
  }
}

TEST_F(JackMatrixTest, ADeviceWithFewerChannelsThanTheMatrixIsRefusedByName) {
  if (!start_jack(2)) GTEST_SKIP() << skip_;
  write_config("buffered");
  Child daemon({TAPSTREAM_BINARY, "run", "--config", (dir() / "live.toml").string()},
               dir() / "daemon.out", dir() / "daemon.err");
  EXPECT_EQ(daemon.wait_for(std::chrono::seconds(20)), 1);
  const std::string log = read_text(dir() / "daemon.err");
  std::printf("%s", log.c_str());
  EXPECT_NE(
      log.find("has 2 output channels, 4 needed (the matrix " +
               (crossover_dir / "crossover-2way.toml").string() + " has 2 inputs and 4 outputs)"),
      std::string::npos)
      << log;
}

}  // namespace
}  // namespace tapstream

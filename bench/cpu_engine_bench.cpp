// Throughput of the CPU engine: samples per second (frames x channels) for 2
// channels and 64, 1024, 16384, 65536 taps, with the automatic choice and each
// algorithm forced where it is reasonable. Prints a table and writes JSON.
//
//   cpu_engine_bench [OUT.json] [--commit SHA] [--seconds S]
//   cpu_engine_bench --calibrate        cost-model constants for dsp/cpu/cpu_cost_model.cpp
//   cpu_engine_bench --crossover        direct vs FFT by taps and block size
//   cpu_engine_bench --raw IN.f32 OUT.f32 TAPS.f32 [--channels C] [--block N]
//       filters a raw interleaved float32 file (the form BruteFIR reads), timing
//       only the engine, for bench/compare-cpu.sh

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "daemon/control/json.hpp"
#include "dsp/cpu/cpu_engine.hpp"
#include "dsp/cpu/cpu_simd.hpp"
#include "dsp/cpu/fftw_plan.hpp"

namespace {

using namespace tapstream;
using Clock = std::chrono::steady_clock;

std::vector<float> noise(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The source tree: this file's directory's parent (CMake compiles with absolute
// paths), for `git rev-parse` and the default results folder.
std::filesystem::path source_dir() {
  return std::filesystem::path(__FILE__).parent_path().parent_path();
}

std::string shell_line(const std::string& command) {
  std::string out;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::string utc_now(const char* format) {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, format, std::gmtime(&t));
  return buf;
}

// CPU time of the whole process: the engine's worker threads count too.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Seconds per call of f(), repeated until `seconds` of CPU time have passed (at
// least 3 calls). CPU time (all threads), not wall time, because the machines
// this runs on are often shared: another process's load then slows the wall
// clock but not the work counted here. Wall time is kept as well: with the
// engine's threads it can be below the CPU time on an idle machine.
struct CallTime {
  double cpu, wall;
};
template <class F>
CallTime time_per_call(F&& f, double seconds) {
  f();  // warm up
  std::size_t calls = 0;
  const auto start = Clock::now();
  const double cpu_start = cpu_seconds();
  double cpu = 0.0;
  while (calls < 3 || cpu < seconds) {
    f();
    ++calls;
    cpu = cpu_seconds() - cpu_start;
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  return {cpu / double(calls), wall / double(calls)};
}

struct Row {
  std::size_t taps, block;
  std::string forced, description;
  double samples_per_second;       // per CPU second, all threads
  double samples_per_wall_second;  // lower when the machine is shared
};

Row measure(std::size_t taps, std::size_t block, Algorithm algorithm, double seconds) {
  constexpr std::size_t channels = 2;
  const FilterBank bank = FilterBank::shared(noise(taps, taps, 1.0f / float(taps)), channels);
  EngineOptions options;
  options.max_block_frames = block;
  options.algorithm = algorithm;
  auto engine = make_cpu_engine(bank, options);
  // Enough distinct input that the FDL is in steady state and caches see a stream.
  const std::size_t blocks = std::max<std::size_t>(4, (1u << 20) / block);
  const auto in = noise(channels * block * blocks, 7);
  std::vector<float> out(channels * block);
  std::size_t next = 0;
  auto one_block = [&] {
    engine->process(std::span<const float>(in).subspan(next * channels * block, channels * block),
                    out, block, Layout::interleaved);
    next = (next + 1) % blocks;
  };
  const CallTime per_call = time_per_call(one_block, seconds);
  const char* forced = algorithm == Algorithm::direct ? "direct"
                       : algorithm == Algorithm::fft  ? "fft"
                                                      : "auto";
  return {taps,
          block,
          forced,
          engine->description(),
          double(channels * block) / per_call.cpu,
          double(channels * block) / per_call.wall};
}

int run_table(const std::string& json_path, std::string commit, double seconds) {
  std::vector<Row> rows;
  std::printf("%-7s %-6s %-7s %14s %14s %10s  %s\n", "taps", "block", "choice", "samples/cpu-s",
              "samples/wall-s", "x realtime", "engine");
  for (std::size_t taps : {64, 1024, 16384, 65536}) {
    for (std::size_t block : {256, 8192}) {
      for (Algorithm a : {Algorithm::automatic, Algorithm::direct, Algorithm::fft}) {
        if (a == Algorithm::direct && taps > 16384) continue;  // minutes per second of audio
        const Row r = measure(taps, block, a, seconds);
        std::printf("%-7zu %-6zu %-7s %14.4g %14.4g %10.0f  %s\n", r.taps, r.block,
                    r.forced.c_str(), r.samples_per_second, r.samples_per_wall_second,
                    r.samples_per_wall_second / (2 * 48000.0), r.description.c_str());
        std::fflush(stdout);
        rows.push_back(r);
      }
    }
  }
  if (commit.empty()) {
    commit = shell_line("git -C '" + source_dir().string() + "' rev-parse HEAD 2>/dev/null");
  }
  std::filesystem::path path = json_path;
  if (path.empty()) {
    path = source_dir() / "bench" / "results" / ("cpu-" + utc_now("%Y-%m-%d") + ".json");
  }
  std::filesystem::create_directories(path.parent_path());
  Json json;
  json["benchmark"] = "cpu_engine_bench";
  json["commit"] = commit;
  json["machine"] = {{"cpu", cpu_model()}, {"cores", std::thread::hardware_concurrency()}};
  json["date"] = utc_now("%Y-%m-%dT%H:%M:%SZ");
  json["unit"] =
      "samples (frames x channels) per second of CPU time (all threads); wall-clock rate beside "
      "it; 2 channels, interleaved, 48 kHz realtime = 96000";
  json["results"] = Json::array();
  for (const Row& r : rows) {
    json["results"].push_back(
        {{"taps", r.taps},
         {"block_frames", r.block},
         {"algorithm", r.forced},
         {"engine", r.description},
         {"samples_per_second", std::llround(r.samples_per_second)},
         {"samples_per_wall_second", std::llround(r.samples_per_wall_second)}});
  }
  std::ofstream(path) << json.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
  std::printf("wrote %s\n", path.c_str());
  return 0;
}

// Where direct form stops being faster than the FFT path, by block size, and
// whether the automatic choice agrees.
int run_crossover(double seconds) {
  std::printf("%-6s %-6s %14s %14s %-7s %-7s\n", "block", "taps", "direct/cpu-s", "fft/cpu-s",
              "faster", "auto");
  int disagreements = 0;
  for (std::size_t block : {64, 256, 1024, 8192}) {
    for (std::size_t taps : {16, 32, 64, 96, 128, 192, 256, 384, 512, 1024}) {
      const Row d = measure(taps, block, Algorithm::direct, seconds);
      const Row f = measure(taps, block, Algorithm::fft, seconds);
      const Row a = measure(taps, block, Algorithm::automatic, 0.0);
      const bool direct_faster = d.samples_per_second >= f.samples_per_second;
      const bool auto_direct = a.description.find("direct") != std::string::npos;
      disagreements += direct_faster != auto_direct;
      std::printf("%-6zu %-6zu %14.4g %14.4g %-7s %-7s\n", block, taps, d.samples_per_second,
                  f.samples_per_second, direct_faster ? "direct" : "fft",
                  auto_direct ? "direct" : "fft");
    }
  }
  std::printf("automatic choice differs from the faster one in %d cases\n", disagreements);
  return 0;
}

// Constants of the cost model in dsp/cpu/cpu_cost_model.cpp, in nanoseconds.
int run_calibrate() {
  std::printf("FFT pair (forward + inverse), ns per N log2 N:\n");
  for (std::size_t n = 32; n <= 131072; n *= 2) {
    auto fft = fftw::RealFftPair::get(n);
    const std::size_t bins = fftw::padded_bins(n);
    fftw::AlignedFloats t(n), s(2 * bins), o(n);
    auto x = noise(n, 1);
    std::copy(x.begin(), x.end(), t.data());
    const CallTime sec = time_per_call(
        [&] {
          fft->forward(t.data(), s.data());
          fft->inverse(s.data(), o.data());
        },
        0.1);
    std::printf("  N %7zu: %10.1f ns  %.4f ns/(N log2 N)\n", n, sec.cpu * 1e9,
                sec.cpu * 1e9 / (double(n) * std::log2(double(n))));
  }
  std::printf("delay-line products, ns per bin per term:\n");
  for (std::size_t slots : {8, 64}) {
    for (std::size_t bins : {544, 4128, 32800}) {
      const std::size_t blocks = bins / simd::kBlockBins;
      fftw::AlignedFloats x(blocks * slots * simd::kBlockFloats),
          h(blocks * slots * simd::kBlockFloats), out(blocks * simd::kBlockFloats);
      const CallTime sec = time_per_call(
          [&] {
            simd::delay_line_products(x.data(), slots * simd::kBlockFloats, slots, 3, h.data(),
                                      slots * simd::kBlockFloats, slots - 1, out.data(), blocks);
          },
          0.1);
      std::printf("  %3zu slots x %6zu bins (%6.2f MiB): %.4f ns\n", slots, bins,
                  double(2 * x.size() * sizeof(float)) / (1 << 20),
                  sec.cpu * 1e9 / double(bins * (slots - 1)));
    }
  }
  std::printf("direct form, ns per tap per output:\n");
  for (std::size_t taps : {16, 64, 256}) {
    const std::size_t frames = 1024;
    auto x = noise(frames + taps + 64, 3);
    auto h = noise(taps, 4);
    std::vector<float> y(frames);
    const CallTime sec =
        time_per_call([&] { simd::direct_fir(x.data(), h.data(), taps, y.data(), frames); }, 0.1);
    std::printf("  %4zu taps: %.4f ns\n", taps, sec.cpu * 1e9 / double(frames * taps));
  }
  return 0;
}

std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  in.seekg(0, std::ios::end);
  const auto bytes = std::size_t(in.tellg());
  in.seekg(0);
  std::vector<float> v(bytes / sizeof(float));
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  return v;
}

int run_raw(const std::string& in_path, const std::string& out_path, const std::string& taps_path,
            std::size_t channels, std::size_t block) {
  const auto t0 = Clock::now();
  const auto in = read_f32(in_path);
  const FilterBank bank = FilterBank::shared(read_f32(taps_path), channels, taps_path);
  EngineOptions options;
  options.max_block_frames = block;
  auto engine = make_cpu_engine(bank, options);
  const auto t1 = Clock::now();
  std::vector<float> out(in.size());
  const std::size_t frames = in.size() / channels;
  for (std::size_t done = 0; done < frames;) {
    const std::size_t n = std::min(block, frames - done);
    engine->process(std::span<const float>(in).subspan(done * channels, n * channels),
                    std::span<float>(out).subspan(done * channels, n * channels), n,
                    Layout::interleaved);
    done += n;
  }
  const auto t2 = Clock::now();
  std::ofstream(out_path, std::ios::binary)
      .write(reinterpret_cast<const char*>(out.data()), std::streamsize(out.size() * 4));
  const auto t3 = Clock::now();
  const double setup = std::chrono::duration<double>(t1 - t0).count();
  const double filter = std::chrono::duration<double>(t2 - t1).count();
  const double write = std::chrono::duration<double>(t3 - t2).count();
  std::printf("%s\nsetup %.3f s, filtering %.3f s (%.4g samples/s), write %.3f s\n",
              engine->description().c_str(), setup, filter, double(in.size()) / filter, write);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (!args.empty() && args[0] == "--calibrate") return run_calibrate();
    if (!args.empty() && args[0] == "--crossover") return run_crossover(0.1);
    if (!args.empty() && args[0] == "--raw") {
      if (args.size() < 4)
        throw std::invalid_argument("--raw IN OUT TAPS [--channels C] [--block N]");
      std::size_t channels = 2, block = 8192;
      for (std::size_t i = 4; i + 1 < args.size(); i += 2) {
        if (args[i] == "--channels")
          channels = std::stoul(args[i + 1]);
        else if (args[i] == "--block")
          block = std::stoul(args[i + 1]);
        else
          throw std::invalid_argument("unknown option " + args[i]);
      }
      return run_raw(args[1], args[2], args[3], channels, block);
    }
    std::string json, commit;
    double seconds = 0.5;
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--commit" && i + 1 < args.size())
        commit = args[++i];
      else if (args[i] == "--seconds" && i + 1 < args.size())
        seconds = std::stod(args[++i]);
      else
        json = args[i];
    }
    return run_table(json, commit, seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpu_engine_bench: %s\n", e.what());
    return 1;
  }
}

// What a path's delay costs on the matrix engines (issue 24's target: a
// 2 -> 64 matrix with delays up to 24,000 frames costs within 10 % of the
// same matrix without delays, both engines). Every input to every output,
// 128 paths of TAPS taps, run with no delays and with delays spread up to
// 24,000 frames (0.5 s at 48 kHz), at several call sizes, calls back to back.
// The cost is engine time per second of 48 kHz audio: the calling thread's
// CPU time for the CPU engine (single-threaded), wall time for the CUDA
// engine (it waits for the device). Best of the rounds, rounds alternating
// so that both matrices see the same machine. Prints the ratio and, per call
// size and in all, whether the target is met; --folded also times the
// delays as leading zeros of the taps (what the engines ran before), one
// round. Exit status 0 when every ratio is within the target, 1 otherwise.
//
// For the CPU engine each row is followed by the plans' work, counted
// (dsp/cpu/cpu_matrix_plan: transforms and bin multiply-adds per second of
// audio, and the cost model's price of them); --partitions runs the CPU
// engine at each partition given (0: the cost model's choice,
// EngineOptions::cpu.matrix_partition), to see whether the model picks the
// measured optimum.
//
//   matrix_delay_bench [--engines cpu,cuda] [--taps 4096] [--seconds 10] [--rounds 5]
//                      [--max-delay 24000] [--blocks 64,256,16384] [--folded]
//                      [--inputs 2] [--outputs 64] [--partitions 0,2048,4096]
//                      [--delay-grid G]
// (--delay-grid G: each delay rounded down to a multiple of G frames, so
// that with partitions of G, or of 2G and paths of at most G taps, no
// remainder adds a partition: what an engine that took the remainders
// elsewhere at no cost would run, a bound on what removing them can save.)
// (--inputs/--outputs: another full matrix, e.g. 8 -> 2 for HeSuVi's shape;
// its "no delay" column is then that matrix's cost.)

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/engine_factory.hpp"
#include "dsp/cpu/cpu_matrix_plan.hpp"
#include "dsp/model/routing_matrix.hpp"

namespace {

using namespace tapstream;

constexpr double kTarget = 1.10;

double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<float> noise(std::size_t n, std::uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// fold: the delays as leading zeros of the taps, for comparison; grid: each
// delay rounded down to a multiple of it (0: as drawn).
RoutingMatrix make_matrix(std::size_t inputs, std::size_t outputs, std::size_t taps,
                          std::size_t max_delay, bool fold = false, std::size_t grid = 0) {
  const std::size_t kInputs = inputs, kOutputs = outputs;
  std::mt19937_64 rng(2026);
  std::uniform_int_distribution<std::size_t> delay(0, max_delay);
  std::vector<MatrixPath> paths;
  for (std::size_t o = 0; o < kOutputs; ++o) {
    for (std::size_t i = 0; i < kInputs; ++i) {
      MatrixPath p;
      p.input = i;
      p.output = o;
      p.taps = noise(taps, 100 + o * kInputs + i, 0.01f);
      p.delay_frames = max_delay == 0 ? 0 : delay(rng);
      if (grid != 0) p.delay_frames -= p.delay_frames % grid;
      if (fold) {
        p.taps.insert(p.taps.begin(), p.delay_frames, 0.0f);
        p.delay_frames = 0;
      }
      p.source = "bench";
      paths.push_back(std::move(p));
    }
  }
  return RoutingMatrix::make(kInputs, kOutputs, std::move(paths), taps + max_delay);
}

// Engine seconds per second of 48 kHz audio, calls of `block` frames.
double cost(MatrixEngine& engine, bool cpu, std::size_t block, double seconds) {
  const std::size_t frames = std::size_t(seconds * 48000.0);
  const std::vector<float> in = noise(engine.inputs() * block, 7, 0.5f);
  std::vector<float> out(engine.outputs() * block);
  for (int warm = 0; warm < 20; ++warm) engine.process(in, out, block, Layout::interleaved);
  const double start = cpu ? thread_seconds() : wall_seconds();
  for (std::size_t done = 0; done < frames; done += block)
    engine.process(in, out, block, Layout::interleaved);
  return ((cpu ? thread_seconds() : wall_seconds()) - start) / seconds;
}

// The plan's work, counted, and the cost model's price: one line.
std::string plan_line(const RoutingMatrix& m, std::size_t block, std::size_t partition) {
  const CpuMatrixWork w = cpu_matrix_work(CpuMatrixShape::of(m), block, partition, 48000.0);
  char text[200];
  std::snprintf(text, sizeof text,
                "P %5zu: %7.0f transforms/s (%zu-point), %6.1f M bin products/s, model %.4f s/s",
                partition, w.forward_transforms + w.inverse_transforms, 2 * partition,
                w.bin_products / 1e6, w.model_seconds);
  return text;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) items.push_back(item);
  return items;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t taps = 4096, max_delay = 24000, inputs = 2, outputs = 64, grid = 0;
  std::vector<std::string> engines = {"cpu"};
  std::vector<std::size_t> blocks = {64, 256, 16384};
  std::vector<std::size_t> partitions = {0};
  double seconds = 10.0;
  int rounds = 5;
  bool folded_too = false;
  for (int a = 1; a < argc; ++a) {
    const std::string key = argv[a];
    if (key == "--folded") {
      folded_too = true;
      continue;
    }
    if (a + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", argv[a]);
      return 2;
    }
    const char* value = argv[++a];
    if (key == "--taps") {
      taps = std::strtoul(value, nullptr, 10);
    } else if (key == "--seconds") {
      seconds = std::strtod(value, nullptr);
    } else if (key == "--rounds") {
      rounds = std::atoi(value);
    } else if (key == "--max-delay") {
      max_delay = std::strtoul(value, nullptr, 10);
    } else if (key == "--inputs") {
      inputs = std::strtoul(value, nullptr, 10);
    } else if (key == "--outputs") {
      outputs = std::strtoul(value, nullptr, 10);
    } else if (key == "--engines") {
      engines = split(value);
    } else if (key == "--blocks") {
      blocks.clear();
      for (const std::string& b : split(value))
        blocks.push_back(std::strtoul(b.c_str(), nullptr, 10));
    } else if (key == "--delay-grid") {
      grid = std::strtoul(value, nullptr, 10);
    } else if (key == "--partitions") {
      partitions.clear();
      for (const std::string& p : split(value))
        partitions.push_back(std::strtoul(p.c_str(), nullptr, 10));
    } else {
      std::fprintf(stderr, "unknown option %s\n", argv[a - 1]);
      return 2;
    }
  }
  if (taps == 0 || seconds <= 0 || rounds < 1 || blocks.empty() || engines.empty() || inputs == 0 ||
      outputs == 0 || partitions.empty()) {
    std::fprintf(stderr,
                 "--taps, --seconds, --rounds, --blocks, --engines, --inputs and --outputs must be "
                 "positive\n");
    return 2;
  }
  const RoutingMatrix plain = make_matrix(inputs, outputs, taps, 0);
  const RoutingMatrix delayed = make_matrix(inputs, outputs, taps, max_delay, false, grid);
  std::printf(
      "%zu -> %zu, %zu paths of %zu taps; delays 0..%zu frames (longest %zu); target: "
      "delays within %.0f %% of none\n",
      inputs, outputs, inputs * outputs, taps, max_delay, delayed.max_delay_frames(),
      (kTarget - 1.0) * 100.0);
  std::printf("%-5s %8s  %14s  %14s  %7s  %-6s  %16s  %s\n", "engine", "block", "no delay (s/s)",
              "delays (s/s)", "ratio", "target", "folded (s/s)", "engines");
  bool all_met = true;
  for (const std::string& name : engines) {
    Backend backend;
    try {
      backend = parse_backend(name);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "--engines: %s\n", e.what());
      return 2;
    }
    const bool cpu = backend == Backend::cpu;
    for (const std::size_t block : blocks) {
      for (const std::size_t partition : partitions) {
        if (!cpu && partition != 0) continue;
        EngineOptions options;
        options.max_block_frames = block;
        options.max_taps = taps;
        options.cpu.matrix_partition = partition;
        try {
          const auto a = make_engine(backend, plain, options);
          const auto b = make_engine(backend, delayed, options);
          double best_a = 1e300, best_b = 1e300, folded = 0.0;
          for (int r = 0; r < rounds; ++r) {
            best_a = std::min(best_a, cost(*a, cpu, block, seconds));
            best_b = std::min(best_b, cost(*b, cpu, block, seconds));
          }
          if (folded_too) {
            EngineOptions wide = options;
            wide.max_taps = taps + max_delay;
            const auto c =
                make_engine(backend, make_matrix(inputs, outputs, taps, max_delay, true), wide);
            folded = cost(*c, cpu, block, seconds);  // one round: it is slow
          }
          const double ratio = best_b / best_a;
          const bool met = ratio <= kTarget;
          all_met = all_met && met;
          std::printf("%-5s %8zu  %14.4f  %14.4f  %7.3f  %-6s  %16.4f  %s | %s\n", name.c_str(),
                      block, best_a, best_b, ratio, met ? "met" : "missed", folded,
                      a->description().c_str(), b->description().c_str());
          if (cpu) {
            const std::size_t pa =
                partition != 0 ? partition : cpu_matrix_partition(CpuMatrixShape::of(plain), block);
            const std::size_t pb = partition != 0
                                       ? partition
                                       : cpu_matrix_partition(CpuMatrixShape::of(delayed), block);
            std::printf("      no delay %s\n      delays   %s\n",
                        plan_line(plain, block, pa).c_str(), plan_line(delayed, block, pb).c_str());
          }
        } catch (const std::exception& e) {
          all_met = false;
          std::printf("%-5s %8zu  failed: %s\n", name.c_str(), block, e.what());
        }
        std::fflush(stdout);
      }
    }
  }
  std::printf("delays within %.0f %% of none at every call size measured: %s\n",
              (kTarget - 1.0) * 100.0, all_met ? "met" : "missed");
  return all_met ? 0 : 1;
}

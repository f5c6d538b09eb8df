// What a path's delay costs on the CPU matrix engine: a 2 -> 64 matrix (every
// input to every output, 128 paths of TAPS taps) run with no delays and with
// delays spread up to 24,000 frames (0.5 s at 48 kHz), at several call sizes.
// Prints engine CPU time per second of audio for both and their ratio (best
// of the rounds, rounds alternating so that both see the same machine).
//
//   matrix_delay_bench [--taps 4096] [--seconds 10] [--rounds 5] [--max-delay 24000] [--block N]

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dsp/cpu/cpu_matrix_engine.hpp"
#include "dsp/model/routing_matrix.hpp"

namespace {

using namespace tapstream;

double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

std::vector<float> noise(std::size_t n, std::uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// fold: the delays as leading zeros of the taps (what the engine ran before
// delays were delays), for comparison.
RoutingMatrix make_matrix(std::size_t taps, std::size_t max_delay, bool fold = false) {
  constexpr std::size_t kInputs = 2, kOutputs = 64;
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

// Engine CPU seconds per second of audio at 48 kHz, calls of `block` frames.
double cost(MatrixEngine& engine, std::size_t block, double seconds) {
  const std::size_t frames = std::size_t(seconds * 48000.0);
  const std::vector<float> in = noise(engine.inputs() * block, 7, 0.5f);
  std::vector<float> out(engine.outputs() * block);
  const double start = thread_seconds();
  for (std::size_t done = 0; done < frames; done += block)
    engine.process(in, out, block, Layout::interleaved);
  return (thread_seconds() - start) / seconds;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t taps = 4096, max_delay = 24000, only_block = 0;
  double seconds = 10.0;
  int rounds = 5;
  for (int a = 1; a + 1 < argc; a += 2) {
    const std::string key = argv[a];
    if (key == "--taps")
      taps = std::strtoul(argv[a + 1], nullptr, 10);
    else if (key == "--seconds")
      seconds = std::strtod(argv[a + 1], nullptr);
    else if (key == "--rounds")
      rounds = std::atoi(argv[a + 1]);
    else if (key == "--max-delay")
      max_delay = std::strtoul(argv[a + 1], nullptr, 10);
    else if (key == "--block")
      only_block = std::strtoul(argv[a + 1], nullptr, 10);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[a]);
      return 2;
    }
  }
  const RoutingMatrix plain = make_matrix(taps, 0);
  const RoutingMatrix delayed = make_matrix(taps, max_delay);
  const RoutingMatrix folded = make_matrix(taps, max_delay, /*fold=*/true);
  std::printf("2 -> 64, 128 paths of %zu taps; delays 0..%zu frames (longest %zu)\n", taps,
              max_delay, delayed.max_delay_frames());
  std::printf("%8s  %14s  %14s  %7s  %16s  %s\n", "block", "no delay (s/s)", "delays (s/s)",
              "ratio", "folded (s/s)", "engines");
  for (const std::size_t block : {std::size_t(64), std::size_t(256), std::size_t(16384)}) {
    if (only_block != 0 && block != only_block) continue;
    EngineOptions options;
    options.max_block_frames = block;
    const auto a = make_cpu_matrix_engine(plain, options);
    const auto b = make_cpu_matrix_engine(delayed, options);
    const auto c = make_cpu_matrix_engine(folded, options);
    double best_a = 1e300, best_b = 1e300, best_c = 1e300;
    for (int r = 0; r < rounds; ++r) {
      best_a = std::min(best_a, cost(*a, block, seconds));
      best_b = std::min(best_b, cost(*b, block, seconds));
      if (r == 0) best_c = cost(*c, block, seconds);  // one round: it is slow
    }
    std::printf("%8zu  %14.4f  %14.4f  %7.3f  %16.4f  %s | %s\n", block, best_a, best_b,
                best_b / best_a, best_c, a->description().c_str(), b->description().c_str());
  }
  return 0;
}

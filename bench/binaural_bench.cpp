// The CPU matrix engine's load for the binaural layouts at live periods
// (issue 24's targets): HeSuVi 7.1 -> 2 (16 paths: 14 responses and the LFE on
// the centre's) of 8192 taps, and SOFA-style virtual sources -> 2 (two paths a
// source) of 512 taps, 64 sources. Prints the share of one core (engine CPU
// time / audio time) at 64-frame calls, and the slowest call against the
// period: its 99.9th percentile and the slowest (best of the rounds).
//
//   binaural_bench [--seconds 10] [--rounds 3] [--period 64] [--sources 64]

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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

MatrixPath path(std::size_t input, std::size_t output, std::size_t taps, std::uint64_t seed) {
  MatrixPath p;
  p.input = input;
  p.output = output;
  p.taps = noise(taps, seed, 0.01f);
  p.source = "bench";
  return p;
}

struct Load {
  double share = 1e300;     // engine CPU seconds per audio second
  double worst_us = 1e300;  // slowest call
  double p999_us = 1e300;   // 99.9th percentile of the calls
};

Load measure(const RoutingMatrix& matrix, std::size_t period, double seconds, int rounds) {
  EngineOptions options;
  options.max_block_frames = period;
  const auto engine = make_cpu_matrix_engine(matrix, options);
  std::printf("  %s\n", engine->description().c_str());
  const std::vector<float> in = noise(matrix.inputs() * period, 7, 0.5f);
  std::vector<float> out(matrix.outputs() * period);
  const std::size_t calls = std::size_t(seconds * 48000.0) / period;
  Load best;
  for (int r = 0; r < rounds; ++r) {
    std::vector<double> times(calls);
    const double start = thread_seconds();
    for (std::size_t c = 0; c < calls; ++c) {
      const double t0 = thread_seconds();
      engine->process(in, out, period, Layout::interleaved);
      times[c] = thread_seconds() - t0;
    }
    best.share = std::min(best.share, (thread_seconds() - start) / seconds);
    std::sort(times.begin(), times.end());
    best.worst_us = std::min(best.worst_us, times.back() * 1e6);
    best.p999_us = std::min(best.p999_us, times[times.size() * 999 / 1000] * 1e6);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10.0;
  int rounds = 3;
  std::size_t period = 64, sources = 64;
  for (int a = 1; a + 1 < argc; a += 2) {
    const std::string key = argv[a];
    if (key == "--seconds")
      seconds = std::strtod(argv[a + 1], nullptr);
    else if (key == "--rounds")
      rounds = std::atoi(argv[a + 1]);
    else if (key == "--period")
      period = std::strtoul(argv[a + 1], nullptr, 10);
    else if (key == "--sources")
      sources = std::strtoul(argv[a + 1], nullptr, 10);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[a]);
      return 2;
    }
  }
  const double period_us = 1e6 * double(period) / 48000.0;
  std::vector<MatrixPath> hesuvi;
  for (std::size_t input = 0; input < 8; ++input)
    for (std::size_t ear = 0; ear < 2; ++ear)
      hesuvi.push_back(path(input, ear, 8192, 10 + input * 2 + ear));
  std::printf("HeSuVi 7.1 -> 2, 16 paths of 8192 taps, %zu-frame calls at 48 kHz:\n", period);
  const Load h = measure(RoutingMatrix::make(8, 2, std::move(hesuvi)), period, seconds, rounds);
  std::printf("  %.1f %% of one core; calls: p99.9 %.0f us, slowest %.0f us, of a %.0f us period\n",
              100.0 * h.share, h.p999_us, h.worst_us, period_us);
  std::vector<MatrixPath> sofa;
  for (std::size_t s = 0; s < sources; ++s)
    for (std::size_t ear = 0; ear < 2; ++ear) sofa.push_back(path(s, ear, 512, 1000 + s * 2 + ear));
  std::printf("SOFA %zu sources -> 2, %zu paths of 512 taps, %zu-frame calls at 48 kHz:\n", sources,
              2 * sources, period);
  const Load s = measure(RoutingMatrix::make(sources, 2, std::move(sofa)), period, seconds, rounds);
  std::printf("  %.1f %% of one core; calls: p99.9 %.0f us, slowest %.0f us, of a %.0f us period\n",
              100.0 * s.share, s.p999_us, s.worst_us, period_us);
  return 0;
}

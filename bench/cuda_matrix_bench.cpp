// Routing-matrix benchmark: live capacity and offline throughput of the
// native matrix engines, CUDA and CPU, in one run; the CUDA engine with its
// two MAC kernels (tiled, cuBLAS batched CGEMM) side by side, and the tiled
// one without CUDA graphs (each launch from the host) for comparison.
//
//   cuda_matrix_bench [OUT.json] [--commit SHA] [--blocks N]
//
// Live: 48 kHz, 128-frame blocks, 8192-tap paths, square N x N matrices of
// distinct random filters; the time of each call from host input to host
// output over --blocks calls (after a warm-up), p50 / p99 / p99.9; the
// capacity is the largest N x N whose p99.9 stays under half the block
// period (1.33 ms). Offline: frames per second through 65536-frame calls.
// Floors printed beside: the bytes of path spectra one block reads.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "dsp/cpu/cpu_engine.hpp"
#include "dsp/cpu/cpu_matrix_engine.hpp"
#include "dsp/model/matrix_filter.hpp"
#include "kernels/cuda_engine.hpp"
#include "kernels/matrix/cuda_matrix_engine.hpp"

namespace {

using namespace tapstream;
using Clock = std::chrono::steady_clock;

constexpr double kRate = 48000.0;
constexpr std::size_t kBlock = 128;
constexpr std::size_t kTaps = 8192;
constexpr double kHalfPeriodUs = 1e6 * kBlock / kRate / 2.0;

RoutingMatrix square_matrix(std::size_t n, std::size_t taps, std::uint64_t seed) {
  // xorshift64: big matrices hold billions of taps, made in about a second.
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  std::vector<MatrixPath> paths;
  paths.reserve(n * n);
  for (std::size_t o = 0; o < n; ++o) {
    for (std::size_t i = 0; i < n; ++i) {
      MatrixPath p;
      p.input = i;
      p.output = o;
      p.taps.resize(taps);
      for (float& t : p.taps) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        t = (float(state >> 40) / float(1 << 24) * 2.0f - 1.0f) * 0.01f;  // [-0.01, 0.01)
      }
      p.source = "random";
      paths.push_back(std::move(p));
    }
  }
  return RoutingMatrix::make(n, n, std::move(paths));
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, std::size_t(q * double(v.size() - 1) + 0.5));
  return v[i];
}

struct LiveResult {
  std::size_t n = 0;
  double p50 = 0, p99 = 0, p999 = 0, max = 0;
};

LiveResult time_live(MatrixEngine& engine, std::size_t blocks) {
  const std::size_t n_in = engine.inputs(), n_out = engine.outputs();
  std::vector<float> in(n_in * kBlock), out(n_out * kBlock);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : in) x = dist(rng);
  for (std::size_t b = 0; b < 200; ++b) engine.process(in, out, kBlock, Layout::interleaved);
  std::vector<double> us;
  us.reserve(blocks);
  for (std::size_t b = 0; b < blocks; ++b) {
    const auto t0 = Clock::now();
    engine.process(in, out, kBlock, Layout::interleaved);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  LiveResult r;
  r.n = n_in;
  r.p50 = percentile(us, 0.50);
  r.p99 = percentile(us, 0.99);
  r.p999 = percentile(us, 0.999);
  r.max = *std::max_element(us.begin(), us.end());
  return r;
}

double offline_frames_per_second(MatrixEngine& engine, std::size_t calls) {
  const std::size_t block = engine.max_block_frames();
  std::vector<float> in(engine.inputs() * block, 0.25f), out(engine.outputs() * block);
  engine.process(in, out, block, Layout::planar);
  const auto t0 = Clock::now();
  for (std::size_t c = 0; c < calls; ++c) engine.process(in, out, block, Layout::planar);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return double(calls * block) / s;
}

using Factory = std::unique_ptr<MatrixEngine> (*)(const RoutingMatrix&, const EngineOptions&);

// The CPU engine with one channel per path: its worker pool spreads the paths
// over every core, where the native matrix engine runs on the caller's.
std::unique_ptr<MatrixEngine> make_cuda_tiled(const RoutingMatrix& m,
                                              const EngineOptions& options) {
  EngineOptions tiled = options;
  tiled.cuda.matrix_kernel = CudaMatrixKernel::tiled;
  return make_cuda_matrix_engine(m, tiled);
}

std::unique_ptr<MatrixEngine> make_cuda_cublas(const RoutingMatrix& m,
                                               const EngineOptions& options) {
  EngineOptions cublas = options;
  cublas.cuda.matrix_kernel = CudaMatrixKernel::cublas;
  return make_cuda_matrix_engine(m, cublas);
}

std::unique_ptr<MatrixEngine> make_cuda_tiled_without_graphs(const RoutingMatrix& m,
                                                             const EngineOptions& options) {
  EngineOptions tiled = options;
  tiled.cuda.matrix_kernel = CudaMatrixKernel::tiled;
  tiled.cuda.matrix_graphs = false;
  return make_cuda_matrix_engine(m, tiled);
}

std::unique_ptr<MatrixEngine> make_cpu_per_path(const RoutingMatrix& m,
                                                const EngineOptions& options) {
  return std::make_unique<MatrixFilter>(m, make_cpu_engine(m.path_bank(), options));
}

nlohmann::json capacity(const char* name, Factory make, const std::vector<std::size_t>& sizes,
                        std::size_t blocks) {
  nlohmann::json rows = nlohmann::json::array();
  std::size_t best = 0;
  for (std::size_t n : sizes) {
    const RoutingMatrix m = square_matrix(n, kTaps, n);
    EngineOptions options;
    options.max_block_frames = kBlock;
    const auto engine = make(m, options);
    const LiveResult r = time_live(*engine, blocks);
    const double spectra_mb =
        double(n * n) * double(kTaps / kBlock) * double(kBlock + 1) * 8.0 / 1e6;
    std::printf(
        "%-14s %4zu x %-4zu %6zu paths  p50 %8.1f us  p99 %8.1f us  p99.9 %8.1f us  max %8.1f us"
        "  (spectra read per block %.0f MB)  %s\n",
        name, n, n, n * n, r.p50, r.p99, r.p999, r.max, spectra_mb, engine->description().c_str());
    std::fflush(stdout);
    rows.push_back({{"inputs", n},
                    {"outputs", n},
                    {"paths", n * n},
                    {"p50_us", r.p50},
                    {"p99_us", r.p99},
                    {"p999_us", r.p999},
                    {"max_us", r.max},
                    {"spectra_mb_per_block", spectra_mb},
                    {"description", engine->description()}});
    if (r.p999 < kHalfPeriodUs) {
      best = n;
    } else {
      break;
    }
  }
  std::printf("%-12s capacity at %zu frames, %zu taps: %zu x %zu = %zu paths (p99.9 < %.0f us)\n",
              name, kBlock, kTaps, best, best, best * best, kHalfPeriodUs);
  return {{"engine", name}, {"block_frames", kBlock},        {"taps", kTaps},
          {"rows", rows},   {"capacity_paths", best * best}, {"capacity_side", best}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path, commit = "unknown";
  std::size_t blocks = 5000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--commit" && i + 1 < argc) {
      commit = argv[++i];
    } else if (a == "--blocks" && i + 1 < argc) {
      blocks = std::stoul(argv[++i]);
    } else {
      out_path = a;
    }
  }
  std::string reason;
  nlohmann::json report = {{"benchmark", "cuda_matrix_bench"}, {"commit", commit}};
  const bool gpu = cuda_device_available(&reason);
  std::printf("GPU: %s\n", gpu ? "yes" : reason.c_str());

  nlohmann::json live = nlohmann::json::array();
  if (gpu) {
    const std::vector<std::size_t> sizes = {8, 16, 32, 48, 64, 96, 128, 160, 192, 224, 256};
    live.push_back(capacity("cuda", make_cuda_tiled, sizes, blocks));
    live.push_back(
        capacity("cuda-cublas", make_cuda_cublas, {8, 32, 64, 128, 160, 192, 224, 256}, blocks));
    live.push_back(capacity("cuda-no-graphs", make_cuda_tiled_without_graphs, {8, 64}, blocks));
  }
  live.push_back(capacity("cpu", make_cpu_matrix_engine, {1, 2, 4, 6, 8, 12, 16}, blocks));
  live.push_back(capacity("cpu-per-path", make_cpu_per_path, {2, 8, 16, 24, 28, 32}, blocks));
  report["live"] = live;

  nlohmann::json offline = nlohmann::json::array();
  for (const auto& [n_in, n_out] :
       std::vector<std::pair<std::size_t, std::size_t>>{{2, 4}, {16, 16}}) {
    std::vector<MatrixPath> paths;
    for (std::size_t o = 0; o < n_out; ++o)
      for (std::size_t i = 0; i < n_in; ++i) {
        MatrixPath p;
        p.input = i;
        p.output = o;
        p.taps.assign(kTaps, 0.001f);
        paths.push_back(std::move(p));
      }
    const RoutingMatrix m = RoutingMatrix::make(n_in, n_out, std::move(paths));
    EngineOptions options;
    options.max_block_frames = 65536;
    for (const auto& [name, make] :
         std::vector<std::pair<const char*, Factory>>{{"cuda", make_cuda_tiled},
                                                      {"cuda-cublas", make_cuda_cublas},
                                                      {"cpu", make_cpu_matrix_engine},
                                                      {"cpu-per-path", make_cpu_per_path}}) {
      const bool cuda = std::string(name).starts_with("cuda");
      if (cuda && !gpu) continue;
      const auto engine = make(m, options);
      const double fps = offline_frames_per_second(*engine, cuda ? 64 : 16);
      std::printf("offline %-12s %zu -> %zu, %zu taps: %.3g frames/s (%.0fx real time)  %s\n", name,
                  n_in, n_out, kTaps, fps, fps / kRate, engine->description().c_str());
      offline.push_back({{"engine", name},
                         {"inputs", n_in},
                         {"outputs", n_out},
                         {"taps", kTaps},
                         {"frames_per_second", fps}});
    }
  }
  report["offline"] = offline;
  if (!out_path.empty()) {
    std::ofstream(out_path) << report.dump(2) << "\n";
    std::printf("wrote %s\n", out_path.c_str());
  }
  return 0;
}

// The partitioned streaming path's costs on the device (issue 8), as JSON
// lines on stdout:
// - "call": Engine::process round trips (engine pinned staging, interleaved,
//   back to back) for a configuration and kernel option, p50 / p99 / p99.9 of
//   the whole call and of its CPU-side part (CudaEngine::last_call_host_us:
//   host copies, launches, enqueueing; the rest is waiting for the device);
// - "step": one tail step's device time and enqueue time by partition size,
//   partition count and channel count (the cost model's tail constants);
// - "head": one head call's device and enqueue time by call size and channels.
// - "swap": a swap's cost on the thread that calls the engine, 8 ch x 65536 taps
//   at 64-frame calls paced at the 48 kHz period: set_filters' own time and the
//   next calls' times (the live pipeline installs a bank on its engine thread
//   between periods, so both fall on the period's budget).
//   cuda_partitioned_bench [calls|steps|heads|swaps]...   (the first three by default)

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "dsp/model/filter_bank.hpp"
#include "kernels/convolvers/partitioned_convolver.hpp"
#include "kernels/cuda_engine.hpp"

namespace {

using namespace tapstream;

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, std::size_t(std::ceil(q * double(v.size()))) - 1);
  return v[i];
}

std::vector<float> decaying_filter(std::size_t taps) {
  std::vector<float> h(taps);
  std::uint32_t state = 12345;
  for (std::size_t k = 0; k < taps; ++k) {
    state = state * 1664525u + 1013904223u;
    const float noise = float(state >> 8) / float(1u << 24) - 0.5f;
    h[k] = noise * float(std::exp(-6.9 * double(k) / double(taps)));
  }
  return h;
}

void calls() {
  struct Config {
    std::size_t channels, frames, taps;
    const char* kernel;
  };
  const std::vector<Config> configs = {{8, 64, 65536, "auto"},
                                       {1, 64, 65536, "partitioned"},
                                       {8, 64, 65536, "partitioned"},
                                       {64, 64, 65536, "partitioned"},
                                       {256, 64, 65536, "partitioned"},
                                       {1024, 64, 65536, "partitioned"},
                                       {4096, 64, 65536, "partitioned"},
                                       {2, 256, 2048, "auto"},
                                       {8, 256, 262144, "partitioned"},
                                       {2048, 256, 262144, "partitioned"},
                                       {3328, 256, 262144, "partitioned"}};
  for (const Config& c : configs) {
    try {
      EngineOptions options;
      options.max_block_frames = c.frames;
      options.kernel = c.kernel;
      auto engine =
          make_cuda_device_engine(FilterBank::shared(decaying_filter(c.taps), c.channels), options);
      auto in = engine->pinned_input().first(c.channels * c.frames);
      auto out = engine->pinned_output().first(c.channels * c.frames);
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = float(i % 17) / 17.0f - 0.5f;
      const int warm = 500, calls = 5000;
      std::vector<double> total, host;
      for (int i = 0; i < warm + calls; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        engine->process(in, out, c.frames, Layout::interleaved);
        const auto t1 = std::chrono::steady_clock::now();
        if (i < warm) continue;
        total.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        host.push_back(engine->last_call_host_us());
      }
      std::printf(
          "{\"kind\": \"call\", \"channels\": %zu, \"frames\": %zu, \"taps\": %zu, \"kernel\": "
          "\"%s\", \"p50_us\": %.2f, \"p99_us\": %.2f, \"p999_us\": %.2f, \"max_us\": %.2f, "
          "\"host_p50_us\": %.2f, \"host_p99_us\": %.2f, \"host_p999_us\": %.2f, "
          "\"description\": \"%s\"}\n",
          c.channels, c.frames, c.taps, c.kernel, percentile(total, 0.5), percentile(total, 0.99),
          percentile(total, 0.999), percentile(total, 1.0), percentile(host, 0.5),
          percentile(host, 0.99), percentile(host, 0.999), engine->description().c_str());
    } catch (const std::exception& e) {
      std::printf(
          "{\"kind\": \"call\", \"channels\": %zu, \"frames\": %zu, \"taps\": %zu, "
          "\"error\": \"%s\"}\n",
          c.channels, c.frames, c.taps, e.what());
    }
    std::fflush(stdout);
  }
}

void steps() {
  for (const std::size_t channels : {1, 8, 64, 512, 4096})
    for (std::size_t P = 64; P <= 65536; P *= 2)
      for (const std::size_t count : {2, 8}) {
        // About (2 count + 6) x channels x P x 8 bytes on the device.
        const double bytes = double(2 * count + 6) * double(channels) * double(P) * 8.0;
        if (bytes > 24e9) continue;
        const int reps = bytes > 1e9 ? 10 : 40;
        try {
          const auto t = cuda::measure_tail_step(channels, P, count, reps);
          std::printf(
              "{\"kind\": \"step\", \"channels\": %zu, \"P\": %zu, \"count\": %zu, "
              "\"gpu_us\": %.2f, \"host_us\": %.2f}\n",
              channels, P, count, t.gpu_us, t.host_us);
        } catch (const std::exception& e) {
          std::printf("{\"kind\": \"step\", \"channels\": %zu, \"P\": %zu, \"error\": \"%s\"}\n",
                      channels, P, e.what());
        }
        std::fflush(stdout);
      }
}

void heads() {
  for (const std::size_t channels : {1, 8, 64, 512, 4096})
    for (const std::size_t frames : {32, 64, 128, 256, 1024})
      for (const std::size_t mult : {4, 8}) {
        const auto t = cuda::measure_head(channels, frames, mult * frames, 40);
        std::printf(
            "{\"kind\": \"head\", \"channels\": %zu, \"frames\": %zu, \"head_taps\": %zu, "
            "\"gpu_us\": %.2f, \"host_us\": %.2f}\n",
            channels, frames, mult * frames, t.gpu_us, t.host_us);
        std::fflush(stdout);
      }
}

void swaps() {
  const std::size_t channels = 8, frames = 64, taps = 65536;
  EngineOptions options;
  options.max_block_frames = frames;
  auto engine =
      make_cuda_device_engine(FilterBank::shared(decaying_filter(taps), channels), options);
  const FilterBank other = FilterBank::shared(decaying_filter(taps / 2), channels);
  const FilterBank first = FilterBank::shared(decaying_filter(taps), channels);
  auto in = engine->pinned_input().first(channels * frames);
  auto out = engine->pinned_output().first(channels * frames);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = float(i % 17) / 17.0f - 0.5f;
  using Clock = std::chrono::steady_clock;
  const auto period = std::chrono::microseconds(1333);
  auto next = Clock::now();
  const auto call = [&] {
    std::this_thread::sleep_until(next);
    next += period;
    const auto t0 = Clock::now();
    engine->process(in, out, frames, Layout::interleaved);
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  };
  for (int i = 0; i < 2000; ++i) call();
  std::vector<double> set, after[4], steady;
  for (int swap = 0; swap < 40; ++swap) {
    for (int i = 0; i < 200; ++i) steady.push_back(call());
    const auto t0 = Clock::now();
    engine->set_filters(swap % 2 ? first : other, true);
    set.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    next = Clock::now();
    for (auto& a : after) a.push_back(call());
  }
  const auto line = [](const char* what, const std::vector<double>& v) {
    std::printf(
        "{\"kind\": \"swap\", \"what\": \"%s\", \"p50_us\": %.1f, \"p90_us\": %.1f, "
        "\"max_us\": %.1f}\n",
        what, percentile(v, 0.5), percentile(v, 0.9), percentile(v, 1.0));
  };
  line("steady call", steady);
  line("set_filters", set);
  line("1st call after", after[0]);
  line("2nd call after", after[1]);
  line("3rd call after", after[2]);
  line("4th call after", after[3]);
  std::printf("{\"kind\": \"swap\", \"description\": \"%s\"}\n", engine->description().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> parts(argv + 1, argv + argc);
  if (parts.empty()) parts = {"steps", "heads", "calls"};
  try {
    for (const std::string& p : parts) {
      if (p == "calls")
        calls();
      else if (p == "steps")
        steps();
      else if (p == "heads")
        heads();
      else if (p == "swaps")
        swaps();
      else {
        std::fprintf(stderr,
                     "cuda_partitioned_bench: unknown part '%s' (calls, steps, heads, swaps)\n",
                     p.c_str());
        return 2;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_partitioned_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

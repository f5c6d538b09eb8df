// The CUDA engine's benchmark (issue 3): prints tables and writes JSON.
//
// 1. Offline throughput, device-resident: 8 channels x 2^22 samples, one filter
//    per channel, taps in {32, 256, 2048, 16384, 131072}; every direct-form
//    kernel variant, the FFT path and the automatic choice. Timed with CUDA
//    events on the engine's stream, median of several runs after a warm-up;
//    each result checked against a float64 reference on two windows.
// 2. Streaming round trip per block through Engine::process (pinned host in,
//    pinned host out, interleaved): p50, p99 and max over >= 10,000 blocks.
// 3. Overlap: the copies and kernels of one multi-chunk Engine::process call,
//    recorded by CUPTI's activity API (timestamps on the GPU), printed as a
//    timeline with the time copies and kernels ran concurrently.
// 4. Where a streaming block's time goes: CUPTI records of 4 consecutive calls
//    against the host's call boundaries.
// 5. The device's ceilings: device-to-device copy bandwidth and fp32 FMA rate,
//    from which the floors of each size follow.
//
// usage: cuda_engine_bench [--json FILE] [--quick] [--blocks N] [--commit SHA] [--taps 32,256,...]
//                          [--skip direct:naive,... [--skip-reason TEXT]] [--shared]
//                          [--only ceilings,offline,streaming,overlap,timeline]
//                          [--engine-option KEY=VALUE ...]  (the [engine] tuning keys,
//                          dsp/model/engine_tuning.hpp: e.g. fft_fused=false,
//                          cuda_zero_copy_samples=0)

#include <cupti.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench/device_ceilings.hpp"
#include "dsp/model/engine.hpp"
#include "dsp/model/engine_tuning.hpp"
#include "dsp/model/filter_bank.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/cuda_engine.hpp"
#include "kernels/cuda_resources.hpp"

namespace {

using namespace tapstream;
using tapstream::cuda::DeviceBuffer;
using tapstream::cuda::Event;
using tapstream::cuda::PinnedBuffer;
using tapstream::cuda::Stream;

constexpr std::uint32_t seed = 20261122;
constexpr double max_run_s = 2.0;      // a variant predicted slower than this per run is skipped
constexpr double time_budget_s = 1.5;  // repeats per measurement are limited to about this

// ---------------------------------------------------------------- JSON output
// nlohmann-json, as everywhere in tapstream; ordered, so that the report reads
// in the order it was measured. Non-finite numbers are written as null.
using Json = nlohmann::ordered_json;

class JsonObject {
 public:
  JsonObject& add(const std::string& key, Json value) {
    fields_[key] = std::move(value);
    return *this;
  }
  JsonObject& num(const std::string& key, double v) {
    return add(key, std::isfinite(v) ? Json(v) : Json(nullptr));
  }
  JsonObject& str(const std::string& key, const std::string& v) { return add(key, v); }
  const Json& value() const { return fields_; }

 private:
  Json fields_ = Json::object();
};

// ---------------------------------------------------------------- helpers
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * double(v.size() - 1);
  const std::size_t lo = std::size_t(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

std::vector<float> random_normal(std::size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

FilterBank random_bank(std::size_t channels, std::size_t taps, std::mt19937& rng) {
  std::vector<std::vector<float>> filters;
  for (std::size_t c = 0; c < channels; ++c)
    filters.push_back(random_normal(taps, rng, 1.0f / std::sqrt(float(taps))));
  return FilterBank::per_channel(std::move(filters));
}

std::string algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::automatic:
      return "automatic";
    case Algorithm::direct:
      return "direct";
    case Algorithm::fft:
      return "fft";
  }
  return "?";
}

// Times fn (work enqueued on `stream`) with events: one warm-up, then runs until
// about time_budget_s, 3 to max_reps of them. `before` runs outside the timed region.
struct Timing {
  double median_s, min_s, max_s;
  int runs;
};

Timing time_on_stream(cudaStream_t stream, const std::function<void()>& fn,
                      const std::function<void()>& before = {}, int max_reps = 15) {
  Event start(true), stop(true);
  if (before) before();
  fn();
  TAPSTREAM_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> times;
  for (int rep = 0;; ++rep) {
    if (before) before();
    start.record(stream);
    fn();
    stop.record(stream);
    stop.synchronize();
    float ms = 0;
    TAPSTREAM_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    times.push_back(ms / 1e3);
    const int wanted = std::clamp(int(time_budget_s / std::max(times[0], 1e-6)), 3, max_reps);
    if (int(times.size()) >= wanted) break;
  }
  return {median(times), *std::min_element(times.begin(), times.end()),
          *std::max_element(times.begin(), times.end()), int(times.size())};
}

// ---------------------------------------------------------------- 4. ceilings
struct Ceilings {
  double copy_bytes_per_s = 0, fma_per_s = 0;
};

Ceilings measure_ceilings(JsonObject& json) {
  Ceilings c;
  Stream stream;
  {
    const std::size_t n = std::size_t(1) << 28;  // 1 GiB of floats
    DeviceBuffer<float> src(n), dst(n);
    TAPSTREAM_CUDA_CHECK(cudaMemsetAsync(src.get(), 0x3f, src.bytes(), stream.get()));
    const Timing t = time_on_stream(
        stream.get(),
        [&] {
          TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), src.bytes(),
                                               cudaMemcpyDeviceToDevice, stream.get()));
        },
        {}, 20);
    c.copy_bytes_per_s = 2.0 * double(src.bytes()) / t.median_s;
    json.num("copy_bytes_per_s", c.copy_bytes_per_s).num("copy_1GiB_s", t.median_s);
  }
  {
    cudaDeviceProp prop{};
    TAPSTREAM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const int blocks = prop.multiProcessorCount * 8, threads = 256, iterations = 8192;
    DeviceBuffer<float> out(std::size_t(blocks) * threads);
    const Timing t = time_on_stream(
        stream.get(),
        [&] { bench::launch_fma_loop(out.get(), blocks, threads, iterations, stream.get()); }, {},
        10);
    const double fmas = double(blocks) * threads * iterations * bench::fma_chains;
    c.fma_per_s = fmas / t.median_s;
    json.num("fma_per_s", c.fma_per_s).num("fma_kernel_s", t.median_s);
  }
  std::printf(
      "ceilings: device-to-device copy %.3f TB/s (read + write), fp32 FMA %.2f TFMA/s (%.1f "
      "TFLOP/s)\n",
      c.copy_bytes_per_s / 1e12, c.fma_per_s / 1e12, 2 * c.fma_per_s / 1e12);
  return c;
}

// ---------------------------------------------------------------- 1. offline
struct Window {
  std::size_t channel, first, length;
  std::vector<double> expected;
};

// float64 causal convolution on channel 0 frames [0, 4096) and on the last
// channel frames [N/2, N/2 + 2048): the same windows peers.py checks.
std::vector<Window> reference_windows(const std::vector<float>& input, std::size_t channels,
                                      std::size_t frames, const FilterBank& bank) {
  std::vector<Window> windows{
      {0, 0, std::min<std::size_t>(4096, frames), {}},
      {channels - 1, frames / 2, std::min<std::size_t>(2048, frames / 2), {}}};
  for (Window& w : windows) {
    const auto taps = bank.taps(w.channel);
    const float* x = input.data() + w.channel * frames;
    w.expected.resize(w.length);
    for (std::size_t i = 0; i < w.length; ++i) {
      const std::size_t n = w.first + i;
      double acc = 0;
      for (std::size_t k = 0; k < taps.size() && k <= n; ++k)
        acc += double(taps[k]) * double(x[n - k]);
      w.expected[i] = acc;
    }
  }
  return windows;
}

double relative_error(const float* d_out, std::size_t frames, const std::vector<Window>& windows) {
  double worst = 0;
  for (const Window& w : windows) {
    std::vector<float> got(w.length);
    TAPSTREAM_CUDA_CHECK(cudaMemcpy(got.data(), d_out + w.channel * frames + w.first,
                                    w.length * sizeof(float), cudaMemcpyDeviceToHost));
    double diff = 0, ref = 0;
    for (std::size_t i = 0; i < w.length; ++i) {
      if (!std::isfinite(got[i])) return std::numeric_limits<double>::quiet_NaN();
      diff += (got[i] - w.expected[i]) * (got[i] - w.expected[i]);
      ref += w.expected[i] * w.expected[i];
    }
    worst = std::max(worst, std::sqrt(diff / ref));
  }
  return worst;
}

struct Variant {
  std::string label;
  Algorithm algorithm;
  std::string kernel;
};

// --shared: one filter for every channel instead of one per channel.
bool shared_filter = false;

// Variant labels left out by --skip, and why (printed and recorded).
std::vector<std::string> skip_variants;
// Every engine this bench makes starts from these (--engine-option).
EngineOptions base_options;
std::string skip_reason = "excluded by --skip";

std::vector<Json> offline(const Ceilings& ceil, const std::vector<std::size_t>& tap_counts,
                          std::vector<std::string>& summary) {
  const std::size_t channels = 8, frames = std::size_t(1) << 22;
  std::mt19937 rng(seed);
  std::printf(
      "\n== offline throughput: %zu channels x %zu samples, %s, device-resident (seed %u)\n",
      channels, frames,
      shared_filter ? "one filter shared by all channels" : "one filter per channel", seed);
  const std::vector<float> input = random_normal(channels * frames, rng);
  DeviceBuffer<float> d_in(channels * frames), d_out(channels * frames);
  TAPSTREAM_CUDA_CHECK(cudaMemcpy(d_in.get(), input.data(), d_in.bytes(), cudaMemcpyHostToDevice));

  std::vector<Variant> variants;
  for (const std::string& k : cuda_kernel_variants())
    if (k != "auto") variants.push_back({"direct:" + k, Algorithm::direct, k});
  variants.push_back({"fft", Algorithm::fft, "auto"});
  variants.push_back({"auto", Algorithm::automatic, "auto"});

  std::map<std::string, std::pair<std::size_t, double>> last;  // label -> (taps, seconds)
  std::vector<Json> entries;
  for (std::size_t taps : tap_counts) {
    std::mt19937 filter_rng(seed + std::uint32_t(taps));  // the same filters in any --taps subset
    const FilterBank bank =
        shared_filter
            ? FilterBank::shared(random_normal(taps, filter_rng, 1.0f / std::sqrt(float(taps))),
                                 channels)
            : random_bank(channels, taps, filter_rng);
    const std::vector<Window> windows = reference_windows(input, channels, frames, bank);
    const double outputs = double(channels * frames);
    const double floor_mem = 2.0 * outputs * 4 / ceil.copy_bytes_per_s;
    const double floor_fma = outputs * double(taps) / ceil.fma_per_s;
    std::printf("\n-- %zu taps: floor memory %.3f ms, direct FMA %.3f ms\n", taps, floor_mem * 1e3,
                floor_fma * 1e3);
    std::printf("  %-22s %10s %12s %9s %10s  %s\n", "variant", "ms", "Gsamples/s", "xfloor",
                "rel_err", "engine's choice");
    std::vector<Json> runs;
    for (const Variant& v : variants) {
      JsonObject run;
      run.str("variant", v.label);
      std::string skipped;
      if (std::find(skip_variants.begin(), skip_variants.end(), v.label) != skip_variants.end())
        skipped = skip_reason;
      const auto prev = last.find(v.label);
      if (skipped.empty() && v.algorithm == Algorithm::direct && prev != last.end()) {
        const double predicted = prev->second.second * double(taps) / double(prev->second.first);
        if (predicted > max_run_s) {
          char buf[200];
          std::snprintf(
              buf, sizeof buf,
              "predicted %.1f s per run (linear in taps from %.1f ms at %zu taps) > %.0f s",
              predicted, prev->second.second * 1e3, prev->second.first, max_run_s);
          skipped = buf;
        }
      }
      if (skipped.empty()) {
        try {
          EngineOptions options = base_options;
          options.algorithm = v.algorithm;
          options.kernel = v.kernel;
          std::size_t chunk = frames;
          std::unique_ptr<CudaEngine> engine;
          try {
            options.max_block_frames = chunk;
            engine = make_cuda_device_engine(bank, options);
          } catch (const std::runtime_error&) {
            // Too much memory for one whole-signal block: filter in 64 Ki-frame calls.
            chunk = std::size_t(1) << 16;
            options.max_block_frames = chunk;
            engine = make_cuda_device_engine(bank, options);
          }
          const auto filter_all = [&] {
            for (std::size_t first = 0; first < frames; first += chunk)
              engine->process_device(d_in.get() + first, d_out.get() + first,
                                     std::min(chunk, frames - first), frames);
          };
          const Timing t = time_on_stream(engine->stream(), filter_all, [&] { engine->reset(); });
          engine->reset();
          TAPSTREAM_CUDA_CHECK(
              cudaMemsetAsync(d_out.get(), 0xff, d_out.bytes(), engine->stream()));  // NaN
          filter_all();
          engine->synchronize();
          const double err = relative_error(d_out.get(), frames, windows);
          const bool ok = err < 1e-4;
          run.num("median_s", t.median_s)
              .num("min_s", t.min_s)
              .num("max_s", t.max_s)
              .num("runs", t.runs);
          run.num("output_samples_per_s", outputs / t.median_s).num("rel_err", err).add("ok", ok);
          run.num("fraction_of_memory_floor", floor_mem / t.median_s)
              .num("chunk_frames", double(chunk));
          run.str("algorithm", algorithm_name(engine->algorithm())).str("kernel", engine->kernel());
          run.str("taps_memory", engine->taps_memory()).str("description", engine->description());
          last[v.label] = {taps, t.median_s};
          std::printf("  %-22s %10.3f %12.2f %9.2f %10.2e  %s%s\n", v.label.c_str(),
                      t.median_s * 1e3, outputs / t.median_s / 1e9, t.median_s / floor_mem, err,
                      engine->description().c_str(), ok ? "" : "  WRONG RESULT");
        } catch (const std::exception& e) {
          skipped = std::string("failed: ") + e.what();
          cudaGetLastError();  // a sticky error would end the run anyway; others are cleared
        }
      }
      if (!skipped.empty()) {
        run.str("skipped", skipped);
        std::printf("  %-22s skipped: %s\n", v.label.c_str(), skipped.c_str());
      }
      runs.push_back(run.value());
    }
    JsonObject entry;
    entry.str("filters", shared_filter ? "shared" : "per-channel");
    entry.num("taps", double(taps))
        .num("channels", double(channels))
        .num("samples", double(frames));
    entry.num("bytes_min", 2.0 * outputs * 4).num("fma_direct", outputs * double(taps));
    entry.num("floor_memory_s", floor_mem).num("floor_direct_fma_s", floor_fma);
    entry.add("runs", Json(runs));
    entries.push_back(entry.value());
  }
  summary.push_back("offline: " + std::to_string(tap_counts.size()) + " tap counts");
  return entries;
}

// ---------------------------------------------------------------- 2. streaming
struct StreamingConfig {
  std::size_t channels, frames, taps;
};

std::vector<Json> streaming(std::size_t blocks) {
  const std::vector<StreamingConfig> configs{
      {2, 256, 2048}, {8, 256, 2048}, {2, 64, 512}, {32, 1024, 4096}};
  const std::size_t warmup = 1000;
  std::printf(
      "\n== streaming round trip per block: Engine::process, pinned host in -> pinned host out, "
      "interleaved, %zu blocks after %zu warm-up\n",
      blocks, warmup);
  std::printf("  %-18s %-16s %8s %8s %8s %8s  %s\n", "config", "buffers", "p50 us", "p99 us",
              "max us", "mean us", "engine's choice");
  std::vector<Json> entries;
  std::mt19937 rng(seed + 1);
  for (const StreamingConfig& cfg : configs) {
    const FilterBank bank = random_bank(cfg.channels, cfg.taps, rng);
    const std::vector<float> block = random_normal(cfg.channels * cfg.frames, rng);
    for (const bool own_buffers : {false, true}) {
      JsonObject entry;
      entry.num("channels", double(cfg.channels))
          .num("frames", double(cfg.frames))
          .num("taps", double(cfg.taps));
      entry.str("buffers", own_buffers ? "caller pinned" : "engine pinned staging");
      char config[64];
      std::snprintf(config, sizeof config, "(%zu, %zu, %zu)", cfg.channels, cfg.frames, cfg.taps);
      try {
        EngineOptions options = base_options;
        options.max_block_frames = cfg.frames;
        std::unique_ptr<CudaEngine> engine = make_cuda_device_engine(bank, options);
        const std::size_t n = cfg.channels * cfg.frames;
        PinnedBuffer<float> in_buf(own_buffers ? n : 0), out_buf(own_buffers ? n : 0);
        std::span<float> in =
            own_buffers ? std::span<float>(in_buf.get(), n) : engine->pinned_input().first(n);
        std::span<float> out =
            own_buffers ? std::span<float>(out_buf.get(), n) : engine->pinned_output().first(n);
        std::copy(block.begin(), block.end(), in.begin());
        std::vector<double> latency;
        latency.reserve(blocks);
        for (std::size_t i = 0; i < warmup + blocks; ++i) {
          const auto t0 = std::chrono::steady_clock::now();
          engine->process(in, out, cfg.frames, Layout::interleaved);
          const auto t1 = std::chrono::steady_clock::now();
          if (i >= warmup) latency.push_back(std::chrono::duration<double>(t1 - t0).count());
        }
        if (!std::all_of(out.begin(), out.end(), [](float v) { return std::isfinite(v); }))
          throw std::runtime_error("non-finite output");
        double mean = 0;
        for (double v : latency) mean += v / double(latency.size());
        const double p50 = percentile(latency, 50), p99 = percentile(latency, 99),
                     mx = *std::max_element(latency.begin(), latency.end());
        entry.num("blocks", double(latency.size()))
            .num("p50_s", p50)
            .num("p99_s", p99)
            .num("max_s", mx);
        entry.num("mean_s", mean).str("description", engine->description());
        std::printf("  %-18s %-16s %8.1f %8.1f %8.1f %8.1f  %s\n", config,
                    own_buffers ? "caller pinned" : "engine staging", p50 * 1e6, p99 * 1e6,
                    mx * 1e6, mean * 1e6, engine->description().c_str());
      } catch (const std::exception& e) {
        entry.str("skipped", std::string("failed: ") + e.what());
        std::printf("  %-18s failed: %s\n", config, e.what());
      }
      entries.push_back(entry.value());
    }
  }
  return entries;
}

// ---------------------------------------------------------------- 3. overlap (CUPTI)
// CUPTI hands activity records back in buffers we lend it; they live in this
// pool until the end of the program. Only the CUPTI worker thread and the
// main thread (after cuptiActivityFlushAll, which waits) touch it.
struct Activity {
  std::string kind;  // "H2D", "D2H", "D2D", "memset", "kernel"
  std::string name;
  std::uint32_t stream;
  std::uint64_t start, end, bytes;
};
std::deque<std::vector<std::uint8_t>> cupti_buffers;
std::vector<Activity> activities;

void CUPTIAPI cupti_buffer_requested(std::uint8_t** buffer, std::size_t* size,
                                     std::size_t* max_records) {
  cupti_buffers.emplace_back(std::size_t(1) << 20);
  *buffer = cupti_buffers.back().data();
  *size = cupti_buffers.back().size();
  *max_records = 0;
}

void CUPTIAPI cupti_buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t,
                                     std::size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      const char* kind = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "H2D"
                         : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "D2H"
                         : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD ? "D2D"
                                                                          : "copy";
      activities.push_back({kind, "", m->streamId, m->start, m->end, m->bytes});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      activities.push_back({"kernel", k->name ? k->name : "?", k->streamId, k->start, k->end, 0});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      activities.push_back({"memset", "", m->streamId, m->start, m->end, m->bytes});
    }
  }
}

void cupti_check(CUptiResult result, const char* call) {
  if (result == CUPTI_SUCCESS) return;
  const char* text = "?";
  cuptiGetResultString(result, &text);
  throw std::runtime_error(std::string(call) + " failed: " + text);
}
#define TAPSTREAM_CUPTI_CHECK(call) cupti_check((call), #call)

// Time during which at least one activity of `kind` runs, and during which an
// activity of `kind` runs at the same time as one of another kind (class).
double busy_time(const std::vector<Activity>& acts,
                 const std::function<bool(const Activity&)>& pick) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> iv;
  for (const Activity& a : acts)
    if (pick(a)) iv.emplace_back(a.start, a.end);
  std::sort(iv.begin(), iv.end());
  double total = 0;
  std::uint64_t cur_start = 0, cur_end = 0;
  bool open = false;
  for (auto [s, e] : iv) {
    if (!open || s > cur_end) {
      if (open) total += double(cur_end - cur_start);
      cur_start = s, cur_end = e, open = true;
    } else {
      cur_end = std::max(cur_end, e);
    }
  }
  if (open) total += double(cur_end - cur_start);
  return total * 1e-9;
}

// Runs fn with CUPTI recording copies, memsets and kernels; returns the
// records sorted by start. host_marks, if given, receives CUPTI timestamps (the
// GPU records' clock) taken on the host before and after fn.
std::vector<Activity> record_activities(const std::function<void()>& fn,
                                        std::vector<std::uint64_t>* host_marks) {
  static bool registered = false;
  if (!registered) {
    TAPSTREAM_CUPTI_CHECK(
        cuptiActivityRegisterCallbacks(cupti_buffer_requested, cupti_buffer_completed));
    registered = true;
  }
  activities.clear();
  TAPSTREAM_CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
  TAPSTREAM_CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  TAPSTREAM_CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET));
  std::uint64_t mark = 0;
  if (host_marks) cuptiGetTimestamp(&mark), host_marks->push_back(mark);
  fn();
  if (host_marks) cuptiGetTimestamp(&mark), host_marks->push_back(mark);
  TAPSTREAM_CUDA_CHECK(cudaDeviceSynchronize());
  TAPSTREAM_CUPTI_CHECK(cuptiActivityFlushAll(1));
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET);
  std::vector<Activity> out = std::move(activities);
  activities.clear();
  std::sort(out.begin(), out.end(),
            [](const Activity& a, const Activity& b) { return a.start < b.start; });
  return out;
}

// Where the time of a small streaming block goes: GPU records of a few
// consecutive Engine::process calls, against the host's call boundaries.
Json streaming_timeline() {
  struct Config {
    std::size_t channels, frames, taps;
  };
  std::vector<Json> entries;
  std::printf(
      "\n== streaming timeline: 4 consecutive Engine::process calls (engine staging), "
      "GPU records from CUPTI, times from the first call's start on the host\n");
  for (const Config cfg : {Config{2, 256, 2048}, Config{32, 1024, 4096}}) {
    JsonObject json;
    json.num("channels", double(cfg.channels))
        .num("frames", double(cfg.frames))
        .num("taps", double(cfg.taps));
    try {
      std::mt19937 rng(seed + 3);
      const FilterBank bank = random_bank(cfg.channels, cfg.taps, rng);
      EngineOptions options = base_options;
      options.max_block_frames = cfg.frames;
      std::unique_ptr<CudaEngine> engine = make_cuda_device_engine(bank, options);
      const std::size_t n = cfg.channels * cfg.frames;
      const std::vector<float> block = random_normal(n, rng);
      std::copy(block.begin(), block.end(), engine->pinned_input().begin());
      const auto call = [&] {
        engine->process(engine->pinned_input().first(n), engine->pinned_output().first(n),
                        cfg.frames, Layout::interleaved);
      };
      for (int i = 0; i < 200; ++i) call();
      std::vector<std::uint64_t> marks;
      const std::vector<Activity> acts = record_activities(
          [&] {
            for (int i = 0; i < 4; ++i) {
              std::uint64_t t = 0;
              cuptiGetTimestamp(&t);
              marks.push_back(t);
              call();
            }
          },
          &marks);
      // marks: [before all, call 0 start, ..., call 3 start, after all]
      const std::uint64_t t0 = marks[1];
      std::printf("  (%zu ch, %zu frames, %zu taps): %s\n", cfg.channels, cfg.frames, cfg.taps,
                  engine->description().c_str());
      std::printf("    host call starts (us):");
      for (std::size_t i = 1; i + 1 < marks.size(); ++i)
        std::printf(" %.1f", double(marks[i] - t0) / 1e3);
      std::printf("; last call returned at %.1f us\n", double(marks.back() - t0) / 1e3);
      std::vector<Json> records;
      for (const Activity& a : acts) {
        const double start = (double(a.start) - double(t0)) / 1e3,
                     end = (double(a.end) - double(t0)) / 1e3;
        std::printf("    %-7s stream %3u %9.1f %9.1f  (%6.1f us) %.50s\n", a.kind.c_str(), a.stream,
                    start, end, end - start, a.name.c_str());
        JsonObject r;
        r.str("kind", a.kind).num("stream", a.stream).num("start_us", start).num("end_us", end);
        if (!a.name.empty()) r.str("name", a.name);
        records.push_back(r.value());
      }
      std::vector<Json> starts;
      for (std::size_t i = 1; i + 1 < marks.size(); ++i)
        starts.push_back(Json(double(marks[i] - t0) / 1e3));
      json.add("host_call_start_us", Json(starts))
          .num("host_last_return_us", double(marks.back() - t0) / 1e3);
      json.str("description", engine->description()).add("timeline", Json(records));
    } catch (const std::exception& e) {
      std::printf("  streaming timeline failed: %s\n", e.what());
      json.str("skipped", std::string("failed: ") + e.what());
    }
    entries.push_back(json.value());
  }
  return Json(entries);
}

Json overlap() {
  const std::size_t channels = 8, frames = std::size_t(1) << 20, taps = 2048;
  std::printf(
      "\n== overlap: one Engine::process call of %zu channels x %zu frames (%zu taps), "
      "interleaved; GPU timestamps from CUPTI\n",
      channels, frames, taps);
  JsonObject json;
  json.num("channels", double(channels)).num("frames", double(frames)).num("taps", double(taps));
  std::mt19937 rng(seed + 2);
  const FilterBank bank = random_bank(channels, taps, rng);
  EngineOptions options = base_options;
  options.max_block_frames = frames;
  std::unique_ptr<CudaEngine> engine = make_cuda_device_engine(bank, options);
  const std::size_t n = channels * frames;
  PinnedBuffer<float> in(n), out(n);
  const std::vector<float> data = random_normal(n, rng);
  std::copy(data.begin(), data.end(), in.get());
  std::copy(data.begin(), data.end(), engine->pinned_input().begin());
  // The timeline is taken with the engine's own pinned staging as in/out (no
  // host-side copies: what the GPU overlaps); wall times also with the caller's
  // pinned buffers, which the engine copies through its staging.
  const auto call_staged = [&] {
    engine->process(engine->pinned_input().first(n), engine->pinned_output().first(n), frames,
                    Layout::interleaved);
  };
  const auto call_caller = [&] {
    engine->process(std::span<const float>(in.get(), n), std::span<float>(out.get(), n), frames,
                    Layout::interleaved);
  };
  call_staged();  // warm-up
  call_caller();

  // Without a profiler: one call's wall time vs the copies alone.
  Stream stream;
  DeviceBuffer<float> scratch(n);
  const Timing h2d = time_on_stream(
      stream.get(),
      [&] {
        TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(scratch.get(), in.get(), scratch.bytes(),
                                             cudaMemcpyHostToDevice, stream.get()));
      },
      {}, 5);
  const Timing d2h = time_on_stream(
      stream.get(),
      [&] {
        TAPSTREAM_CUDA_CHECK(cudaMemcpyAsync(out.get(), scratch.get(), scratch.bytes(),
                                             cudaMemcpyDeviceToHost, stream.get()));
      },
      {}, 5);
  const auto wall_of = [](const std::function<void()>& fn) {
    std::vector<double> walls;
    for (int i = 0; i < 5; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      walls.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return median(walls);
  };
  const double wall_staged = wall_of(call_staged), wall_caller = wall_of(call_caller);
  std::printf(
      "  copies alone: H2D %.3f ms, D2H %.3f ms (sum %.3f ms); Engine::process wall: %.3f ms with "
      "the engine's staging, %.3f ms with caller buffers (%s)\n",
      h2d.median_s * 1e3, d2h.median_s * 1e3, (h2d.median_s + d2h.median_s) * 1e3,
      wall_staged * 1e3, wall_caller * 1e3, engine->description().c_str());
  json.num("h2d_alone_s", h2d.median_s).num("d2h_alone_s", d2h.median_s);
  json.num("process_wall_staged_s", wall_staged).num("process_wall_caller_s", wall_caller);
  json.str("description", engine->description());

  try {
    activities = record_activities(call_staged, nullptr);
  } catch (const std::exception& e) {
    std::printf("  CUPTI timeline unavailable: %s\n", e.what());
    json.str("timeline_skipped", e.what());
    return json.value();
  }
  if (activities.empty()) {
    json.str("timeline_skipped", "CUPTI recorded no activity");
    return json.value();
  }
  const std::uint64_t t0 = activities.front().start;
  std::uint64_t t1 = t0;
  for (const Activity& a : activities) t1 = std::max(t1, a.end);
  std::vector<Json> records;
  std::printf("  %-7s %7s %10s %10s %10s  %s\n", "what", "stream", "start us", "end us", "MB",
              "kernel");
  std::size_t printed = 0;
  for (const Activity& a : activities) {
    JsonObject r;
    r.str("kind", a.kind).num("stream", a.stream).num("start_us", double(a.start - t0) / 1e3);
    r.num("end_us", double(a.end - t0) / 1e3).num("bytes", double(a.bytes));
    if (!a.name.empty()) r.str("name", a.name);
    if (records.size() < 400) records.push_back(r.value());
    if (printed++ < 48)
      std::printf("  %-7s %7u %10.1f %10.1f %10.2f  %.60s\n", a.kind.c_str(), a.stream,
                  double(a.start - t0) / 1e3, double(a.end - t0) / 1e3, double(a.bytes) / 1e6,
                  a.name.c_str());
  }
  if (activities.size() > printed)
    std::printf("  ... %zu more records in the JSON\n", activities.size() - printed);
  const auto is = [](const char* k) { return [k](const Activity& a) { return a.kind == k; }; };
  const double span = double(t1 - t0) * 1e-9;
  const double busy_h2d = busy_time(activities, is("H2D")),
               busy_d2h = busy_time(activities, is("D2H"));
  const double busy_kernel = busy_time(activities, [](const Activity& a) {
    return a.kind == "kernel" || a.kind == "memset" || a.kind == "D2D";
  });
  const double serial = busy_h2d + busy_d2h + busy_kernel;
  std::printf(
      "  GPU span %.3f ms; busy: H2D %.3f ms, compute %.3f ms, D2H %.3f ms; serial sum %.3f ms; "
      "overlap saved %.3f ms (%.0f%% of the serial sum)\n",
      span * 1e3, busy_h2d * 1e3, busy_kernel * 1e3, busy_d2h * 1e3, serial * 1e3,
      (serial - span) * 1e3, 100 * (serial - span) / serial);
  json.num("gpu_span_s", span).num("busy_h2d_s", busy_h2d).num("busy_compute_s", busy_kernel);
  json.num("busy_d2h_s", busy_d2h)
      .num("serial_sum_s", serial)
      .num("records", double(activities.size()));
  json.add("timeline", Json(records));
  return json.value();
}

std::string utc_now() {
  char buf[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%FT%TZ", std::gmtime(&now));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, commit, only = "ceilings,offline,streaming,overlap,timeline";
  bool quick = false;
  std::size_t blocks = 10000;
  std::vector<std::size_t> tap_counts{32, 256, 2048, 16384, 131072};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "cuda_engine_bench: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--json")
      json_path = value();
    else if (arg == "--commit")
      commit = value();
    else if (arg == "--only")
      only = value();
    else if (arg == "--blocks")
      blocks = std::stoul(value());
    else if (arg == "--quick")
      quick = true;
    else if (arg == "--skip") {
      std::stringstream list(value());
      for (std::string item; std::getline(list, item, ',');) skip_variants.push_back(item);
    } else if (arg == "--skip-reason")
      skip_reason = value();
    else if (arg == "--shared")
      shared_filter = true;
    else if (arg == "--engine-option") {
      try {
        set_engine_tuning(base_options, value());
      } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "cuda_engine_bench: --engine-option %s\n", e.what());
        return 2;
      }
    } else if (arg == "--taps") {
      tap_counts.clear();
      std::stringstream list(value());
      for (std::string item; std::getline(list, item, ',');) tap_counts.push_back(std::stoul(item));
    } else {
      std::fprintf(stderr, "cuda_engine_bench: unknown argument '%s'\n", arg.c_str());
      return 2;
    }
  }
  if (commit.empty() && std::getenv("TAPSTREAM_COMMIT")) commit = std::getenv("TAPSTREAM_COMMIT");
  if (quick) {
    blocks = std::min<std::size_t>(blocks, 2000);
    tap_counts = {32, 2048};
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  std::string reason;
  if (!cuda_device_available(&reason)) {
    std::fprintf(stderr, "cuda_engine_bench: no CUDA device: %s\n", reason.c_str());
    return 1;
  }
  cudaDeviceProp prop{};
  TAPSTREAM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("cuda_engine_bench on %s (%d SMs, %.0f MB L2), driver %d, runtime %d, commit %s\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6, driver, runtime,
              commit.empty() ? "?" : commit.c_str());

  JsonObject report, info;
  info.str("gpu", prop.name).num("sms", prop.multiProcessorCount).num("l2_bytes", prop.l2CacheSize);
  info.num("cuda_driver", driver)
      .num("cuda_runtime", runtime)
      .str("commit", commit)
      .str("date", utc_now());
  std::vector<Json> kernels;
  for (const std::string& k : cuda_kernel_variants()) kernels.push_back(k);
  info.add("kernel_variants", Json(kernels));
  report.add("info", info.value());

  const auto wants = [&](const char* part) { return only.find(part) != std::string::npos; };
  int status = 0;
  const auto section = [&](const char* name, const std::function<void()>& body) {
    if (!wants(name)) return;
    try {
      body();
    } catch (const std::exception& e) {
      std::printf("section %s failed: %s\n", name, e.what());
      report.str(std::string(name) + "_failed", e.what());
      status = 1;
    }
  };
  Ceilings ceil;
  std::vector<std::string> summary;
  section("ceilings", [&] {
    JsonObject c;
    ceil = measure_ceilings(c);
    report.add("device", c.value());
  });
  if (ceil.copy_bytes_per_s == 0)
    ceil = {2.97e12, 2.8e13};  // floors still printable; JSON says ceilings failed
  section("offline", [&] { report.add("offline", Json(offline(ceil, tap_counts, summary))); });
  section("streaming", [&] { report.add("streaming", Json(streaming(blocks))); });
  section("overlap", [&] { report.add("overlap", overlap()); });
  section("timeline", [&] { report.add("streaming_timeline", streaming_timeline()); });

  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << report.value().dump(1, ' ', false, Json::error_handler_t::replace) << "\n";
    if (!f) {
      std::fprintf(stderr, "cuda_engine_bench: cannot write %s\n", json_path.c_str());
      return 1;
    }
    std::printf("wrote %s\n", json_path.c_str());
  }
  return status;
}

// `tapstream bench capacity`: how many channels each engine carries live. For
// every (block size, filter length) it finds, by search, the largest channel
// count whose per-block time (host input in, host output back, one
// Engine::process call) stays under half the block period at p99.9, with a
// distinct filter per channel; then it measures that count over --blocks
// blocks and prints p50 / p99 / p99.9. Calls come one per block period, as a
// live device delivers them (--back-to-back: as fast as they return, which
// measures throughput instead). The CUDA engine reads and writes its
// own pinned staging (the live pipeline's path); the CPU engine uses all
// cores. Prints a table and writes JSON (--json); bench/capacity_bench runs the
// same code. `bench updates` is daemon/commands/bench_updates.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "daemon/commands/bench_updates.hpp"
#include "daemon/commands/capacity_search.hpp"
#include "daemon/commands/command.hpp"
#include "daemon/engine_factory.hpp"
#include "dsp/model/engine.hpp"
#include "dsp/model/engine_tuning.hpp"
#include "dsp/model/filter_bank.hpp"

namespace tapstream {

namespace {

struct CapacityArgs {
  std::vector<std::string> engines = {"cuda", "cpu"};
  std::vector<std::size_t> blocks = {32, 64, 128, 256, 1024};
  std::vector<std::size_t> taps = {4096, 65536, 262144};
  double rate = 48000.0;
  std::size_t measure_blocks = 10000;  // blocks timed at the capacity found
  std::size_t probe_blocks = 1000;     // blocks timed per search step
  std::size_t max_channels = 16384;
  std::size_t max_samples = std::size_t(1) << 30;  // channels x taps held (memory)
  // Counts to time as they are, each over measure_blocks, instead of a search.
  std::vector<std::size_t> channels;
  std::string json;
  std::string commit = "unknown";
  std::string cuda_kernel = "auto";         // EngineOptions::kernel for the CUDA engine
  bool back_to_back = false;                // calls as fast as they return, not one per period
  std::vector<std::string> engine_options;  // --engine-option KEY=VALUE, as written
  EngineOptions tuning;                     // the options they set (checked in run_capacity)
  // --devices: the CUDA engine's channels sharded over these GPUs (tuning.devices,
  // resolved by run_capacity; empty: one GPU, EngineOptions::device 0).
  std::string devices;
  std::vector<int> gpus;
};

struct Percentiles {
  double p50 = 0, p99 = 0, p999 = 0, max = 0;  // microseconds
};

Percentiles percentiles(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) {
    return us[std::min(us.size() - 1, std::size_t(std::ceil(q * double(us.size()))) - 1)];
  };
  return {at(0.50), at(0.99), at(0.999), us.back()};
}

// A distinct filter per channel, made from one random decaying filter by a
// per-channel rotation and gain (cheap for thousands of long filters: two
// copies and a scaling pass per channel, channels spread over the cores; the
// 11,776 x 65536-tap bank took 5.4 s with a modulo per tap on one).
FilterBank capacity_bank(std::size_t channels, std::size_t taps) {
  std::mt19937 rng(20261123);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> base(taps);
  const double decay = 6.9 / double(taps);  // -60 dB at the last tap
  for (std::size_t k = 0; k < taps; ++k) base[k] = noise(rng) * float(std::exp(-decay * double(k)));
  std::vector<std::vector<float>> filters(channels);
  auto make = [&](std::size_t from, std::size_t to) {
    for (std::size_t c = from; c < to; ++c) {
      auto& h = filters[c];
      const auto shift = std::ptrdiff_t((c * 7919) % taps);
      const float gain = 0.5f + float(c % 97) / 97.0f;
      h.reserve(taps);  // h[k] = gain * base[(k + shift) % taps]
      h.insert(h.end(), base.begin() + shift, base.end());
      h.insert(h.end(), base.begin(), base.begin() + shift);
      for (float& x : h) x *= gain;
    }
  };
  const std::size_t workers = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 16);
  std::vector<std::thread> threads;
  for (std::size_t w = 1; w < workers; ++w)
    threads.emplace_back(make, channels * w / workers, channels * (w + 1) / workers);
  make(0, channels / workers);
  for (std::thread& t : threads) t.join();
  return FilterBank::per_channel(std::move(filters));
}

struct Probe {
  std::size_t channels = 0;
  Percentiles us;
  // The calls' CPU-side part (CUDA engine: copies, launches, enqueueing before
  // the wait for the device); empty for engines that do not report it.
  std::optional<Percentiles> host_us;
  std::string description;
  bool fits = false;
  // Set-up: building the bench's filter bank on the host, the routing matrix
  // of it (its paths' copy of the taps), and making the engine from that (the
  // CUDA engine: plan, allocation, upload and filter transform; its
  // description breaks that down).
  double bank_s = 0, matrix_s = 0, engine_s = 0;
};

// Times `blocks` calls of `frames` frames after a warm-up, one call per
// `period_us` (as a live device delivers blocks; 0: back to back).
Probe probe(const std::string& engine_name, const EngineOptions& tuning,
            const std::string& cuda_kernel, std::size_t channels, std::size_t frames,
            std::size_t taps, std::size_t blocks, double budget_us, double period_us) {
  const auto bank_start = std::chrono::steady_clock::now();
  FilterBank bank = capacity_bank(channels, taps);
  const auto matrix_start = std::chrono::steady_clock::now();
  const RoutingMatrix matrix = RoutingMatrix::diagonal(std::move(bank));
  const auto engine_start = std::chrono::steady_clock::now();
  EngineOptions options = tuning;
  options.max_block_frames = frames;
  options.max_taps = taps;
  if (engine_name == "cuda") {
    options.kernel = cuda_kernel;
  } else {
    options.devices.clear();  // the GPUs (--devices) are the cuda engine's
  }
  std::span<float> in, out;
  std::vector<float> host_in, host_out;
  const std::unique_ptr<MatrixEngine> engine =
      make_engine(parse_backend(engine_name), matrix, options);
  const auto engine_end = std::chrono::steady_clock::now();
  // The CUDA engine's own page-locked staging: small calls go zero-copy.
  if (!engine->staging_input().empty()) {
    in = engine->staging_input().first(channels * frames);
    out = engine->staging_output().first(channels * frames);
  } else {
    host_in.resize(channels * frames);
    host_out.resize(channels * frames);
    in = host_in;
    out = host_out;
  }
  MatrixEngine& e = *engine;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : in) x = dist(rng);
  const std::size_t warm = std::max<std::size_t>(100, blocks / 10);
  // Paced, a call's background work (the CUDA engine's tail steps, the CPU
  // engine's tail workers) runs in the rest of the period, as it does live.
  // Back to back, calls come faster than real time and measure throughput:
  // any deferred work then queues up behind the calls and is paid when due.
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double, std::micro>(period_us));
  auto next = std::chrono::steady_clock::now();
  std::vector<double> us, host_us;
  us.reserve(blocks);
  for (std::size_t i = 0; i < warm + blocks; ++i) {
    if (period_us > 0) {
      std::this_thread::sleep_until(next);
      next = std::max(next + period, std::chrono::steady_clock::now());  // late: no catching up
    }
    const auto t0 = std::chrono::steady_clock::now();
    e.process(in, out, frames, Layout::interleaved);
    const auto t1 = std::chrono::steady_clock::now();
    if (i < warm) continue;
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    if (const double host = e.last_call_host_us(); !std::isnan(host)) host_us.push_back(host);
  }
  Probe p;
  p.channels = channels;
  p.us = percentiles(std::move(us));
  if (!host_us.empty()) p.host_us = percentiles(std::move(host_us));
  p.description = e.description();
  p.fits = p.us.p999 < budget_us;
  p.bank_s = std::chrono::duration<double>(matrix_start - bank_start).count();
  p.matrix_s = std::chrono::duration<double>(engine_start - matrix_start).count();
  p.engine_s = std::chrono::duration<double>(engine_end - engine_start).count();
  return p;
}

struct Capacity {
  std::string engine;
  std::size_t frames = 0, taps = 0;
  double budget_us = 0;
  Probe best;  // measured over measure_blocks; channels 0 when none fits
  bool capped = false;
  std::vector<Probe> search;
  std::string error;
};

Capacity find_capacity(const CapacityArgs& args, const std::string& engine, std::size_t frames,
                       std::size_t taps) {
  Capacity cap;
  cap.engine = engine;
  cap.frames = frames;
  cap.taps = taps;
  cap.budget_us = 0.5 * double(frames) / args.rate * 1e6;
  // The bank's room grows with the GPUs the channels are sharded over (each
  // holds its share of the taps).
  const std::size_t gpus = engine == "cuda" ? std::max<std::size_t>(args.gpus.size(), 1) : 1;
  const std::size_t most =
      std::max<std::size_t>(1, std::min(args.max_channels, gpus * args.max_samples / taps));
  auto try_count = [&](std::size_t channels, std::size_t blocks) {
    Probe p;
    try {
      p = probe(engine, args.tuning, args.cuda_kernel, channels, frames, taps, blocks,
                cap.budget_us, args.back_to_back ? 0.0 : 2.0 * cap.budget_us);
    } catch (const std::exception& e) {  // out of memory counts as not fitting
      p.channels = channels;
      p.description = std::string("failed: ") + e.what();
      p.fits = false;
    }
    std::printf("  %-4s %5zu frames %7zu taps %6zu ch: p50 %9.1f p99 %9.1f p99.9 %9.1f us %s",
                engine.c_str(), frames, taps, channels, p.us.p50, p.us.p99, p.us.p999,
                p.fits ? "fits" : "over");
    if (p.host_us) std::printf(" (CPU side p50 %.1f p99 %.1f us)", p.host_us->p50, p.host_us->p99);
    std::printf(" set-up: bank %.2f s, matrix %.2f s, engine %.2f s\n", p.bank_s, p.matrix_s,
                p.engine_s);
    // Fixed counts are few: each one's engine, with where its set-up went.
    if (!args.channels.empty()) std::printf("    engine: %s\n", p.description.c_str());
    std::fflush(stdout);
    cap.search.push_back(p);
    return p;
  };
  if (!args.channels.empty()) {
    // Fixed counts: each timed over measure_blocks; the largest that fits is
    // the cell's result, marked capped (no larger count was tried).
    for (const std::size_t channels : args.channels) {
      const Probe p = try_count(channels, args.measure_blocks);
      if (p.fits && p.channels > cap.best.channels) cap.best = p;
    }
    cap.capped = cap.best.channels == args.channels.back() && cap.best.channels != 0;
    return cap;
  }
  std::optional<Probe> confirmed;
  const CapacitySearch found = search_capacity(most, args.probe_blocks, args.measure_blocks,
                                               [&](std::size_t channels, std::size_t blocks) {
                                                 const Probe p = try_count(channels, blocks);
                                                 if (p.fits && blocks == args.measure_blocks)
                                                   confirmed = p;
                                                 return p.fits;
                                               });
  cap.capped = found.capped;
  if (found.channels != 0 && confirmed) cap.best = *confirmed;
  return cap;
}

std::string json_for(const CapacityArgs& args, const std::vector<Capacity>& results) {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char date[32];
  std::strftime(date, sizeof date, "%FT%TZ", std::gmtime(&now));
  std::string gpu = "none";
  for (const Capacity& c : results)
    if (c.engine == "cuda" && !c.search.empty()) {
      const std::string& d = c.search.front().description;
      const auto open = d.find('('), close = d.find(')');
      if (open != std::string::npos && close != std::string::npos)
        gpu = d.substr(open + 1, close - open - 1);
    }
  nlohmann::ordered_json cells = nlohmann::ordered_json::array();
  for (const Capacity& c : results) {
    nlohmann::ordered_json cell = {
        {"engine", c.engine},       {"frames", c.frames},          {"taps", c.taps},
        {"budget_us", c.budget_us}, {"channels", c.best.channels}, {"capped", c.capped},
        {"p50_us", c.best.us.p50},  {"p99_us", c.best.us.p99},     {"p999_us", c.best.us.p999},
        {"max_us", c.best.us.max}};
    if (c.best.host_us) {
      cell["host_p50_us"] = c.best.host_us->p50;
      cell["host_p99_us"] = c.best.host_us->p99;
      cell["host_p999_us"] = c.best.host_us->p999;
    }
    cell["engine_description"] = c.best.description;
    cell["setup_bank_s"] = c.best.bank_s;
    cell["setup_matrix_s"] = c.best.matrix_s;
    cell["setup_engine_s"] = c.best.engine_s;
    // Each search step as [channels, p50, p99, p99.9 (us), engine set-up, bank, matrix (s)],
    // compact for long searches; a step whose engine could not be made has set-up 0.
    nlohmann::ordered_json search = nlohmann::ordered_json::array();
    for (const Probe& p : c.search)
      search.push_back(
          {p.channels, p.us.p50, p.us.p99, p.us.p999, p.engine_s, p.bank_s, p.matrix_s});
    cell["search"] = std::move(search);
    cells.push_back(std::move(cell));
  }
  const nlohmann::ordered_json report = {
      {"benchmark", "capacity"},
      {"commit", args.commit},
      {"date", date},
      {"gpu", gpu},
      {"cpu_threads", std::thread::hardware_concurrency()},
      {"rate", args.rate},
      {"measure_blocks", args.measure_blocks},
      {"probe_blocks", args.probe_blocks},
      {"cuda_kernel", args.cuda_kernel},
      {"engine_options", args.engine_options},
      {"gpus", args.gpus.empty() ? std::vector<int>{0} : args.gpus},
      {"paced", !args.back_to_back},
      {"results", std::move(cells)}};
  return report.dump(2) + "\n";
}

int run_capacity(CapacityArgs& args) {
  if (!args.devices.empty()) {
    if (std::find(args.engines.begin(), args.engines.end(), "cuda") == args.engines.end()) {
      throw UsageError("--devices " + args.devices + ": only the cuda engine runs on GPUs");
    }
    try {
      args.gpus = engine_devices(Backend::cuda, parse_device_list(args.devices));
    } catch (const std::invalid_argument& e) {
      throw UsageError("--devices " + args.devices + ": " + e.what());
    }
  }
  for (const std::string& assignment : args.engine_options) {
    try {
      set_engine_tuning(args.tuning, assignment);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--engine-option ") + e.what());
    }
  }
  args.tuning.devices = args.gpus;
  for (const std::size_t b : args.blocks)
    if (b == 0 || b > 65536)
      throw UsageError("--blocks: " + std::to_string(b) + " is not between 1 and 65536 frames");
  if (!std::is_sorted(args.channels.begin(), args.channels.end()))
    throw UsageError("--channels: give the counts in increasing order");
  for (const std::size_t t : args.taps)
    if (t == 0 || t > (std::size_t(1) << 24))
      throw UsageError("--taps: " + std::to_string(t) + " is not between 1 and 16777216 taps");
  std::vector<Capacity> results;
  for (const std::string& engine : args.engines) {
    try {
      parse_backend(engine);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--engines: ") + e.what());
    }
    // An engine that cannot run at all (no GPU, not built in) is an error,
    // not a capacity of zero.
    try {
      probe(engine, args.tuning, "auto", 1, 64, 64, 10, 1e30, 0.0);
    } catch (const std::exception& e) {
      throw std::runtime_error("the " + engine + " engine cannot run here: " + e.what());
    }
    for (const std::size_t taps : args.taps)
      for (const std::size_t frames : args.blocks) {
        std::printf("== %s, %zu-frame blocks, %zu taps (budget %.1f us at p99.9)\n", engine.c_str(),
                    frames, taps, 0.5 * double(frames) / args.rate * 1e6);
        results.push_back(find_capacity(args, engine, frames, taps));
      }
  }
  std::printf("\n%-5s %6s %8s %9s %9s %9s %9s %9s %11s\n", "engine", "block", "taps", "channels",
              "p50 us", "p99 us", "p99.9 us", "budget", "CPU-side p50");
  for (const Capacity& c : results) {
    std::printf("%-5s %6zu %8zu %8zu%s %9.1f %9.1f %9.1f %9.1f", c.engine.c_str(), c.frames, c.taps,
                c.best.channels, c.capped ? "+" : " ", c.best.us.p50, c.best.us.p99, c.best.us.p999,
                c.budget_us);
    if (c.best.host_us)
      std::printf(" %11.1f\n", c.best.host_us->p50);
    else
      std::printf(" %11s\n", "-");
  }
  if (!args.json.empty()) {
    std::ofstream f(args.json);
    f << json_for(args, results);
    if (!f) throw std::runtime_error("cannot write " + args.json);
    std::printf("wrote %s\n", args.json.c_str());
  }
  return exit_code::ok;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Measure what this machine's engines carry");
  bench->require_subcommand(1);
  CLI::App* capacity = bench->add_subcommand(
      "capacity",
      "Largest channel count per engine, block size and filter length whose p99.9 block time "
      "stays under half the block period");
  auto args = std::make_shared<CapacityArgs>();
  capacity->add_option("--engines", args->engines, "Engines to measure (cuda, cpu)")
      ->delimiter(',');
  capacity->add_option("--blocks", args->blocks, "Block sizes in frames")->delimiter(',');
  capacity->add_option("--taps", args->taps, "Filter lengths")->delimiter(',');
  capacity->add_option("--rate", args->rate, "Sample rate in Hz")
      ->check(number_between(1, 1e7, "Hz"));
  capacity
      ->add_option("--measure-blocks", args->measure_blocks, "Blocks timed at the capacity found")
      ->check(number_between(100, 1e7, "blocks"));
  capacity->add_option("--probe-blocks", args->probe_blocks, "Blocks timed per search step")
      ->check(number_between(10, 1e7, "blocks"));
  capacity->add_option("--max-channels", args->max_channels, "Largest channel count tried")
      ->check(number_between(1, 1 << 20, "channels"));
  capacity
      ->add_option("--channels", args->channels,
                   "Time these channel counts, each over --measure-blocks blocks, instead of "
                   "searching")
      ->delimiter(',')
      ->check(number_between(1, 1 << 20, "channels"));
  capacity->add_option("--cuda-kernel", args->cuda_kernel,
                       "The CUDA engine's kernel option (auto, or partitioned to force the "
                       "non-uniformly partitioned path)");
  capacity->add_flag("--back-to-back", args->back_to_back,
                     "Issue calls as fast as they return (throughput) instead of one per block "
                     "period (live)");
  capacity->add_option("--devices", args->devices,
                       "The cuda engine's channels sharded over these GPUs, one engine each: all, "
                       "or numbers such as 0,1 (default: GPU 0 alone)");
  capacity->add_option("--engine-option", args->engine_options,
                       "An engine tuning key as in the configuration's [engine] table, e.g. "
                       "cpu_threads=16 (repeatable; config/live-default.toml lists them)");
  capacity->add_option("--json", args->json, "Write the results as JSON to this file");
  capacity->add_option("--commit", args->commit, "Commit recorded in the JSON");
  const std::function<int()> run_updates = add_bench_updates(*bench);
  return {bench, [args, capacity, run_updates] {
            if (capacity->parsed()) return run_capacity(*args);
            if (const int code = run_updates(); code >= 0) return code;
            return exit_code::usage;
          }};
}

}  // namespace tapstream

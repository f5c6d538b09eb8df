// `tapstream bench updates`: how many filters an engine replaces at block
// rate. A routing matrix of S sources x O outputs (every pair a path: S x O
// paths of T taps, binaural rendering's shape with O = 2) runs one call per
// block period, as a live device delivers blocks; every k blocks every
// path's filter is replaced (MatrixEngine::set_paths, crossfaded over the
// call that follows), alternating between two distinct sets so that each
// update changes every path. A call's time is the update's (when one is due)
// plus the block's: p50 / p99 / p99.9 with the updates included. For every
// (engine, block size, filter length) the search finds the largest path
// count whose p99.9 stays under half the block period, probed short and
// confirmed long (daemon/commands/capacity_search). Engines:
// - cuda-device: the filters already on the GPU (set_paths_device, batched
//   transform on the device, no host copy), as a room simulator or HRTF
//   interpolator on the GPU hands them over;
// - cuda-host: the same filters from host memory (set_paths: one copy up);
// - cpu: the CPU matrix engine (set_paths, its threads as configured).
// With --diagonal the matrix is N -> N, path c: input c -> output c (a
// filter per channel, run by the per-channel engines through
// DiagonalEngine, whose per-channel updates cost the named channels only),
// and the search is over N; --kernel picks the CUDA per-channel engine's
// path ("partitioned": the one that takes per-channel updates natively);
// --fraction replaces only that share of the paths at each update; --live
// makes the engines as the live daemon makes them for calls in an audio
// callback (EngineOptions::realtime_calls: on the CPU, a filter per channel
// then runs on the non-uniformly partitioned engine, whose preparer and tail
// workers take an update off the call, which plays it from the first call
// after they have it).
// Prints a table and writes JSON (--json).

#include "daemon/commands/bench_updates.hpp"

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

#include "daemon/commands/capacity_search.hpp"
#include "daemon/commands/command.hpp"
#include "daemon/engine_factory.hpp"
#include "dsp/model/matrix_engine.hpp"
#include "dsp/model/routing_matrix.hpp"

namespace tapstream {
namespace {

struct UpdatesArgs {
  std::vector<std::string> engines = {"cuda-device", "cuda-host", "cpu"};
  std::vector<std::size_t> blocks = {64, 128};
  std::vector<std::size_t> taps = {2048, 8192, 32768};
  std::size_t every = 1;    // blocks between updates of every path
  std::size_t outputs = 2;  // paths = sources x outputs
  bool diagonal = false;    // N -> N, path c: c -> c (paths = N)
  std::string kernel = "auto";
  double fraction = 1.0;  // share of the paths each update replaces
  bool live = false;      // EngineOptions::realtime_calls
  double rate = 48000.0;
  std::size_t measure_blocks = 10000;
  std::size_t probe_blocks = 1000;
  std::size_t max_paths = 16384;
  std::size_t max_samples = std::size_t(1) << 28;  // paths x taps of one filter set
  std::string json;
  std::string commit = "unknown";
};

struct Percentiles {
  double p50 = 0, p99 = 0, p999 = 0, max = 0;  // microseconds
};

Percentiles percentiles(std::vector<double> us) {
  if (us.empty()) return {};
  std::sort(us.begin(), us.end());
  auto at = [&](double q) {
    return us[std::min(us.size() - 1, std::size_t(std::ceil(q * double(us.size()))) - 1)];
  };
  return {at(0.50), at(0.99), at(0.999), us.back()};
}

// Decaying noise (-60 dB at the last tap), one per set (0, 1, 2).
std::vector<float> base_filter(int set, std::size_t taps) {
  std::mt19937 rng(std::uint32_t(20261126 + set));
  std::normal_distribution<float> noise(0.0f, 1.0f);
  const double decay = 6.9 / double(taps);
  std::vector<float> h(taps);
  for (std::size_t k = 0; k < taps; ++k) h[k] = 0.05f * noise(rng) * float(std::exp(-decay * k));
  return h;
}

// Path p's filter from `base`: a rotation and a gain of its own, so that
// every path differs (cheap for thousands of long filters).
void path_filter(const std::vector<float>& base, std::size_t p, float* out) {
  const std::size_t taps = base.size(), shift = (p * 7919) % taps;
  const float gain = 0.5f + float(p % 97) / 97.0f;
  for (std::size_t k = 0; k < taps; ++k) out[k] = gain * base[(k + shift) % taps];
}

// Where one set of filters lives: host vectors, or device arrays.
struct FilterSet {
  std::vector<float> host;  // paths x taps
  float* device = nullptr;
  DeviceMemory memory;
  FilterSet() = default;
  FilterSet(const FilterSet&) = delete;
  FilterSet& operator=(const FilterSet&) = delete;
  ~FilterSet() {
    if (device != nullptr) memory.free(device);
  }
};

struct Probe {
  std::size_t paths = 0;
  Percentiles us;         // whole calls, updates included
  Percentiles update_us;  // the set_paths part of the calls with an update
  std::string description;
  bool fits = false;
};

Probe probe(const UpdatesArgs& args, const std::string& variant, std::size_t sources,
            std::size_t frames, std::size_t taps, std::size_t every, std::size_t blocks,
            double budget_us) {
  const std::size_t outputs = args.diagonal ? sources : args.outputs;
  const std::size_t paths = args.diagonal ? sources : sources * outputs;
  const std::vector<float> bases[3] = {base_filter(0, taps), base_filter(1, taps),
                                       base_filter(2, taps)};
  std::vector<MatrixPath> matrix_paths;
  for (std::size_t p = 0; p < paths; ++p) {
    MatrixPath path;
    path.input = args.diagonal ? p : p / outputs;
    path.output = args.diagonal ? p : p % outputs;
    path.taps.resize(taps);
    path_filter(bases[0], p, path.taps.data());
    path.source = "bench";
    matrix_paths.push_back(std::move(path));
  }
  const RoutingMatrix matrix = RoutingMatrix::make(sources, outputs, std::move(matrix_paths));
  EngineOptions options;
  options.max_block_frames = frames;
  options.max_taps = taps;
  options.kernel = args.kernel;
  options.realtime_calls = args.live;
  options.sample_rate = int(args.rate);
  const bool on_device = variant == "cuda-device";
  const std::string backend = variant == "cpu" ? "cpu" : "cuda";
  const std::unique_ptr<MatrixEngine> engine = make_engine(parse_backend(backend), matrix, options);
  // Two sets, so that every update changes every path.
  FilterSet sets[2];
  for (int s = 0; s < 2; ++s) {
    sets[s].host.resize(paths * taps);
    for (std::size_t p = 0; p < paths; ++p) path_filter(bases[1 + s], p, &sets[s].host[p * taps]);
    if (on_device) {
      sets[s].memory = engine->device_memory();
      if (!sets[s].memory.allocate)
        throw std::runtime_error("the " + engine->name() + " engine has no device memory");
      sets[s].device = sets[s].memory.allocate(paths * taps);
      sets[s].memory.copy_from_host(sets[s].device, sets[s].host.data(), paths * taps);
    }
  }
  std::vector<PathTaps> updates[2];
  const std::size_t replaced =
      std::max<std::size_t>(1, std::size_t(std::ceil(args.fraction * double(paths))));
  for (int s = 0; s < 2; ++s)
    for (std::size_t p = 0; p < std::min(paths, replaced); ++p) {
      const float* base = on_device ? sets[s].device : sets[s].host.data();
      updates[s].push_back({p, std::span<const float>(base + p * taps, taps)});
    }

  std::span<float> in, out;
  std::vector<float> host_in, host_out;
  if (!engine->staging_input().empty()) {
    in = engine->staging_input().first(sources * frames);
    out = engine->staging_output().first(outputs * frames);
  } else {
    host_in.resize(sources * frames);
    host_out.resize(outputs * frames);
    in = host_in;
    out = host_out;
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : in) x = dist(rng);

  const std::size_t warm = std::max<std::size_t>(50, blocks / 10);
  // One call per period (twice the budget), as a live device delivers blocks.
  const auto period_ns = std::chrono::nanoseconds(std::int64_t(2.0 * budget_us * 1000.0));
  auto next = std::chrono::steady_clock::now();
  std::vector<double> us, update_us;
  us.reserve(blocks);
  int set = 0;
  for (std::size_t i = 0; i < warm + blocks; ++i) {
    std::this_thread::sleep_until(next);
    next = std::max(next + period_ns, std::chrono::steady_clock::now());  // late: no catching up
    const auto t0 = std::chrono::steady_clock::now();
    const bool update = i % every == 0;
    if (update) {
      if (on_device) {
        if (!engine->set_paths_device(updates[set], true, nullptr))
          throw std::runtime_error("the " + engine->description() +
                                   " engine takes no filters from device memory");
      } else {
        engine->set_paths(updates[set], true);
      }
      set ^= 1;
    }
    const auto t1 = std::chrono::steady_clock::now();
    engine->process(in, out, frames, Layout::interleaved);
    const auto t2 = std::chrono::steady_clock::now();
    if (i < warm) continue;
    us.push_back(std::chrono::duration<double, std::micro>(t2 - t0).count());
    if (update) update_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  for (const float y : out)
    if (!std::isfinite(y)) throw std::runtime_error("the engine's output is not finite");
  Probe p;
  p.paths = paths;
  p.us = percentiles(std::move(us));
  p.update_us = percentiles(std::move(update_us));
  p.description = engine->description();
  p.fits = p.us.p999 < budget_us;
  return p;
}

struct Cell {
  std::string engine;
  std::size_t frames = 0, taps = 0;
  double budget_us = 0;
  Probe best;  // paths 0 when none fits
  bool capped = false;
  std::vector<Probe> search;
};

Cell find_most_paths(const UpdatesArgs& args, const std::string& engine, std::size_t frames,
                     std::size_t taps) {
  Cell cell;
  cell.engine = engine;
  cell.frames = frames;
  cell.taps = taps;
  cell.budget_us = 0.5 * double(frames) / args.rate * 1e6;
  const std::size_t most_paths = std::min(args.max_paths, args.max_samples / taps);
  const std::size_t most =
      std::max<std::size_t>(1, args.diagonal ? most_paths : most_paths / args.outputs);
  std::optional<Probe> confirmed;
  const CapacitySearch found = search_capacity(
      most, args.probe_blocks, args.measure_blocks, [&](std::size_t sources, std::size_t blocks) {
        Probe p;
        try {
          p = probe(args, engine, sources, frames, taps, args.every, blocks, cell.budget_us);
        } catch (const std::exception& e) {  // out of memory counts as not fitting
          p.paths = args.diagonal ? sources : sources * args.outputs;
          p.description = std::string("failed: ") + e.what();
        }
        std::printf(
            "  %-11s %5zu frames %6zu taps %6zu paths: p50 %8.1f p99 %8.1f p99.9 %8.1f us "
            "(update p50 %.1f p99.9 %.1f) %s%s\n",
            engine.c_str(), frames, taps, p.paths, p.us.p50, p.us.p99, p.us.p999, p.update_us.p50,
            p.update_us.p999, p.fits ? "fits" : "over",
            p.description.rfind("failed", 0) == 0 ? (" " + p.description).c_str() : "");
        std::fflush(stdout);
        cell.search.push_back(p);
        if (p.fits && blocks == args.measure_blocks) confirmed = p;
        return p.fits;
      });
  cell.capped = found.capped;
  if (found.channels != 0 && confirmed) cell.best = *confirmed;
  return cell;
}

std::string json_for(const UpdatesArgs& args, const std::vector<Cell>& cells,
                     const std::vector<std::string>& skipped) {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char date[32];
  std::strftime(date, sizeof date, "%FT%TZ", std::gmtime(&now));
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const Cell& c : cells) {
    const double seconds = double(c.frames) / args.rate;
    nlohmann::ordered_json cell = {
        {"engine", c.engine},
        {"frames", c.frames},
        {"taps", c.taps},
        {"budget_us", c.budget_us},
        {"paths", c.best.paths},
        {"capped", c.capped},
        {"path_updates_per_second",
         std::ceil(args.fraction * double(c.best.paths)) / (seconds * double(args.every))},
        {"p50_us", c.best.us.p50},
        {"p99_us", c.best.us.p99},
        {"p999_us", c.best.us.p999},
        {"max_us", c.best.us.max},
        {"update_p50_us", c.best.update_us.p50},
        {"update_p999_us", c.best.update_us.p999},
        {"engine_description", c.best.description}};
    nlohmann::ordered_json search = nlohmann::ordered_json::array();
    for (const Probe& p : c.search) search.push_back({p.paths, p.us.p50, p.us.p99, p.us.p999});
    cell["search"] = std::move(search);
    results.push_back(std::move(cell));
  }
  const nlohmann::ordered_json report = {{"benchmark", "updates"},
                                         {"commit", args.commit},
                                         {"date", date},
                                         {"cpu_threads", std::thread::hardware_concurrency()},
                                         {"rate", args.rate},
                                         {"every_blocks", args.every},
                                         {"outputs", args.outputs},
                                         {"diagonal", args.diagonal},
                                         {"kernel", args.kernel},
                                         {"fraction", args.fraction},
                                         {"live", args.live},
                                         {"measure_blocks", args.measure_blocks},
                                         {"probe_blocks", args.probe_blocks},
                                         {"paced", true},
                                         {"not_measured", skipped},
                                         {"results", std::move(results)}};
  return report.dump(2) + "\n";
}

void write_json(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + path);
}

int run_updates(const UpdatesArgs& args) {
  for (const std::size_t b : args.blocks)
    if (b == 0 || b > 65536)
      throw UsageError("--blocks: " + std::to_string(b) + " is not between 1 and 65536 frames");
  for (const std::size_t t : args.taps)
    if (t == 0 || t > (std::size_t(1) << 20))
      throw UsageError("--taps: " + std::to_string(t) + " is not between 1 and 1048576 taps");
  for (const std::string& e : args.engines)
    if (e != "cuda-device" && e != "cuda-host" && e != "cpu")
      throw UsageError("--engines: '" + e + "' is not one of cuda-device, cuda-host, cpu");
  std::vector<Cell> cells;
  std::vector<std::string> skipped;
  for (const std::string& engine : args.engines) {
    // An engine that cannot run here (no GPU, not built in) is said and
    // skipped, so that one run on a machine without a GPU still measures
    // the CPU engine.
    try {
      probe(args, engine, 1, 64, 64, 1, 10, 1e30);
    } catch (const std::exception& e) {
      std::printf("== %s not measured: %s\n", engine.c_str(), e.what());
      skipped.push_back(engine + ": " + e.what());
      continue;
    }
    for (const std::size_t taps : args.taps)
      for (const std::size_t frames : args.blocks) {
        std::printf(
            "== %s, %zu-frame blocks, %zu taps, every path replaced every %zu block%s "
            "(budget %.1f us at p99.9)\n",
            engine.c_str(), frames, taps, args.every, args.every == 1 ? "" : "s",
            0.5 * double(frames) / args.rate * 1e6);
        cells.push_back(find_most_paths(args, engine, frames, taps));
        // Written after every cell, so that a run cut short keeps what it measured.
        if (!args.json.empty()) write_json(args.json, json_for(args, cells, skipped));
      }
  }
  std::printf("\n%-11s %6s %7s %7s %12s %9s %9s %9s %9s %10s\n", "engine", "block", "taps", "paths",
              "updates/s", "p50 us", "p99 us", "p99.9 us", "budget", "update p50");
  for (const Cell& c : cells) {
    const double per_second = std::ceil(args.fraction * double(c.best.paths)) /
                              (double(c.frames) / args.rate * double(args.every));
    std::printf("%-11s %6zu %7zu %6zu%s %12.0f %9.1f %9.1f %9.1f %9.1f %10.1f\n", c.engine.c_str(),
                c.frames, c.taps, c.best.paths, c.capped ? "+" : " ", per_second, c.best.us.p50,
                c.best.us.p99, c.best.us.p999, c.budget_us, c.best.update_us.p50);
  }
  // The target (issue 25): at 128-frame blocks, >= 1024 paths of
  // 8192 taps replaced at every block from device arrays.
  for (const Cell& c : cells)
    if (c.engine == "cuda-device" && c.frames == 128 && c.taps == 8192 && args.every == 1 &&
        !args.diagonal && args.fraction == 1.0)
      std::printf(
          "target: cuda-device, 128 frames x 8192 taps, every block: %zu paths (>= 1024): %s\n",
          c.best.paths, c.best.paths >= 1024 ? "met" : "missed");
  if (!args.json.empty()) {
    write_json(args.json, json_for(args, cells, skipped));
    std::printf("wrote %s\n", args.json.c_str());
  }
  return cells.empty() ? exit_code::runtime_error : exit_code::ok;
}

}  // namespace

std::function<int()> add_bench_updates(CLI::App& bench) {
  CLI::App* updates = bench.add_subcommand(
      "updates",
      "Largest number of paths whose filters are all replaced every k blocks while p99.9 of the "
      "calls (updates included) stays under half the block period");
  auto args = std::make_shared<UpdatesArgs>();
  updates->add_option("--engines", args->engines, "cuda-device, cuda-host, cpu")->delimiter(',');
  updates->add_option("--blocks", args->blocks, "Block sizes in frames")->delimiter(',');
  updates->add_option("--taps", args->taps, "Filter lengths")->delimiter(',');
  updates->add_option("--every", args->every, "Blocks between updates of every path")
      ->check(number_between(1, 1e6, "blocks"));
  updates->add_option("--outputs", args->outputs, "Outputs (paths = sources x outputs)")
      ->check(number_between(1, 1024, "outputs"));
  updates->add_flag("--diagonal", args->diagonal,
                    "A filter per channel: N -> N, path c: input c -> output c (paths = N)");
  updates->add_option("--kernel", args->kernel,
                      "The CUDA per-channel engine's path (auto, partitioned, ...)");
  updates->add_option("--fraction", args->fraction, "Share of the paths each update replaces")
      ->check(number_between(1e-6, 1, "of the paths"));
  updates->add_flag("--live", args->live,
                    "Engines as the live daemon makes them for calls in an audio callback");
  updates->add_option("--rate", args->rate, "Sample rate in Hz")
      ->check(number_between(1, 1e7, "Hz"));
  updates->add_option("--measure-blocks", args->measure_blocks, "Blocks timed at the count found")
      ->check(number_between(100, 1e7, "blocks"));
  updates->add_option("--probe-blocks", args->probe_blocks, "Blocks timed per search step")
      ->check(number_between(10, 1e7, "blocks"));
  updates->add_option("--max-paths", args->max_paths, "Largest path count tried")
      ->check(number_between(1, 1 << 20, "paths"));
  updates->add_option("--json", args->json, "Write the results as JSON to this file");
  updates->add_option("--commit", args->commit, "Commit recorded in the JSON");
  return [args, updates]() -> int {
    if (!updates->parsed()) return -1;
    return run_updates(*args);
  };
}

}  // namespace tapstream

#include "daemon/engine_factory.hpp"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsp/cpu/cpu_engine.hpp"
#include "dsp/cpu/cpu_matrix_engine.hpp"
#include "dsp/model/diagonal_engine.hpp"
#include "dsp/model/sharded_engine.hpp"
#ifdef TAPSTREAM_CUDA_MODULE
#include "daemon/cuda_module/cuda_module.hpp"
#endif

namespace tapstream {

Backend parse_backend(const std::string& name) {
  if (name == "cpu") return Backend::cpu;
  if (name == "cuda") return Backend::cuda;
  if (name == "auto") return Backend::automatic;
  throw std::invalid_argument("unknown backend '" + name + "' (expected cpu, cuda or auto)");
}

#ifdef TAPSTREAM_CUDA_MODULE
namespace {

namespace fs = std::filesystem;

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

struct LoadedModule {
  const CudaModule* module = nullptr;
  std::string reason;  // why not, when module is null
};

// Beside the executable, then where `cmake --install` puts it, then beside
// the shared object this factory is linked into when that is not the
// executable (the Python module, whose executable is the interpreter), then
// in the build tree (for tests and benchmarks run from there).
std::vector<fs::path> module_candidates() {
  constexpr const char* kName = "libtapstream_cuda.so";
  std::vector<fs::path> candidates;
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    candidates.push_back(exe.parent_path() / kName);
    candidates.push_back(exe.parent_path().parent_path() / "lib" / "tapstream" / kName);
  }
  static const char anchor = 0;  // an address inside the shared object
  Dl_info self{};
  if (dladdr(&anchor, &self) != 0 && self.dli_fname != nullptr) {
    const fs::path holder = fs::absolute(self.dli_fname, error);
    if (!error && holder != exe) candidates.push_back(holder.parent_path() / kName);
  }
  candidates.push_back(TAPSTREAM_CUDA_MODULE);
  return candidates;
}

// Without the NVIDIA driver's device files (or WSL's GPU device) no CUDA device
// can work: saying so costs a stat, where loading the CUDA libraries to be told
// the same costs tens of milliseconds.
bool gpu_driver_present() {
  std::error_code error;
  for (const char* device : {"/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg"}) {
    if (fs::exists(device, error)) return true;
  }
  return false;
}

LoadedModule load_module() {
  LoadedModule loaded;
  if (!gpu_driver_present()) {
    loaded.reason = "no NVIDIA driver is installed or loaded";
    return loaded;
  }
  loaded.reason = "the CUDA engine module (libtapstream_cuda.so) was not found";
  for (const fs::path& candidate : module_candidates()) {
    std::error_code error;
    if (!fs::exists(candidate, error)) continue;
    // Never closed: the engines it makes live until the process ends.
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      loaded.reason = std::string("cannot load the CUDA engine module: ") + dlerror();
      return loaded;
    }
    using Entry = const CudaModule* (*)();
    const auto entry = reinterpret_cast<Entry>(dlsym(handle, "tapstream_cuda_module"));
    if (entry == nullptr) {
      loaded.reason = candidate.string() + " is not a tapstream CUDA engine module";
      return loaded;
    }
    loaded.module = entry();
    return loaded;
  }
  return loaded;
}

// The CUDA start-up (libraries, driver, the device's context: about 0.3 s on
// an H100 host, most of it cuInit and the context), made once per process on a
// thread of its own: start_cuda_in_background() begins it while the caller
// reads its input and filters; make_engine waits for it.
struct CudaStart {
  LoadedModule loaded;
  bool available = false;
  std::string reason;
  double load_ms = 0, device_ms = 0;
};

CudaStart start_cuda() {
  CudaStart start;
  const auto t0 = std::chrono::steady_clock::now();
  start.loaded = load_module();
  start.load_ms = milliseconds_since(t0);
  start.reason = start.loaded.reason;
  if (start.loaded.module != nullptr)
    start.available = start.loaded.module->device_available(&start.reason);
  start.device_ms = milliseconds_since(t0) - start.load_ms;
  return start;
}

const std::shared_future<CudaStart>& cuda_start() {
  static const std::shared_future<CudaStart> started =
      std::async(std::launch::async, start_cuda).share();
  return started;
}

}  // namespace
#endif

void start_cuda_in_background() {
#ifdef TAPSTREAM_CUDA_MODULE
  static_cast<void>(cuda_start());
#endif
}

Backend backend_for_job(Backend requested, std::size_t channels, std::int64_t frames) {
  if (requested != Backend::automatic || frames < 0) return requested;
  const double samples = double(channels) * double(frames);
  if (samples > double(kCpuJobSamples)) return requested;
  spdlog::debug(
      "backend auto: using the CPU engine for a job of {} samples ({} frames, {} channel{}): it "
      "is filtered sooner than the GPU would start (docs/performance.md, \"File to file\")",
      std::int64_t(samples), frames, channels, channels == 1 ? "" : "s");
  return Backend::cpu;
}

namespace {

// The longest block from 4096 frames, doubling up to `most`, whose channels
// in and out hold at most `samples` samples.
std::size_t block_within(std::size_t samples, std::size_t most, std::size_t channels) {
  std::size_t frames = 4096;
  while (frames < most && 2 * frames * std::max<std::size_t>(channels, 1) <= samples) {
    frames *= 2;
  }
  return frames;
}

}  // namespace

std::size_t offline_block_frames(const std::string& engine, std::size_t channels,
                                 std::size_t taps) {
  const bool cuda = engine == "cuda";
  if (!cuda && taps == 1) {
    std::size_t frames = 1024;
    while (frames < 16384 && 2 * frames * std::max<std::size_t>(channels, 1) <= kGainBlockSamples) {
      frames *= 2;
    }
    return frames;
  }
  return block_within(std::size_t(1) << (cuda ? 23 : 20), cuda ? 65536 : 16384, channels);
}

namespace {

// The options with the block chosen for `engine` when the caller left it at 0
// (`taps`: the filters' longest, delay included, where it is known; 0 if not).
EngineOptions for_engine(const char* engine, std::size_t channels, EngineOptions options,
                         std::size_t taps = 0) {
  if (options.max_block_frames == 0) {
    options.max_block_frames = offline_block_frames(engine, channels, taps);
  }
  return options;
}

// True the first time a reason for auto's fallback is given in this process:
// a batch or job list makes an engine per group of files, and says it once.
bool first_time_told(const std::string& reason) {
  static std::mutex mutex;
  static std::set<std::string> told;
  const std::lock_guard lock(mutex);
  return told.insert(reason).second;
}

// The options for an engine that folds a path's delay into its taps (the
// per-channel engines a diagonal matrix runs on): max_taps bounds filters
// alone, so such an engine holds the matrix's delays on top. The matrix
// engines (CPU, CUDA) delay natively, or fold and size themselves for it.
EngineOptions folding_delays(const RoutingMatrix& matrix, EngineOptions options) {
  if (options.max_taps != 0) options.max_taps += matrix.max_delay_frames();
  return options;
}

// Builds the engine `backend` names: the CUDA one through the module's
// `make_cuda` when a GPU works (for auto: also when building it works),
// otherwise `make_cpu`, logging auto's fallback with its reason (once per
// reason and process).
template <typename Made, typename MakeCuda, typename MakeCpu>
Made make_any(Backend backend, const MakeCuda& make_cuda, const MakeCpu& make_cpu) {
  if (backend == Backend::cpu) return make_cpu();
#ifdef TAPSTREAM_CUDA_MODULE
  const auto start = std::chrono::steady_clock::now();
  const CudaStart& started = cuda_start().get();
  const double waited_ms = milliseconds_since(start);
  std::string reason = started.reason;
  if (started.available) {
    const auto engine_start = std::chrono::steady_clock::now();
    const auto log_startup = [&] {
      spdlog::debug(
          "cuda start-up: libraries {:.1f} ms, device query {:.1f} ms (waited for {:.1f} ms of "
          "them), engine and context {:.1f} ms",
          started.load_ms, started.device_ms, waited_ms, milliseconds_since(engine_start));
    };
    if (backend == Backend::cuda) {
      Made engine = make_cuda(*started.loaded.module);
      log_startup();
      return engine;
    }
    try {
      Made engine = make_cuda(*started.loaded.module);
      log_startup();
      return engine;
    } catch (const std::exception& e) {
      reason = started.loaded.module->failure_sentence(e.what());
    }
  }
  if (backend == Backend::cuda) throw std::runtime_error("backend cuda: " + reason);
#else
  (void)make_cuda;
  const std::string reason = "this build has no CUDA engine (configured with TAPSTREAM_CUDA=OFF)";
  if (backend == Backend::cuda) throw std::runtime_error("backend cuda: " + reason);
#endif
  spdlog::log(first_time_told(reason) ? spdlog::level::info : spdlog::level::debug,
              "backend auto: using the CPU engine: {}", reason);
  return make_cpu();
}

}  // namespace

namespace {

// A CUDA engine for `matrix` on options.device, through the module: a
// diagonal matrix on the per-channel engine under DiagonalEngine (with the
// transport's extras; it folds delays), any other on the matrix engine.
// `options` already hold the block (for_engine). A template, so that a build
// without the module compiles without its type.
template <typename Module>
std::unique_ptr<MatrixEngine> make_cuda_matrix(const Module& module, const RoutingMatrix& matrix,
                                               const EngineOptions& options) {
  if (!matrix.is_diagonal()) return module.make_matrix_engine(matrix, options);
  std::unique_ptr<Engine> engine =
      module.make_engine(*matrix.diagonal_bank(), folding_delays(matrix, options));
  EngineTransport transport;
  transport.staging_input = module.staging(*engine, true);
  transport.staging_output = module.staging(*engine, false);
  transport.pinned = {module.allocate_pinned, module.free_pinned};
  transport.call_host_us = module.last_call_host_us;
  transport.process_device = module.process_device;
  return std::make_unique<DiagonalEngine>(std::move(engine), transport, &matrix);
}

// The CPU matrix engine filters a call's whole segments together, each
// filter spectrum read once a call: offline, its blocks hold up to four times
// a per-channel engine's samples (a 16 -> 128 wave-field matrix of 2048
// paths, 10 s file to file on the 2-core development VM, alternated: 1.15-1.21
// s at 16384-frame blocks, 1.20-1.29 s at 8192, the per-channel rule's, 1.44-1.59
// s at 4096; six blocks in flight of 128 channels are 50 MB).
constexpr std::size_t kCpuMatrixBlockSamples = std::size_t(1) << 22;

std::unique_ptr<MatrixEngine> make_cpu_matrix(const RoutingMatrix& matrix,
                                              const EngineOptions& options) {
  const std::size_t channels = std::max(matrix.inputs(), matrix.outputs());
  if (!matrix.is_diagonal()) {
    EngineOptions matrix_options = options;
    if (matrix_options.max_block_frames == 0) {
      matrix_options.max_block_frames = block_within(kCpuMatrixBlockSamples, 16384, channels);
    }
    return make_cpu_matrix_engine(matrix, matrix_options);
  }
  return std::make_unique<DiagonalEngine>(
      make_cpu_engine(
          *matrix.diagonal_bank(),
          for_engine("cpu", channels, folding_delays(matrix, options), matrix.max_taps())),
      EngineTransport{}, &matrix);
}

}  // namespace

std::unique_ptr<MatrixEngine> make_engine(Backend backend, const RoutingMatrix& matrix,
                                          const EngineOptions& given) {
  const std::size_t channels = std::max(matrix.inputs(), matrix.outputs());
  EngineOptions options = given;
  const std::vector<int> devices = std::move(options.devices);
  options.devices.clear();
  if (devices.size() == 1) options.device = devices.front();
  if (devices.size() <= 1) {
    return make_any<std::unique_ptr<MatrixEngine>>(
        backend,
        [&](const auto& module) {
          return make_cuda_matrix(module, matrix, for_engine("cuda", channels, options));
        },
        [&] { return make_cpu_matrix(matrix, options); });
  }
  // One engine per GPU, each for its outputs' part of the matrix, all with
  // the block and filter room of the whole (so that any swap the whole
  // matrix may take, every part may).
  return make_any<std::unique_ptr<MatrixEngine>>(
      backend,
      [&](const auto& module) -> std::unique_ptr<MatrixEngine> {
        EngineOptions each = for_engine("cuda", channels, options);
        if (each.max_taps == 0) each.max_taps = matrix.max_filter_taps();
        // Every part's delay line as long as the whole matrix's longest delay.
        each.max_delay_frames = std::max(each.max_delay_frames, matrix.max_delay_frames());
        return std::make_unique<ShardedEngine>(matrix, devices.size(),
                                               [&](std::size_t shard, const RoutingMatrix& part) {
                                                 EngineOptions on_device = each;
                                                 on_device.device = devices[shard];
                                                 return make_cuda_matrix(module, part, on_device);
                                               });
      },
      [&] { return make_cpu_matrix(matrix, options); });
}

std::vector<int> engine_devices(Backend backend, const DeviceList& list) {
  if (backend == Backend::cpu) return {};
#ifdef TAPSTREAM_CUDA_MODULE
  const CudaStart& start = cuda_start().get();
  const std::string reason = start.reason;
  if (start.available) return resolve_device_list(list, start.loaded.module->device_count());
#else
  (void)list;  // a build without the module has no devices to choose from
  const std::string reason = "this build has no CUDA engine (configured with TAPSTREAM_CUDA=OFF)";
#endif
  if (backend == Backend::cuda) throw std::runtime_error("backend cuda: " + reason);
  return {};  // auto without a GPU: the CPU engine (make_engine says why)
}

BlockAllocator block_allocator(const MatrixEngine& engine) {
  const PinnedMemory pinned = engine.pinned_memory();
  if (pinned.allocate == nullptr || pinned.free == nullptr) return ordinary_block_memory;
  return [pinned](std::size_t floats) { return BlockMemory(pinned.allocate(floats), pinned.free); };
}

}  // namespace tapstream

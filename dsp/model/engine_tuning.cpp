#include "dsp/model/engine_tuning.hpp"

#include <bit>
#include <charconv>
#include <stdexcept>

namespace tapstream {

namespace {

constexpr long long kMaxPersistentIdleMs = 60'000;
constexpr long long kMaxPersistentAnswerUs = 10'000'000;
constexpr std::size_t kMinFftPartition = 64;
constexpr std::size_t kMaxFftPartition = 32768;

[[noreturn]] void refuse(std::string_view name, std::string_view value, std::string_view reason) {
  throw std::invalid_argument(std::string(name) + " = " + std::string(value) + ": " +
                              std::string(reason));
}

long long integer(std::string_view name, std::string_view value, long long low, long long high) {
  long long n = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (error != std::errc() || end != value.data() + value.size())
    refuse(name, value, "expected an integer");
  if (n < low || n > high)
    refuse(name, value, "expected " + std::to_string(low) + ".." + std::to_string(high));
  return n;
}

bool boolean(std::string_view name, std::string_view value) {
  if (value == "true") return true;
  if (value == "false") return false;
  refuse(name, value, "expected true or false");
}

std::string_view text_of(CudaSmallCalls mode) {
  switch (mode) {
    case CudaSmallCalls::automatic:
      return "auto";
    case CudaSmallCalls::persistent:
      return "persistent";
    case CudaSmallCalls::spin:
      return "spin";
    case CudaSmallCalls::event:
      return "event";
  }
  return "?";
}

}  // namespace

const std::vector<EngineTuningKey>& engine_tuning_keys() {
  static const std::vector<EngineTuningKey> keys = {
      {"cpu_threads", "0", "threads one CPU engine call may use; 0 = every hardware thread"},
      {"cuda_small_calls", "\"auto\"",
       "how small CUDA calls reach the GPU: auto (persistent), persistent, spin or event"},
      {"cuda_persistent_idle_ms", "200",
       "the persistent kernel returns after this long without a call (1..60000)"},
      {"cuda_persistent_answer_us", "50000",
       "a call waits this long for the persistent kernel before a fresh launch serves it"},
      {"cuda_persistent_trace", "false", "record the persistent kernel's per-call times"},
      {"cuda_persistent_loads", "2",
       "the persistent kernel's staging loads: 2 plain, 0 ld.cv, 1 ld.relaxed.sys"},
      {"cuda_partitioned", "true",
       "the cost model may choose the non-uniformly partitioned path for short calls"},
      {"cuda_zero_copy_samples", "1024",
       "CUDA calls of at most this many samples (channels x frames) skip the copies"},
      {"cuda_stream_tiles", "true",
       "short filters over long planar blocks may use the streaming tile kernel"},
      {"fft_partition", "0",
       "the CUDA FFT path's partition (a power of two in 64..32768); 0 = by the cost model"},
      {"fft_fused", "true",
       "the CUDA FFT path may run whole segments through its shared-memory kernels"},
      {"matrix_kernel", "\"auto\"",
       "the GPU routing matrix's multiply-accumulate: auto (tiled), tiled or cublas"},
      {"matrix_graphs", "true", "a GPU routing matrix's block runs as one CUDA graph"},
  };
  return keys;
}

bool is_engine_tuning_key(std::string_view name) {
  for (const auto& key : engine_tuning_keys()) {
    if (key.name == name) return true;
  }
  return false;
}

void set_engine_tuning(EngineOptions& options, std::string_view name, std::string_view value) {
  CudaEngineOptions& cuda = options.cuda;
  if (name == "cpu_threads") {
    options.cpu.threads = std::size_t(integer(name, value, 0, 4096));
  } else if (name == "cuda_small_calls") {
    bool found = false;
    for (auto mode : {CudaSmallCalls::automatic, CudaSmallCalls::persistent, CudaSmallCalls::spin,
                      CudaSmallCalls::event}) {
      if (value == text_of(mode)) {
        cuda.small_calls = mode;
        found = true;
      }
    }
    if (!found) refuse(name, value, "expected auto, persistent, spin or event");
  } else if (name == "cuda_persistent_idle_ms") {
    cuda.persistent_idle = std::chrono::milliseconds(integer(name, value, 1, kMaxPersistentIdleMs));
  } else if (name == "cuda_persistent_answer_us") {
    cuda.persistent_answer =
        std::chrono::microseconds(integer(name, value, 1, kMaxPersistentAnswerUs));
  } else if (name == "cuda_persistent_trace") {
    cuda.persistent_trace = boolean(name, value);
  } else if (name == "cuda_persistent_loads") {
    cuda.persistent_loads = int(integer(name, value, 0, 2));
  } else if (name == "cuda_partitioned") {
    cuda.partitioned = boolean(name, value);
  } else if (name == "cuda_zero_copy_samples") {
    cuda.zero_copy_samples = std::size_t(integer(name, value, 0, 1LL << 40));
  } else if (name == "cuda_stream_tiles") {
    cuda.stream_tiles = boolean(name, value);
  } else if (name == "fft_partition") {
    const auto partition = std::size_t(integer(name, value, 0, kMaxFftPartition));
    if (partition != 0 && (partition < kMinFftPartition || !std::has_single_bit(partition)))
      refuse(name, value, "expected 0 (by the cost model) or a power of two in 64..32768");
    cuda.fft_partition = partition;
  } else if (name == "fft_fused") {
    cuda.fft_fused = boolean(name, value);
  } else if (name == "matrix_kernel") {
    if (value == "auto") {
      cuda.matrix_kernel = CudaMatrixKernel::automatic;
    } else if (value == "tiled") {
      cuda.matrix_kernel = CudaMatrixKernel::tiled;
    } else if (value == "cublas") {
      cuda.matrix_kernel = CudaMatrixKernel::cublas;
    } else {
      refuse(name, value, "expected auto, tiled or cublas");
    }
  } else if (name == "matrix_graphs") {
    cuda.matrix_graphs = boolean(name, value);
  } else {
    std::string known;
    for (const auto& key : engine_tuning_keys())
      known += (known.empty() ? "" : ", ") + std::string(key.name);
    refuse(name, value, "unknown engine option (known: " + known + ")");
  }
}

void set_engine_tuning(EngineOptions& options, std::string_view assignment) {
  const auto equals = assignment.find('=');
  if (equals == std::string_view::npos || equals == 0)
    throw std::invalid_argument("engine option '" + std::string(assignment) +
                                "': expected KEY=VALUE");
  set_engine_tuning(options, assignment.substr(0, equals), assignment.substr(equals + 1));
}

void check_cuda_options(const CudaEngineOptions& o) {
  // Each value through the one parser, so that code and configuration meet
  // the same bounds with the same words.
  EngineOptions scratch;
  set_engine_tuning(scratch, "cuda_persistent_idle_ms", std::to_string(o.persistent_idle.count()));
  set_engine_tuning(scratch, "cuda_persistent_answer_us",
                    std::to_string(o.persistent_answer.count()));
  set_engine_tuning(scratch, "cuda_persistent_loads", std::to_string(o.persistent_loads));
  set_engine_tuning(scratch, "cuda_zero_copy_samples", std::to_string(o.zero_copy_samples));
  set_engine_tuning(scratch, "fft_partition", std::to_string(o.fft_partition));
}

}  // namespace tapstream

#include <nvrtc.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.hpp"
#include "kernels/device/fft_callbacks.hpp"

namespace tapstream::cuda {
namespace {

// Device source of the callbacks (see fft_callbacks.hpp). Batch b of a
// transform is segment t = b / C, channel c = b % C; the callbacks recover b
// from the buffer pointer cuFFT passes (the run's sub-batch base) plus offset.
// C++ linkage on purpose: cuFFT finds each callback by its name with the C++
// signature of its callback type (an extern "C" symbol fails the JIT link).
constexpr const char* kSource = R"(
struct FusedParams {
  const float* in;
  unsigned long long in_stride;
  const float* stage;
  const float* window_base;
  const float2* product_base;
  const float* time_base;
  float* out;
  unsigned long long out_stride;
  const float2* new_spectra;
  float2* ring;
  unsigned long long ring_slots;
  const float2* filter;
  unsigned long long filter_partition_stride;
  unsigned long long filter_channel_stride;
  long long first_segment;
  unsigned long long store_from;
  unsigned long long partitions;
  unsigned long long channels;
  unsigned long long partition;
  unsigned long long bins;
};

__device__ float tapstream_load_window(void* data, unsigned long long offset,
                                                  void* info, void*) {
  const FusedParams& p = *static_cast<const FusedParams*>(info);
  const unsigned long long window = 2 * p.partition;
  const unsigned long long index = (static_cast<const float*>(data) - p.window_base) + offset;
  const unsigned long long b = index / window;
  const unsigned long long i = index - b * window;
  const unsigned long long t = b / p.channels;
  const unsigned long long c = b - t * p.channels;
  const unsigned long long position = t * p.partition + i;  // from the start of segment -1
  return position < p.partition ? p.stage[c * window + position]
                                : p.in[c * p.in_stride + position - p.partition];
}

__device__ float2 tapstream_load_product(void* data, unsigned long long offset,
                                                    void* info, void*) {
  const FusedParams& p = *static_cast<const FusedParams*>(info);
  const unsigned long long index = (static_cast<const float2*>(data) - p.product_base) + offset;
  const unsigned long long b = index / p.bins;
  const unsigned long long bin = index - b * p.bins;
  const unsigned long long t = b / p.channels;
  const unsigned long long c = b - t * p.channels;
  const unsigned long long per_segment = p.channels * p.bins;
  const unsigned long long within = c * p.bins + bin;
  const long long segment = p.first_segment + (long long)t;
  // Idempotent: cuFFT may load an element more than once.
  if (t >= p.store_from)
    p.ring[((unsigned long long)segment % p.ring_slots) * per_segment + within] =
        p.new_spectra[t * per_segment + within];
  float2 acc = make_float2(0.0f, 0.0f);
  unsigned long long end = (unsigned long long)segment + 1;
  if (p.partitions < end) end = p.partitions;
  const float2* h = p.filter + c * p.filter_channel_stride + bin;
  for (unsigned long long j = 0; j < end; ++j) {
    const long long n = segment - (long long)j;
    const float2 x = n >= p.first_segment
                         ? p.new_spectra[(unsigned long long)(n - p.first_segment) * per_segment + within]
                         : p.ring[((unsigned long long)n % p.ring_slots) * per_segment + within];
    const float2 w = h[j * p.filter_partition_stride];
    acc.x = fmaf(x.x, w.x, fmaf(-x.y, w.y, acc.x));
    acc.y = fmaf(x.x, w.y, fmaf(x.y, w.x, acc.y));
  }
  return acc;
}

__device__ void tapstream_store_output(void* data, unsigned long long offset,
                                                  float value, void* info, void*) {
  const FusedParams& p = *static_cast<const FusedParams*>(info);
  const unsigned long long window = 2 * p.partition;
  const unsigned long long index = (static_cast<const float*>(data) - p.time_base) + offset;
  const unsigned long long b = index / window;
  const unsigned long long i = index - b * window;
  if (i < p.partition) return;  // the first half wraps around: not valid output
  const unsigned long long t = b / p.channels;
  const unsigned long long c = b - t * p.channels;
  p.out[c * p.out_stride + t * p.partition + i - p.partition] = value;
}
)";

void check_nvrtc(nvrtcResult result, const char* call, nvrtcProgram program = nullptr) {
  if (result == NVRTC_SUCCESS) return;
  std::string message = std::string(call) + " failed: " + nvrtcGetErrorString(result);
  if (program != nullptr) {
    std::size_t size = 0;
    if (nvrtcGetProgramLogSize(program, &size) == NVRTC_SUCCESS && size > 1) {
      std::string log(size, '\0');
      if (nvrtcGetProgramLog(program, log.data()) == NVRTC_SUCCESS) message += "\n" + log;
    }
  }
  throw std::runtime_error(message);
}

std::vector<char> compile_callbacks(int major, int minor) {
  nvrtcProgram program = nullptr;
  check_nvrtc(
      nvrtcCreateProgram(&program, kSource, "tapstream_fft_callbacks.cu", 0, nullptr, nullptr),
      "nvrtcCreateProgram");
  struct Destroy {
    nvrtcProgram* p;
    ~Destroy() { nvrtcDestroyProgram(p); }
  } destroy{&program};
  const std::string arch = "-arch=compute_" + std::to_string(major * 10 + minor);
  const char* options[] = {arch.c_str(), "-dlto", "-rdc=true", "-std=c++17"};
  const nvrtcResult compiled = nvrtcCompileProgram(program, 4, options);
  check_nvrtc(compiled, "nvrtcCompileProgram(fft callbacks)", program);
  std::size_t size = 0;
  check_nvrtc(nvrtcGetLTOIRSize(program, &size), "nvrtcGetLTOIRSize");
  std::vector<char> ltoir(size);
  check_nvrtc(nvrtcGetLTOIR(program, ltoir.data()), "nvrtcGetLTOIR");
  return ltoir;
}

__global__ void set_fused_params_kernel(FusedParams* device, FusedParams value) {
  *device = value;
}

}  // namespace

const std::vector<char>& fused_callbacks_ltoir() {
  static std::mutex mutex;
  static std::map<int, std::vector<char>> by_arch;  // compiled once per architecture
  int device = 0;
  TAPSTREAM_CUDA_CHECK(cudaGetDevice(&device));
  int major = 0, minor = 0;
  TAPSTREAM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TAPSTREAM_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  const std::lock_guard lock(mutex);
  auto [it, inserted] = by_arch.try_emplace(major * 10 + minor);
  if (inserted) {
    try {
      it->second = compile_callbacks(major, minor);
    } catch (...) {
      by_arch.erase(it);
      throw;
    }
  }
  return it->second;
}

void launch_set_fused_params(FusedParams* device, const FusedParams& value, cudaStream_t stream) {
  set_fused_params_kernel<<<1, 1, 0, stream>>>(device, value);
  TAPSTREAM_CUDA_CHECK_LAUNCH("set_fused_params_kernel");
}

}  // namespace tapstream::cuda

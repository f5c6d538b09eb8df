// The CUDA engine module's entry point (see cuda_module.hpp).

#include "daemon/cuda_module/cuda_module.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.hpp"
#include "kernels/cuda_engine.hpp"
#include "kernels/device_memory_check.hpp"
#include "kernels/matrix/cuda_matrix_engine.hpp"

namespace tapstream {
namespace {

float* allocate_pinned(std::size_t floats) {
  void* p = nullptr;
  TAPSTREAM_CUDA_CHECK(cudaHostAlloc(&p, floats * sizeof(float), cudaHostAllocDefault));
  std::memset(p, 0, floats * sizeof(float));
  return static_cast<float*>(p);
}

std::span<float> staging(Engine& engine, bool input) {
  auto& cuda = dynamic_cast<CudaEngine&>(engine);
  return input ? cuda.pinned_input() : cuda.pinned_output();
}

double last_call_host_us(const Engine& engine) {
  return dynamic_cast<const CudaEngine&>(engine).last_call_host_us();
}

// A diagonal matrix's block in device memory (MatrixEngine::process_device):
// after the caller's stream, complete on return.
bool process_device(Engine& engine, const float* in, std::size_t in_stride, float* out,
                    std::size_t out_stride, std::size_t frames, void* stream) {
  auto& cuda = dynamic_cast<CudaEngine&>(engine);
  cuda::check_device_memory(in, "the input");
  cuda::check_device_memory(out, "the output");
  if (in_stride != out_stride) {
    throw std::invalid_argument("process_device: the input's channel stride " +
                                std::to_string(in_stride) + " is not the output's " +
                                std::to_string(out_stride));
  }
  cuda.process_device_after(in, out, frames, in_stride, static_cast<cudaStream_t>(stream));
  return true;
}

void free_pinned(float* p) {
  cudaFreeHost(p);  // in a destructor: nothing to do about a failure
}

const CudaModule kModule{
    cuda_device_available,   cuda_device_count, make_cuda_engine, cuda_failure_sentence,
    make_cuda_matrix_engine, staging,           allocate_pinned,  free_pinned,
    last_call_host_us,       process_device};

}  // namespace
}  // namespace tapstream

extern "C" __attribute__((visibility("default"))) const tapstream::CudaModule*
tapstream_cuda_module() {
  return &tapstream::kModule;
}

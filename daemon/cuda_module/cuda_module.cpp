// The CUDA engine module's entry point (see cuda_module.hpp).

#include "daemon/cuda_module/cuda_module.hpp"

#include <cstring>

#include "kernels/cuda_check.hpp"
#include "kernels/cuda_engine.hpp"
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

void free_pinned(float* p) {
  cudaFreeHost(p);  // in a destructor: nothing to do about a failure
}

const CudaModule kModule{cuda_device_available,
                         make_cuda_engine,
                         cuda_failure_sentence,
                         make_cuda_matrix_engine,
                         staging,
                         allocate_pinned,
                         free_pinned,
                         last_call_host_us};

}  // namespace
}  // namespace tapstream

extern "C" __attribute__((visibility("default"))) const tapstream::CudaModule*
tapstream_cuda_module() {
  return &tapstream::kModule;
}

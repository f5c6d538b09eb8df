#pragma once
// The CUDA engine as a module that the engine factory loads only when a job
// asks for it (libtapstream_cuda.so beside the executable, or in
// ../lib/tapstream): the CUDA runtime, cuFFT and NVRTC cost about 45 ms of
// dynamic loading alone, which a run on the CPU engine should not pay. Plain
// C++, no CUDA headers; the executable and the module are built together from
// one tree, so C++ types may cross the boundary.

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "dsp/model/engine.hpp"
#include "dsp/model/matrix_engine.hpp"

namespace tapstream {

struct CudaModule {
  // True when a CUDA device can be used; otherwise false and `reason` says why.
  bool (*device_available)(std::string* reason);
  // How many GPUs the process sees (kernels/cuda_engine.hpp: cuda_device_count).
  int (*device_count)();
  // See kernels/cuda_engine.hpp: make_cuda_engine and cuda_failure_sentence.
  std::unique_ptr<Engine> (*make_engine)(const FilterBank& bank, const EngineOptions& options);
  std::string (*failure_sentence)(const std::string& what);
  // See kernels/matrix/cuda_matrix_engine.hpp.
  std::unique_ptr<MatrixEngine> (*make_matrix_engine)(const RoutingMatrix& matrix,
                                                      const EngineOptions& options);
  // A CUDA engine's own page-locked staging (CudaEngine::pinned_input/output).
  std::span<float> (*staging)(Engine& engine, bool input);
  // Page-locked host memory (zero-filled); throws naming the failing call.
  float* (*allocate_pinned)(std::size_t floats);
  void (*free_pinned)(float* p);
  // CudaEngine::last_call_host_us: the last call's CPU-side part.
  double (*last_call_host_us)(const Engine& engine);
  // MatrixEngine::process_device for a CUDA engine under a DiagonalEngine.
  bool (*process_device)(Engine& engine, const float* in, std::size_t in_stride, float* out,
                         std::size_t out_stride, std::size_t frames, void* stream);
};

}  // namespace tapstream

// The module's one exported symbol.
extern "C" const tapstream::CudaModule* tapstream_cuda_module();

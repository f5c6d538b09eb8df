#include "daemon/engine_factory.hpp"

#include <spdlog/spdlog.h>

#include <stdexcept>

#include "dsp/cpu_engine.hpp"
#ifdef TAPSTREAM_HAVE_CUDA
#include "kernels/cuda_engine.hpp"
#endif

namespace tapstream {

Backend parse_backend(const std::string& name) {
  if (name == "cpu") return Backend::cpu;
  if (name == "cuda") return Backend::cuda;
  if (name == "auto") return Backend::automatic;
  throw std::invalid_argument("unknown backend '" + name + "' (expected cpu, cuda or auto)");
}

std::unique_ptr<Engine> make_engine(Backend backend, const FilterBank& bank,
                                    const EngineOptions& options) {
  if (backend == Backend::cpu) return make_cpu_engine(bank, options);
#ifdef TAPSTREAM_HAVE_CUDA
  std::string reason;
  if (cuda_device_available(&reason)) {
    if (backend == Backend::cuda) return make_cuda_engine(bank, options);
    try {
      return make_cuda_engine(bank, options);
    } catch (const std::exception& e) {
      reason = cuda_failure_sentence(e.what());
    }
  }
  if (backend == Backend::cuda) throw std::runtime_error("backend cuda: " + reason);
#else
  const std::string reason = "this build has no CUDA engine (configured with TAPSTREAM_CUDA=OFF)";
  if (backend == Backend::cuda) throw std::runtime_error("backend cuda: " + reason);
#endif
  spdlog::info("backend auto: using the CPU engine: {}", reason);
  return make_cpu_engine(bank, options);
}

}  // namespace tapstream

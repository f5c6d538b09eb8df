#pragma once
// The CUDA engine's cost model: which convolver (device_convolver.hpp) filters
// a bank of `channels` x max_taps taps in calls of up to max_block_frames
// frames, for the Algorithm the options ask for.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "dsp/model/engine.hpp"
#include "dsp/model/filter_bank.hpp"
#include "kernels/convolvers/device_convolver.hpp"

namespace tapstream::cuda {

struct ConvolverRequest {
  std::size_t channels = 0;
  std::size_t max_block_frames = 0;
  std::size_t max_taps = 0;
  Algorithm algorithm = Algorithm::automatic;
  // EngineOptions::kernel == "partitioned": the non-uniformly partitioned
  // path whatever the model says (unless Algorithm::direct was asked for).
  bool force_partitioned = false;
  // fft_partition, fft_fused and partitioned are read.
  CudaEngineOptions tuning;
};

struct ConvolverChoice {
  std::unique_ptr<DeviceConvolver> convolver;
  // Why, for the engine's description ("cost model: direct ... us, ..."); may be empty.
  std::string note;
};

// Builds the chosen convolver; `make_direct` builds the direct form (which
// needs the engine's staging and streams), called when the choice is direct.
// Throws what the chosen convolver's constructor throws; an FFT path that
// fails to build under Algorithm::automatic leaves the direct form, saying why.
ConvolverChoice choose_convolver(
    const FilterBank& bank, const ConvolverRequest& request,
    const std::function<std::unique_ptr<DeviceConvolver>()>& make_direct);

}  // namespace tapstream::cuda

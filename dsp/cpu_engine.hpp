#pragma once
// The CPU engine: direct form for short filters, uniformly partitioned FFT
// convolution (FFTW3f, overlap-save, frequency-domain delay line) for long
// ones, chosen per bank by a cost model unless EngineOptions::algorithm says.

#include <memory>

#include "dsp/engine.hpp"

namespace tapstream {

std::unique_ptr<Engine> make_cpu_engine(const FilterBank& bank, const EngineOptions& options);

}  // namespace tapstream

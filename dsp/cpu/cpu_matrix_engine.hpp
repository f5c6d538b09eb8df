#pragma once
// The CPU engine's native routing matrix: uniformly partitioned overlap-save
// (FFTW3f) with one frequency-domain delay line per input and one inverse
// transform per output (BruteFIR's model): per bin, each output is the sum
// over its paths and partitions of input spectrum x path spectrum. A call
// costs inputs forward and outputs inverse transforms per segment it
// touches, whatever the number of paths.

#include <memory>

#include "dsp/model/engine.hpp"
#include "dsp/model/matrix_engine.hpp"

namespace tapstream {

// options.max_block_frames and options.max_taps (0: the matrix's longest
// effective path) are used; the partition size is chosen by a cost model.
std::unique_ptr<MatrixEngine> make_cpu_matrix_engine(const RoutingMatrix& matrix,
                                                     const EngineOptions& options);

}  // namespace tapstream

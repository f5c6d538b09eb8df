// Linked into every test executable: FFTW plans are estimated, not measured.
// Output does not depend on the plan beyond rounding, and measuring every size
// in every test process (ctest runs each test case as a process of its own)
// would cost seconds per size. CpuEngine.MeasuredFftPlansMatchEstimatedOnes
// covers measured plans; the tapstream program measures (daemon/fftw_environment).

#include "dsp/cpu/fftw_plan.hpp"

namespace {

const bool kEstimatedPlans = [] {
  tapstream::fftw::set_planner_options({.measure = false, .wisdom_file = {}});
  return true;
}();

}  // namespace

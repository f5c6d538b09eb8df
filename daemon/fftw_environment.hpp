#pragma once
// The FFTW planner settings of a tapstream process, from the environment the
// README documents: TAPSTREAM_FFTW_WISDOM (the wisdom file; default
// $XDG_CACHE_HOME/tapstream/fftwf-wisdom, else ~/.cache/tapstream/fftwf-wisdom)
// and TAPSTREAM_FFTW_PLANNER (measure, the default, or estimate). Read once at
// the program's entry, so that the engines take options and never read the
// environment themselves.

#include "dsp/cpu/fftw_plan.hpp"

namespace tapstream {

// Throws UsageError naming the variable, its value and what is expected.
fftw::PlannerOptions fftw_planner_from_environment();

}  // namespace tapstream

#include "daemon/fftw_environment.hpp"

#include <cstdlib>
#include <string>

#include "daemon/commands/command.hpp"

namespace tapstream {

fftw::PlannerOptions fftw_planner_from_environment() {
  fftw::PlannerOptions options;
  if (const char* planner = std::getenv("TAPSTREAM_FFTW_PLANNER"); planner && *planner) {
    const std::string value(planner);
    if (value == "estimate") {
      options.measure = false;
    } else if (value != "measure") {
      throw UsageError("TAPSTREAM_FFTW_PLANNER='" + value + "': expected measure or estimate");
    }
  }
  if (const char* file = std::getenv("TAPSTREAM_FFTW_WISDOM"); file && *file) {
    options.wisdom_file = file;
  } else if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache) {
    options.wisdom_file = std::filesystem::path(cache) / "tapstream" / "fftwf-wisdom";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    options.wisdom_file = std::filesystem::path(home) / ".cache" / "tapstream" / "fftwf-wisdom";
  }
  return options;
}

}  // namespace tapstream

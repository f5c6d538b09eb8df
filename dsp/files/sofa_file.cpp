#include "dsp/files/sofa_file.hpp"

#include <mysofa.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numbers>
#include <stdexcept>
#include <string>

#include "dsp/files/regular_file.hpp"

namespace tapstream {
namespace {

// Far above any HRTF set (a dense one of 2,000 directions at 1024 taps is
// about 17 MB).
constexpr std::uint64_t kMaxSofaBytes = std::uint64_t(512) << 20;

std::string mysofa_reason(int err) {
  switch (err) {
    case MYSOFA_INVALID_FORMAT:
      return "not a SOFA (HDF5/netCDF-4) file";
    case MYSOFA_UNSUPPORTED_FORMAT:
      return "a SOFA layout libmysofa does not support";
    case MYSOFA_NO_MEMORY:
      return "out of memory";
    case MYSOFA_READ_ERROR:
      return "a read error";
    case MYSOFA_INVALID_ATTRIBUTES:
      return "missing or wrong SOFA attributes (Conventions, SOFAConventions, DataType, ...)";
    case MYSOFA_INVALID_DIMENSIONS:
      return "invalid dimensions";
    case MYSOFA_INVALID_DIMENSION_LIST:
      return "an invalid dimension list";
    case MYSOFA_INVALID_COORDINATE_TYPE:
      return "an invalid coordinate type";
    case MYSOFA_ONLY_EMITTER_WITH_ECI_SUPPORTED:
      return "emitters that vary per measurement";
    case MYSOFA_ONLY_DELAYS_WITH_IR_OR_MR_SUPPORTED:
      return "delays of an unsupported shape";
    case MYSOFA_ONLY_THE_SAME_SAMPLING_RATE_SUPPORTED:
      return "more than one sample rate";
    case MYSOFA_RECEIVERS_WITH_RCI_SUPPORTED:
      return "receivers that vary per measurement";
    case MYSOFA_RECEIVERS_WITH_CARTESIAN_SUPPORTED:
      return "receivers not in cartesian coordinates";
    case MYSOFA_INVALID_RECEIVER_POSITIONS:
      return "invalid receiver (ear) positions";
    case MYSOFA_ONLY_SOURCES_WITH_MC_SUPPORTED:
      return "sources of an unsupported shape";
    default:
      return "libmysofa error " + std::to_string(err);
  }
}

struct HrtfDeleter {
  void operator()(MYSOFA_HRTF* hrtf) const { mysofa_free(hrtf); }
};

double radians(double degrees) {
  return degrees * std::numbers::pi / 180.0;
}

}  // namespace

double SofaSet::angle_between(const SofaDirection& a, const SofaDirection& b) {
  const double ea = radians(a.elevation), eb = radians(b.elevation);
  const double cosine = std::sin(ea) * std::sin(eb) +
                        std::cos(ea) * std::cos(eb) * std::cos(radians(a.azimuth - b.azimuth));
  return std::acos(std::clamp(cosine, -1.0, 1.0)) * 180.0 / std::numbers::pi;
}

std::size_t SofaSet::nearest(const SofaDirection& direction) const {
  std::size_t best = 0;
  double best_angle = 1e300;
  for (std::size_t m = 0; m < directions.size(); ++m) {
    const double angle = angle_between(direction, directions[m]);
    if (angle < best_angle) {
      best_angle = angle;
      best = m;
    }
  }
  return best;
}

SofaSet::Blend SofaSet::interpolation(const SofaDirection& direction) const {
  std::vector<std::pair<double, std::size_t>> by_angle;
  for (std::size_t m = 0; m < directions.size(); ++m)
    by_angle.emplace_back(angle_between(direction, directions[m]), m);
  // Nearest first, the first of equals first.
  std::stable_sort(by_angle.begin(), by_angle.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  Blend blend;
  if (by_angle.front().first < 1e-9) {
    blend.measurements = {by_angle.front().second};
    blend.weights = {1.0};
    return blend;
  }
  double total = 0.0;
  for (std::size_t i = 0; i < std::min<std::size_t>(3, by_angle.size()); ++i) {
    blend.measurements.push_back(by_angle[i].second);
    blend.weights.push_back(1.0 / by_angle[i].first);
    total += blend.weights.back();
  }
  for (double& w : blend.weights) w /= total;
  return blend;
}

SofaSet load_sofa_file(const std::filesystem::path& file) {
  const auto fail = [&](const std::string& why) -> void {
    throw std::runtime_error(file.string() + ": " + why);
  };
  std::string bytes;
  try {
    RegularFile opened(file);
    bytes = opened.read_all(kMaxSofaBytes, "as a SOFA file");
  } catch (const RegularFileError& e) {
    throw std::runtime_error(std::string(e.what()) + " (a SOFA file)");
  }
  int err = MYSOFA_OK;
  std::unique_ptr<MYSOFA_HRTF, HrtfDeleter> hrtf(
      mysofa_load_data(bytes.data(), bytes.size(), &err));
  if (!hrtf || err != MYSOFA_OK) fail("cannot be read as a SOFA HRTF set: " + mysofa_reason(err));
  err = mysofa_check(hrtf.get());
  if (err != MYSOFA_OK) fail("is not a SOFA HRTF set tapstream can use: " + mysofa_reason(err));
  if (hrtf->R != 2)
    fail("has " + std::to_string(hrtf->R) + " receivers; a binaural set has 2 (ears)");
  if (hrtf->M == 0 || hrtf->N == 0) fail("holds no responses");
  if (hrtf->DataSamplingRate.elements < 1) fail("has no Data.SamplingRate");
  const double rate = hrtf->DataSamplingRate.values[0];
  if (!(rate >= 1.0 && rate <= 1e7) || rate != std::round(rate))
    fail("has a sample rate of " + std::to_string(rate) + " Hz, not a whole number of Hz");
  if (hrtf->DataIR.elements != std::size_t(hrtf->M) * 2 * hrtf->N)
    fail("has Data.IR of " + std::to_string(hrtf->DataIR.elements) +
         " values, not M x R x N = " + std::to_string(std::size_t(hrtf->M) * 2 * hrtf->N));
  mysofa_tospherical(hrtf.get());

  SofaSet set;
  set.file = file;
  set.sample_rate = int(rate);
  set.taps = hrtf->N;
  set.directions.resize(hrtf->M);
  for (std::size_t m = 0; m < hrtf->M; ++m) {
    set.directions[m].azimuth = hrtf->SourcePosition.values[3 * m];
    set.directions[m].elevation = hrtf->SourcePosition.values[3 * m + 1];
  }
  set.responses.assign(hrtf->DataIR.values, hrtf->DataIR.values + hrtf->DataIR.elements);
  for (std::size_t i = 0; i < set.responses.size(); ++i) {
    if (!std::isfinite(set.responses[i]))
      fail("response " + std::to_string(i / (2 * set.taps)) + " (ear " +
           std::to_string(i / set.taps % 2) + "), tap " + std::to_string(i % set.taps) +
           " is not a finite number");
  }
  // Data.Delay: one pair for all measurements, or one per measurement.
  const std::size_t delays = hrtf->DataDelay.elements;
  if (delays != 0 && delays != 2 && delays != std::size_t(hrtf->M) * 2)
    fail("has " + std::to_string(delays) + " Data.Delay values, not 2 or M x 2");
  set.delays.assign(std::size_t(hrtf->M) * 2, 0);
  for (std::size_t i = 0; i < set.delays.size() && delays != 0; ++i) {
    const double d = hrtf->DataDelay.values[delays == 2 ? i % 2 : i];
    if (!(d >= 0.0 && d <= 1e7) || d != std::round(d))
      fail("has a Data.Delay of " + std::to_string(d) +
           " samples; only whole, non-negative delays are taken");
    set.delays[i] = std::size_t(d);
  }
  return set;
}

}  // namespace tapstream

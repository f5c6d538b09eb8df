#pragma once
// A SOFA HRTF set (AES69, read with libmysofa): impulse responses measured
// from many directions to the two ears of one listener. What a binaural
// rendering of virtual sources needs from it: the measured directions, each
// one's left- and right-ear responses, their delays, and the sample rate.
// Nothing is resampled or normalised: the responses are the file's.

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace tapstream {

struct SofaDirection {
  double azimuth = 0.0;    // degrees, counter-clockwise from straight ahead (90: left)
  double elevation = 0.0;  // degrees, up from the horizontal plane
};

struct SofaSet {
  std::filesystem::path file;
  int sample_rate = 0;
  std::size_t taps = 0;                   // N: every response's length
  std::vector<SofaDirection> directions;  // M measured directions
  // Response of measurement m to ear r (0 left, 1 right): taps floats at
  // (m * 2 + r) * taps.
  std::vector<float> responses;
  // Whole-frame delay of measurement m to ear r, at m * 2 + r (Data.Delay,
  // given per measurement or once for all).
  std::vector<std::size_t> delays;

  const float* response(std::size_t measurement, std::size_t ear) const {
    return responses.data() + (measurement * 2 + ear) * taps;
  }
  // The measurement nearest (by angle on the sphere) to a direction: the
  // first of equals.
  std::size_t nearest(const SofaDirection& direction) const;
  // An interpolation between measured directions: the three nearest (fewer
  // if the set has fewer), weighted by the inverse of their angle to the
  // direction, the weights summing to 1; one measurement of weight 1 when the
  // direction is measured (within 1e-9 degrees).
  struct Blend {
    std::vector<std::size_t> measurements;
    std::vector<double> weights;
  };
  Blend interpolation(const SofaDirection& direction) const;
  // The angle in degrees between two directions.
  static double angle_between(const SofaDirection& a, const SofaDirection& b);
};

// Reads a SOFA file (a regular file of at most 512 MiB). Throws
// std::runtime_error naming the file and the problem: unreadable, not a
// SOFA HRTF set libmysofa accepts (its reason), not two receivers (ears),
// fractional or negative delays, more than one sample rate.
SofaSet load_sofa_file(const std::filesystem::path& file);

}  // namespace tapstream

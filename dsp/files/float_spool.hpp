#pragma once
// Interleaved float frames parked on disk between two passes (--normalize:
// the first pass filters and measures the peak, the second scales). The file
// has no name from the start (O_TMPFILE, else unlinked at once), so nothing is
// left behind however the process ends, and memory stays fixed whatever the
// length. In $TMPDIR, else /tmp.

#include <cstddef>
#include <cstdint>
#include <span>

namespace tapstream {

class FloatSpool {
 public:
  FloatSpool();  // throws std::runtime_error
  ~FloatSpool();
  FloatSpool(const FloatSpool&) = delete;
  FloatSpool& operator=(const FloatSpool&) = delete;

  void write(std::span<const float> samples);  // throws std::runtime_error
  // Starts reading from the beginning.
  void rewind();
  // Reads up to samples.size() samples; returns how many (0 at the end).
  std::size_t read(std::span<float> samples);

 private:
  int fd_ = -1;
};

}  // namespace tapstream

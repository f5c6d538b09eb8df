// The fast path's header parser (dsp/files/pcm_header) on its own, without
// files: any bytes, with a file size taken from the first eight bytes (so
// that sizes past, at and inside the bytes given are all tried). It must
// read nothing outside the span (AddressSanitizer) and return only layouts
// that make sense.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "dsp/files/pcm_header.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tapstream;
  if (size < 8) return 0;
  std::uint64_t extra = 0;
  std::memcpy(&extra, data, 8);
  const std::span<const std::uint8_t> head(data + 8, size - 8);
  // Mostly a file as long as the bytes or a little longer; sometimes huge.
  const std::uint64_t file_size = head.size() + ((extra >> 63) ? extra >> 1 : extra % 4096);
  const auto layout = parse_pcm_header(head, file_size);
  if (layout) {
    if (layout->channels < 1 || layout->channels > 1024 || layout->sample_rate < 1) {
      __builtin_trap();
    }
    if (layout->data_offset > file_size || layout->frame_bytes() == 0) __builtin_trap();
  }
  return 0;
}

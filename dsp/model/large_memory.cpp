#include "dsp/model/large_memory.hpp"

#include <sys/mman.h>

#include <new>

namespace tapstream {

namespace {

std::size_t round_up(std::size_t n, std::size_t m) {
  return (n + m - 1) / m * m;
}

}  // namespace

void* allocate_large(std::size_t bytes, std::size_t alignment) {
  const bool huge = bytes >= kHugePageBytes;
  if (huge) alignment = kHugePageBytes;
  // aligned_alloc takes sizes that are multiples of the alignment.
  const std::size_t size = round_up(bytes == 0 ? 1 : bytes, alignment);
  void* memory = std::aligned_alloc(alignment, size);
  if (memory == nullptr) throw std::bad_alloc();
  // Advice only: where huge pages are off or none is free, ordinary pages come.
  if (huge) static_cast<void>(::madvise(memory, size, MADV_HUGEPAGE));
  return memory;
}

}  // namespace tapstream

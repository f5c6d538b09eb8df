#pragma once
// Counts the heap allocations and frees one thread makes while it counts, for
// tests that a real-time path (an audio callback) never allocates or frees.
//
// How: the test program's own malloc, free, calloc, realloc, posix_memalign,
// aligned_alloc and memalign replace glibc's for the whole process (an
// executable's definitions come first in symbol lookup, for every library:
// libstdc++'s operator new and delete, FFTW's fftwf_malloc), note the call
// on the calling thread when it counts, and forward to glibc's own
// (__libc_malloc, ...). So this header defines functions: include it in one
// translation unit of a test executable only. The sanitizers replace the
// allocator themselves; under one, counting_available() is false and the
// tests that need it skip.

#include <errno.h>
#include <malloc.h>

#include <cstddef>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TAPSTREAM_COUNT_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define TAPSTREAM_COUNT_ALLOCATIONS 0
#endif
#endif
#if !defined(TAPSTREAM_COUNT_ALLOCATIONS) && defined(__GLIBC__)
#define TAPSTREAM_COUNT_ALLOCATIONS 1
#elif !defined(TAPSTREAM_COUNT_ALLOCATIONS)
#define TAPSTREAM_COUNT_ALLOCATIONS 0
#endif

namespace tapstream::testing {

// The calling thread's counts (trivial thread-locals of the executable: no
// allocation of their own, usable from the first malloc on).
inline thread_local bool allocation_counting = false;
inline thread_local std::size_t counted_allocations = 0;
inline thread_local std::size_t counted_frees = 0;

inline constexpr bool counting_available() {
  return TAPSTREAM_COUNT_ALLOCATIONS != 0;
}

// Counts the calling thread's allocations and frees from construction to
// destruction (or stop()).
class CountAllocations {
 public:
  CountAllocations() {
    counted_allocations = 0;
    counted_frees = 0;
    allocation_counting = true;
  }
  ~CountAllocations() { stop(); }
  CountAllocations(const CountAllocations&) = delete;
  CountAllocations& operator=(const CountAllocations&) = delete;
  void stop() { allocation_counting = false; }
  // Meaningful on the thread that made this object.
  std::size_t allocations() const { return counted_allocations; }
  std::size_t frees() const { return counted_frees; }
};

}  // namespace tapstream::testing

#if TAPSTREAM_COUNT_ALLOCATIONS
extern "C" {
void* __libc_malloc(std::size_t size);
void __libc_free(void* p);
void* __libc_calloc(std::size_t count, std::size_t size);
void* __libc_realloc(void* p, std::size_t size);
void* __libc_memalign(std::size_t alignment, std::size_t size);

void* malloc(std::size_t size) noexcept {
  if (tapstream::testing::allocation_counting) ++tapstream::testing::counted_allocations;
  return __libc_malloc(size);
}

void free(void* p) noexcept {
  if (p != nullptr && tapstream::testing::allocation_counting) ++tapstream::testing::counted_frees;
  __libc_free(p);
}

void* calloc(std::size_t count, std::size_t size) noexcept {
  if (tapstream::testing::allocation_counting) ++tapstream::testing::counted_allocations;
  return __libc_calloc(count, size);
}

void* realloc(void* p, std::size_t size) noexcept {
  if (tapstream::testing::allocation_counting) ++tapstream::testing::counted_allocations;
  return __libc_realloc(p, size);
}

void* memalign(std::size_t alignment, std::size_t size) noexcept {
  if (tapstream::testing::allocation_counting) ++tapstream::testing::counted_allocations;
  return __libc_memalign(alignment, size);
}

void* aligned_alloc(std::size_t alignment, std::size_t size) noexcept {
  if (tapstream::testing::allocation_counting) ++tapstream::testing::counted_allocations;
  return __libc_memalign(alignment, size);
}

int posix_memalign(void** out, std::size_t alignment, std::size_t size) noexcept {
  if (tapstream::testing::allocation_counting) ++tapstream::testing::counted_allocations;
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}
#endif

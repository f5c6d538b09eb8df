#pragma once
// Memory for buffers of megabytes that are filled once a block (an engine's
// staging and delay lines, the offline pipeline's blocks, a file's write
// staging): from 2 MiB up it is aligned to 2 MiB and advised to be backed
// by transparent huge pages (madvise MADV_HUGEPAGE, which Debian's default
// "madvise" mode waits for), so that its first touch costs a page fault per
// 2 MiB instead of one per 4 KiB. On the 2-core development VM a 4 KiB fault
// cost up to 0.1 ms under load, and zeroing 18 MB of blocks and staging took
// 0.5 s of an identity run of 32 ch x 30 s before the first sample moved
// (docs/performance.md, the 2-core development VM). Smaller sizes, or a
// kernel without huge pages, get ordinary aligned memory.

#include <cstddef>
#include <cstdlib>

namespace tapstream {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// At least `bytes` bytes aligned to `alignment` (a power of two, at most
// kHugePageBytes), uninitialised; free with std::free. Throws std::bad_alloc.
void* allocate_large(std::size_t bytes, std::size_t alignment);

}  // namespace tapstream

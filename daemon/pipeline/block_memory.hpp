#pragma once
// Memory for the blocks that travel between the offline pipeline's stages,
// with the way to free it: ordinary memory, or page-locked memory from the
// engine factory for the CUDA engine (whose copies then run straight from and
// to it, asynchronously). dsp/ and daemon/pipeline/ stay free of CUDA headers.

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <memory>

#include "dsp/model/large_memory.hpp"

namespace tapstream {

using BlockMemory = std::unique_ptr<float[], void (*)(float*)>;
using BlockAllocator = std::function<BlockMemory(std::size_t floats)>;

// Zero-filled ordinary memory (large blocks on huge pages: dsp/model/large_memory.hpp).
inline BlockMemory ordinary_block_memory(std::size_t floats) {
  auto* memory = static_cast<float*>(allocate_large(floats * sizeof(float), alignof(float)));
  std::fill_n(memory, floats, 0.0f);
  return BlockMemory(memory, [](float* p) { std::free(p); });
}

}  // namespace tapstream

#pragma once
// Memory for the blocks that travel between the offline pipeline's stages,
// with the way to free it: ordinary memory, or page-locked memory from the
// engine factory for the CUDA engine (whose copies then run straight from and
// to it, asynchronously). dsp/ and daemon/pipeline/ stay free of CUDA headers.

#include <cstddef>
#include <functional>
#include <memory>

namespace tapstream {

using BlockMemory = std::unique_ptr<float[], void (*)(float*)>;
using BlockAllocator = std::function<BlockMemory(std::size_t floats)>;

// Zero-filled ordinary memory.
inline BlockMemory ordinary_block_memory(std::size_t floats) {
  return BlockMemory(new float[floats](), [](float* p) { delete[] p; });
}

}  // namespace tapstream

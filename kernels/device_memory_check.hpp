#pragma once
// Pointers that callers hand an engine as device memory (process_device,
// set_paths_device): checked before any kernel reads them, so that host
// memory or a stray pointer is refused by name instead of faulting on the
// device.

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace tapstream::cuda {

// Throws std::invalid_argument naming `what` unless `p` is device or managed memory.
inline void check_device_memory(const void* p, const char* what) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it for the next checked call
    throw std::invalid_argument(std::string(what) + " is not memory CUDA knows");
  }
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
    throw std::invalid_argument(std::string(what) +
                                " is not device memory (host memory goes through process())");
  }
}

// Many arrays checked at once (set_paths_device: a thousand paths' taps,
// usually in one or a few allocations): each allocation is looked up once
// (its extent, through the driver), and the arrays inside one already seen
// cost a comparison. An array must lie wholly inside one allocation of
// device or managed memory on `device`. forget() before each batch: memory
// may be freed between batches.
class DeviceRanges {
 public:
  explicit DeviceRanges(int device) : device_(device) {}

  void forget() {
    known_.clear();
    next_ = 0;
  }

  // `name()` names the array in the error.
  template <class Name>
  void check(const void* p, std::size_t bytes, const Name& name) {
    const auto first = reinterpret_cast<std::uintptr_t>(p);
    for (const Range& r : known_)
      if (first >= r.first && first + bytes <= r.last) return;
    const Range found = look_up(p, bytes, name());
    // A few allocations kept (arrays of their own each cost a look-up, as
    // one check each would).
    if (known_.size() < kKept) {
      known_.push_back(found);
    } else {
      known_[next_] = found;
      next_ = (next_ + 1) % kKept;
    }
  }

 private:
  struct Range {
    std::uintptr_t first = 0, last = 0;  // [first, last)
  };
  using GetAddressRange = CUresult (*)(CUdeviceptr*, std::size_t*, CUdeviceptr);

  // cuMemGetAddressRange, found through the runtime (no link to the driver
  // library); null where the driver does not offer it.
  static GetAddressRange address_range() {
    static const GetAddressRange found = [] {
      void* f = nullptr;
      cudaDriverEntryPointQueryResult result{};
      if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault,
                                           &result) != cudaSuccess ||
          result != cudaDriverEntryPointSuccess) {
        cudaGetLastError();
        return GetAddressRange(nullptr);
      }
      return reinterpret_cast<GetAddressRange>(f);
    }();
    return found;
  }

  Range look_up(const void* p, std::size_t bytes, const std::string& what) const {
    check_device_memory(p, what.c_str());
    cudaPointerAttributes attributes{};
    cudaPointerGetAttributes(&attributes, p);
    if (attributes.type == cudaMemoryTypeDevice && attributes.device != device_)
      throw std::invalid_argument(what + " is memory of GPU " + std::to_string(attributes.device) +
                                  ", not of the engine's GPU " + std::to_string(device_));
    const auto first = reinterpret_cast<std::uintptr_t>(p);
    CUdeviceptr base = 0;
    std::size_t size = 0;
    if (const GetAddressRange get = address_range();
        get != nullptr && get(&base, &size, CUdeviceptr(first)) == CUDA_SUCCESS) {
      if (first + bytes > std::uintptr_t(base) + size)
        throw std::invalid_argument(
            what + ": " + std::to_string(bytes) + " bytes run past the end of their allocation (" +
            std::to_string(std::uintptr_t(base) + size - first) + " bytes left)");
      return {std::uintptr_t(base), std::uintptr_t(base) + size};
    }
    // No extent to be had: the array's last byte must be device memory too.
    if (bytes > 1) check_device_memory(static_cast<const char*>(p) + bytes - 1, what.c_str());
    return {first, first + bytes};
  }

  static constexpr std::size_t kKept = 8;
  int device_;
  std::vector<Range> known_;
  std::size_t next_ = 0;
};

}  // namespace tapstream::cuda

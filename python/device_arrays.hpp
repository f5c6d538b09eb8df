#pragma once
// CUDA arrays of the two libraries users filter with, PyTorch tensors and CuPy
// arrays, read by the module itself: where a (rows, columns) float32 block is
// in device memory, on which GPU, the stream its library orders work on, and
// a new array of the same kind for an output. Each is a few attribute reads
// of the array (no copy, no DLPack capsule), so that a call from a loop costs
// microseconds less than the library-level way (tapstream/_device_arrays.py,
// which still serves anything else that speaks __cuda_array_interface__ or
// DLPack, and PyTorch tensors in host memory). Errors are Python's, naming
// the culprit.
//
// The libraries are never imported here: an array of theirs exists only once
// its library is loaded, so each is looked up in sys.modules when first seen.

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace tapstream::python {

enum class DeviceArrayKind { none, torch, cupy };

// Which library's GPU array `x` is: none for anything else (a PyTorch tensor
// in host memory too).
DeviceArrayKind device_array_kind(pybind11::handle x);

// A C-ordered (rows, columns) float32 block in device memory.
struct DeviceBlock {
  pybind11::object array;  // holds the memory: x itself, or its C-ordered copy
  std::uintptr_t data = 0;
  std::size_t rows = 0, columns = 0;
  int device = 0;
};

// x (of `kind`) as such a block: another memory order is copied on the
// device into C order where `copy`, else refused (an output is written in
// place). TypeError for another dtype, ValueError for another number of
// dimensions or order; `what` starts each message ("process").
DeviceBlock device_block(DeviceArrayKind kind, pybind11::handle x, const char* what, bool copy);

// x (of `kind`) as a filter's taps: 1-D float32 in device memory, C order
// (float64 and other orders converted on the device). TypeError for another
// dtype, ValueError for another number of dimensions, each naming `what`.
DeviceBlock device_taps(DeviceArrayKind kind, pybind11::handle x, const std::string& what);

// The current stream of `kind`'s library on GPU `device` (a cudaStream_t).
std::uintptr_t current_stream(DeviceArrayKind kind, int device);

// A new C-ordered (rows, columns) float32 array of `kind`, on GPU `device`
// (`like`'s), allocated on that library's current stream.
DeviceBlock new_device_block(DeviceArrayKind kind, pybind11::handle like, int device,
                             std::size_t rows, std::size_t columns);

}  // namespace tapstream::python

#pragma once
// NumPy blocks as Engine.process reads and writes them in a loop of small
// calls: a float32 array's samples where they are, and a new output array,
// through NumPy's C API directly (pybind11's array conversions ask NumPy for
// a dtype and an array view on every call, which costs a loop of 64-frame
// calls a few percent). Anything these do not take goes the checked way
// (python/module.cpp), which names what is wrong.

#include <Python.h>

#include <cstddef>

namespace tapstream::python {

// A 2-D float32 array in native byte order with aligned samples, where they are.
struct NumpyBlock {
  float* data = nullptr;
  std::ptrdiff_t rows = 0, columns = 0;
  std::ptrdiff_t row_stride = 0, column_stride = 0;  // in floats
  bool c_order = false;
  bool writable = false;
};

// x as such a block; false where x is anything else (not an ndarray, another
// dtype or byte order, other dimensions, samples not aligned).
bool numpy_block(PyObject* x, NumpyBlock& block);

// A new C-ordered (rows, columns) float32 array (a new reference), or null
// with the Python error set.
PyObject* new_float32_array(std::ptrdiff_t rows, std::ptrdiff_t columns);

}  // namespace tapstream::python

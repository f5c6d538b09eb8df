#include "python/numpy_blocks.hpp"

#include <pybind11/numpy.h>

#include <cstdint>

namespace tapstream::python {

namespace {
using Api = pybind11::detail::npy_api;
}

bool numpy_block(PyObject* x, NumpyBlock& block) {
  const Api& api = Api::get();
  if (!api.PyArray_Check_(x)) return false;
  const auto* array = pybind11::detail::array_proxy(x);
  const auto* descr = pybind11::detail::array_descriptor_proxy(array->descr);
  // '>' only where it is not the host's order (NumPy writes '=' or '<' for native little-endian).
  if (descr->type_num != Api::NPY_FLOAT_ || descr->byteorder == '>') return false;
  if (array->nd != 2 || (array->flags & Api::NPY_ARRAY_ALIGNED_) == 0) return false;
  const auto item = std::ptrdiff_t(sizeof(float));
  if (array->strides[0] % item != 0 || array->strides[1] % item != 0) return false;
  block.data = reinterpret_cast<float*>(array->data);
  block.rows = array->dimensions[0];
  block.columns = array->dimensions[1];
  block.row_stride = array->strides[0] / item;
  block.column_stride = array->strides[1] / item;
  block.c_order = (array->flags & Api::NPY_ARRAY_C_CONTIGUOUS_) != 0;
  block.writable = (array->flags & Api::NPY_ARRAY_WRITEABLE_) != 0;
  return true;
}

PyObject* new_float32_array(std::ptrdiff_t rows, std::ptrdiff_t columns) {
  const Api& api = Api::get();
  const Py_intptr_t shape[2] = {rows, columns};
  PyObject* descr = api.PyArray_DescrFromType_(Api::NPY_FLOAT_);  // stolen below
  if (descr == nullptr) return nullptr;
  return api.PyArray_NewFromDescr_(api.PyArray_Type_, descr, 2, shape, nullptr, nullptr, 0,
                                   nullptr);
}

}  // namespace tapstream::python

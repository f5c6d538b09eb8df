#include "python/device_arrays.hpp"

#include <pybind11/numpy.h>

#include <string>
#include <utility>

namespace py = pybind11;

namespace tapstream::python {
namespace {

// What the module reads of a library, looked up once the library is loaded.
// The references are kept for the interpreter's life (never released: an
// object freed after the interpreter ends would crash it). Every use holds
// the GIL, which orders these writes and reads.
struct TorchApi {
  py::handle tensor;          // torch.Tensor
  py::handle float32;         // torch.float32
  py::handle float64;         // torch.float64
  py::handle raw_stream;      // torch._C._cuda_getCurrentRawStream (null where absent)
  py::handle current_stream;  // torch.cuda.current_stream
};

struct CupyApi {
  py::handle ndarray;             // cupy.ndarray
  py::handle get_current_stream;  // cupy.cuda.get_current_stream
  py::handle get_device;          // cupy.cuda.runtime.getDevice
  py::handle device;              // cupy.cuda.Device
  py::handle empty;               // cupy.empty
  py::handle ascontiguousarray;   // cupy.ascontiguousarray
  py::handle float32;             // numpy.dtype('float32')
  py::handle float64;             // numpy.dtype('float64')
};

// The module `name` if something imported it, else null (imports nothing).
py::object loaded_module(const char* name) {
  PyObject* module = PyImport_GetModule(py::str(name).ptr());
  if (module == nullptr) {
    PyErr_Clear();
    return {};
  }
  return py::reinterpret_steal<py::object>(module);
}

// An object kept for the interpreter's life (see above).
py::handle keep(py::object object) {
  return object.release();
}

const TorchApi* torch_api() {
  static TorchApi api;
  static bool found = false;
  if (found) return &api;
  const py::object torch = loaded_module("torch");
  if (!torch) return nullptr;
  api.tensor = keep(torch.attr("Tensor"));
  api.float32 = keep(torch.attr("float32"));
  api.float64 = keep(torch.attr("float64"));
  const py::object c = torch.attr("_C");
  if (py::hasattr(c, "_cuda_getCurrentRawStream"))
    api.raw_stream = keep(c.attr("_cuda_getCurrentRawStream"));
  api.current_stream = keep(torch.attr("cuda").attr("current_stream"));
  found = true;
  return &api;
}

const CupyApi* cupy_api() {
  static CupyApi api;
  static bool found = false;
  if (found) return &api;
  const py::object cupy = loaded_module("cupy");
  if (!cupy) return nullptr;
  const py::object cuda = cupy.attr("cuda");
  api.ndarray = keep(cupy.attr("ndarray"));
  api.get_current_stream = keep(cuda.attr("get_current_stream"));
  api.get_device = keep(cuda.attr("runtime").attr("getDevice"));
  api.device = keep(cuda.attr("Device"));
  api.empty = keep(cupy.attr("empty"));
  api.ascontiguousarray = keep(cupy.attr("ascontiguousarray"));
  api.float32 = py::dtype::of<float>().release();
  api.float64 = py::dtype::of<double>().release();
  found = true;
  return &api;
}

// Attribute names, interned once (kept, as above).
struct Names {
  py::handle is_cuda = py::str("is_cuda").release();
  py::handle dtype = py::str("dtype").release();
  py::handle shape = py::str("shape").release();
  py::handle stride = py::str("stride").release();
  py::handle strides = py::str("strides").release();
  py::handle data_ptr = py::str("data_ptr").release();
  py::handle get_device = py::str("get_device").release();
  py::handle contiguous = py::str("contiguous").release();
  py::handle detach = py::str("detach").release();
  py::handle new_empty = py::str("new_empty").release();
  py::handle data = py::str("data").release();
  py::handle ptr = py::str("ptr").release();
  py::handle device_id = py::str("device_id").release();
  py::handle cuda_stream = py::str("cuda_stream").release();
  py::handle to = py::str("to").release();
  py::handle astype = py::str("astype").release();
};

const Names& names() {
  static const Names n;
  return n;
}

bool is_instance(py::handle x, py::handle type) {
  return PyObject_TypeCheck(x.ptr(), reinterpret_cast<PyTypeObject*>(type.ptr())) != 0;
}

// Runs `work` with CuPy's current device set to `device` (CuPy allocates
// and keeps its current stream per device).
template <class Work>
auto on_cupy_device(const CupyApi& cupy, int device, const Work& work) {
  if (py::cast<int>(cupy.get_device()) == device) return work();
  const py::object context = cupy.device(device);
  context.attr("__enter__")();
  try {
    auto result = work();
    context.attr("__exit__")(py::none(), py::none(), py::none());
    return result;
  } catch (...) {
    context.attr("__exit__")(py::none(), py::none(), py::none());
    throw;
  }
}

// Rows and columns of a 2-D shape, and whether the strides (in elements:
// `unit` bytes each, 1 for PyTorch's element strides) are C order's.
struct Shape2 {
  std::size_t rows = 0, columns = 0;
  bool c_order = false;
};

Shape2 shape_of(const py::tuple& shape, const py::tuple& strides, py::ssize_t unit,
                const char* what) {
  if (shape.size() != 2) {
    throw py::value_error(std::string(what) + ": expected a 2-D (channels, frames) block, got " +
                          std::to_string(shape.size()) + " dimensions");
  }
  Shape2 s;
  s.rows = shape[0].cast<std::size_t>();
  s.columns = shape[1].cast<std::size_t>();
  const auto row_stride = strides[0].cast<py::ssize_t>();
  const auto column_stride = strides[1].cast<py::ssize_t>();
  s.c_order = (s.rows <= 1 || row_stride == py::ssize_t(s.columns) * unit) &&
              (s.columns <= 1 || column_stride == unit);
  return s;
}

void refuse_order(const char* what, const Shape2& s) {
  throw py::value_error(std::string(what) + " must be a C-ordered (" + std::to_string(s.rows) +
                        ", " + std::to_string(s.columns) + ") float32 array");
}

DeviceBlock torch_block(const TorchApi& torch, py::handle x, const char* what, bool copy) {
  const Names& n = names();
  const py::object dtype = x.attr(n.dtype);
  if (!dtype.is(torch.float32)) {
    std::string name = py::str(dtype);
    if (name.rfind("torch.", 0) == 0) name.erase(0, 6);
    throw py::type_error(std::string(what) + ": the block must be float32, got " + name);
  }
  const Shape2 s = shape_of(x.attr(n.shape), x.attr(n.stride)(), 1, what);
  DeviceBlock block;
  block.array = py::reinterpret_borrow<py::object>(x);
  if (!s.c_order) {
    if (!copy) refuse_order(what, s);
    block.array = block.array.attr(n.detach)().attr(n.contiguous)();
  }
  block.data = block.array.attr(n.data_ptr)().cast<std::uintptr_t>();
  block.device = block.array.attr(n.get_device)().cast<int>();
  block.rows = s.rows;
  block.columns = s.columns;
  return block;
}

DeviceBlock cupy_block(const CupyApi& cupy, py::handle x, const char* what, bool copy) {
  const Names& n = names();
  const py::object dtype = x.attr(n.dtype);
  if (!dtype.is(cupy.float32) && !dtype.equal(cupy.float32)) {
    throw py::type_error(std::string(what) + ": the block must be float32, got " +
                         std::string(py::str(dtype)));
  }
  const Shape2 s = shape_of(x.attr(n.shape), x.attr(n.strides), sizeof(float), what);
  DeviceBlock block;
  block.array = py::reinterpret_borrow<py::object>(x);
  py::object memory = block.array.attr(n.data);
  block.device = memory.attr(n.device_id).cast<int>();
  if (!s.c_order) {
    if (!copy) refuse_order(what, s);
    block.array = on_cupy_device(cupy, block.device, [&] { return cupy.ascontiguousarray(x); });
    memory = block.array.attr(n.data);
  }
  block.data = memory.attr(n.ptr).cast<std::uintptr_t>();
  block.rows = s.rows;
  block.columns = s.columns;
  return block;
}

std::string dimensions_error(const std::string& what, std::size_t dimensions) {
  return what + ": expected a 1-D array of taps, got " + std::to_string(dimensions) + " dimensions";
}

DeviceBlock torch_taps(const TorchApi& torch, py::handle x, const std::string& what) {
  const Names& n = names();
  py::object taps = py::reinterpret_borrow<py::object>(x);
  const py::object dtype = taps.attr(n.dtype);
  if (dtype.is(torch.float64)) {
    taps = taps.attr(n.detach)().attr(n.to)(torch.float32);
  } else if (!dtype.is(torch.float32)) {
    throw py::type_error(what + ": taps must be float32 or float64, got " +
                         std::string(py::str(dtype)));
  }
  const py::tuple shape = taps.attr(n.shape);
  if (shape.size() != 1) throw py::value_error(dimensions_error(what, shape.size()));
  DeviceBlock block;
  block.rows = 1;
  block.columns = shape[0].cast<std::size_t>();
  if (block.columns > 1 && py::tuple(taps.attr(n.stride)())[0].cast<py::ssize_t>() != 1)
    taps = taps.attr(n.detach)().attr(n.contiguous)();
  block.data = taps.attr(n.data_ptr)().cast<std::uintptr_t>();
  block.device = taps.attr(n.get_device)().cast<int>();
  block.array = std::move(taps);
  return block;
}

DeviceBlock cupy_taps(const CupyApi& cupy, py::handle x, const std::string& what) {
  const Names& n = names();
  py::object taps = py::reinterpret_borrow<py::object>(x);
  py::object memory = taps.attr(n.data);
  const int device = memory.attr(n.device_id).cast<int>();
  const py::object dtype = taps.attr(n.dtype);
  if (dtype.is(cupy.float64) || dtype.equal(cupy.float64)) {
    taps = on_cupy_device(cupy, device, [&] { return taps.attr(n.astype)(cupy.float32); });
  } else if (!dtype.is(cupy.float32) && !dtype.equal(cupy.float32)) {
    throw py::type_error(what + ": taps must be float32 or float64, got " +
                         std::string(py::str(dtype)));
  }
  const py::tuple shape = taps.attr(n.shape);
  if (shape.size() != 1) throw py::value_error(dimensions_error(what, shape.size()));
  DeviceBlock block;
  block.rows = 1;
  block.columns = shape[0].cast<std::size_t>();
  if (block.columns > 1 &&
      py::tuple(taps.attr(n.strides))[0].cast<py::ssize_t>() != py::ssize_t(sizeof(float))) {
    taps = on_cupy_device(cupy, device, [&] { return cupy.ascontiguousarray(taps); });
  }
  memory = taps.attr(n.data);
  block.data = memory.attr(n.ptr).cast<std::uintptr_t>();
  block.device = device;
  block.array = std::move(taps);
  return block;
}

}  // namespace

DeviceBlock device_taps(DeviceArrayKind kind, py::handle x, const std::string& what) {
  if (kind == DeviceArrayKind::torch) return torch_taps(*torch_api(), x, what);
  if (kind == DeviceArrayKind::cupy) return cupy_taps(*cupy_api(), x, what);
  throw py::type_error(what + ": not a PyTorch or CuPy array on a GPU");
}

DeviceArrayKind device_array_kind(py::handle x) {
  if (const TorchApi* torch = torch_api(); torch != nullptr && is_instance(x, torch->tensor)) {
    return x.attr(names().is_cuda).cast<bool>() ? DeviceArrayKind::torch : DeviceArrayKind::none;
  }
  if (const CupyApi* cupy = cupy_api(); cupy != nullptr && is_instance(x, cupy->ndarray)) {
    return DeviceArrayKind::cupy;
  }
  return DeviceArrayKind::none;
}

DeviceBlock device_block(DeviceArrayKind kind, py::handle x, const char* what, bool copy) {
  if (kind == DeviceArrayKind::torch) return torch_block(*torch_api(), x, what, copy);
  if (kind == DeviceArrayKind::cupy) return cupy_block(*cupy_api(), x, what, copy);
  throw py::type_error(std::string(what) + ": not a PyTorch or CuPy array on a GPU");
}

std::uintptr_t current_stream(DeviceArrayKind kind, int device) {
  if (kind == DeviceArrayKind::torch) {
    const TorchApi& torch = *torch_api();
    if (torch.raw_stream) return torch.raw_stream(device).cast<std::uintptr_t>();
    return torch.current_stream(device).attr(names().cuda_stream).cast<std::uintptr_t>();
  }
  const CupyApi& cupy = *cupy_api();
  return on_cupy_device(cupy, device, [&] {
    return cupy.get_current_stream().attr(names().ptr).cast<std::uintptr_t>();
  });
}

DeviceBlock new_device_block(DeviceArrayKind kind, py::handle like, int device, std::size_t rows,
                             std::size_t columns) {
  const py::tuple shape = py::make_tuple(rows, columns);
  py::object array;
  if (kind == DeviceArrayKind::torch) {
    array = like.attr(names().new_empty)(shape);  // like's dtype (float32) and device
  } else {
    const CupyApi& cupy = *cupy_api();
    array = on_cupy_device(cupy, device, [&] { return cupy.empty(shape, cupy.float32); });
  }
  return device_block(kind, array, "process: a new output", false);
}

}  // namespace tapstream::python

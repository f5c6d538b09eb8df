#include "python/python_filters.hpp"

#include <pybind11/numpy.h>

#include <stdexcept>

namespace py = pybind11;

namespace tapstream::python {

namespace {

std::string type_name(py::handle object) {
  return py::str(py::type::handle_of(object).attr("__name__"));
}

// `object` as an array of floats (float32 or float64 in, float32 out), else TypeError.
py::array_t<float, py::array::c_style | py::array::forcecast> float_array(py::handle object,
                                                                          const std::string& what) {
  py::object host = py::reinterpret_borrow<py::object>(object);
  if (!py::isinstance<py::array>(object) &&
      (py::hasattr(object, "__cuda_array_interface__") || py::hasattr(object, "__dlpack__"))) {
    // Filters from CUDA arrays (or tensors): read into host memory, where
    // the engines prepare new filters.
    host = py::module_::import("tapstream._device_arrays").attr("host_taps")(object);
  }
  py::array array = py::array::ensure(host);
  if (!array) throw py::type_error(what + ": expected an array of taps, got " + type_name(object));
  const char kind = array.dtype().kind();
  if (kind != 'f' || array.dtype().itemsize() > 8) {
    const std::string from =
        py::isinstance<py::array>(object) ? "" : " from a " + type_name(object);
    throw py::type_error(what + ": taps must be float32 or float64, got " +
                         std::string(py::str(array.dtype())) + from);
  }
  return py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(array);
}

std::size_t index_from(py::handle value, const std::string& what) {
  if (!py::isinstance<py::int_>(value) || py::isinstance<py::bool_>(value)) {
    throw py::type_error(what + " must be an int, got " + type_name(value));
  }
  const long long n = value.cast<long long>();
  if (n < 0) throw py::value_error(what + " is " + std::to_string(n) + ": must be 0 or more");
  return std::size_t(n);
}

}  // namespace

std::vector<float> taps_from(py::handle taps, const std::string& what) {
  const auto array = float_array(taps, what);
  if (array.ndim() != 1) {
    throw py::value_error(what + ": expected a 1-D array of taps, got " +
                          std::to_string(array.ndim()) + " dimensions");
  }
  if (array.size() == 0) throw py::value_error(what + ": no taps (an empty array)");
  return {array.data(), array.data() + array.size()};
}

py::array_t<float, py::array::c_style | py::array::forcecast> taps_rows(py::handle rows,
                                                                        const std::string& what) {
  auto array = float_array(rows, what);
  if (array.ndim() != 2) {
    throw py::value_error(what + ": expected a 2-D array (a row of taps per pair), got " +
                          std::to_string(array.ndim()) + " dimensions");
  }
  return array;
}

FilterBank bank_from(py::handle filters) {
  std::vector<std::vector<float>> taps;
  if (py::isinstance<py::list>(filters) || py::isinstance<py::tuple>(filters)) {
    const py::sequence sequence = py::reinterpret_borrow<py::sequence>(filters);
    for (std::size_t c = 0; c < sequence.size(); ++c) {
      taps.push_back(taps_from(sequence[c], "filter " + std::to_string(c)));
    }
  } else {
    const auto array = float_array(filters, "filters");
    if (array.ndim() != 2) {
      throw py::value_error(
          "filters: expected a 2-D (channels, taps) array or a list of 1-D arrays, got " +
          std::to_string(array.ndim()) + " dimensions" +
          (array.ndim() == 1 ? " (one filter for one channel is [taps] or taps[None, :])" : ""));
    }
    const auto rows = std::size_t(array.shape(0)), columns = std::size_t(array.shape(1));
    if (columns == 0) throw py::value_error("filters: no taps (the array has 0 columns)");
    for (std::size_t c = 0; c < rows; ++c) {
      taps.emplace_back(array.data() + c * columns, array.data() + (c + 1) * columns);
    }
  }
  if (taps.empty()) throw py::value_error("filters: no channels (an empty list or 0 rows)");
  return FilterBank::per_channel(std::move(taps));
}

MatrixPath path_from(py::handle path, std::size_t index) {
  const std::string name = "path " + std::to_string(index);
  if (!py::isinstance<py::tuple>(path) && !py::isinstance<py::list>(path)) {
    throw py::type_error(name +
                         ": expected (input, output, taps[, gain_db[, delay_frames[, "
                         "invert]]]), got " +
                         type_name(path));
  }
  const py::sequence items = py::reinterpret_borrow<py::sequence>(path);
  if (items.size() < 3 || items.size() > 6) {
    throw py::value_error(name + ": expected (input, output, taps[, gain_db[, delay_frames[, " +
                          "invert]]]), got " + std::to_string(items.size()) + " items");
  }
  MatrixPath p;
  p.input = index_from(items[0], name + ": input");
  p.output = index_from(items[1], name + ": output");
  p.taps = taps_from(items[2], name + " (input " + std::to_string(p.input) + " -> output " +
                                   std::to_string(p.output) + ")");
  if (items.size() > 3) {
    if (!py::isinstance<py::float_>(items[3]) && !py::isinstance<py::int_>(items[3])) {
      throw py::type_error(name + ": gain_db must be a number, got " + type_name(items[3]));
    }
    p.gain_db = items[3].cast<double>();
  }
  if (items.size() > 4) p.delay_frames = index_from(items[4], name + ": delay_frames");
  if (items.size() > 5) {
    if (!py::isinstance<py::bool_>(items[5])) {
      throw py::type_error(name + ": invert must be True or False, got " + type_name(items[5]));
    }
    p.invert = items[5].cast<bool>();
  }
  p.source = name;
  return p;
}

}  // namespace tapstream::python

#pragma once
// Filters as Python hands them over, read into the model: a NumPy array (or
// anything NumPy takes) of taps, a (channels, taps) array or a list of 1-D
// arrays for a filter per channel, and a matrix's path tuples. Errors are
// Python's: TypeError for what is not taps at all, ValueError for a shape or
// value that cannot be used, each naming the culprit.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <string>
#include <vector>

#include "dsp/model/filter_bank.hpp"
#include "dsp/model/routing_matrix.hpp"

namespace tapstream::python {

// One filter: a 1-D array of float32 or float64 taps (float64 is rounded to
// the engines' float32). `what` names it in errors ("filter 2").
std::vector<float> taps_from(pybind11::handle taps, const std::string& what);

// Rows of taps: a 2-D array of float32 or float64 (float32 out, C order).
pybind11::array_t<float, pybind11::array::c_style | pybind11::array::forcecast> taps_rows(
    pybind11::handle rows, const std::string& what);

// A filter per channel: a 2-D (channels, taps) array, or a sequence of 1-D arrays.
FilterBank bank_from(pybind11::handle filters);

// (input, output, taps[, gain_db[, delay_frames[, invert]]]), the path `index` of a matrix.
MatrixPath path_from(pybind11::handle path, std::size_t index);

}  // namespace tapstream::python

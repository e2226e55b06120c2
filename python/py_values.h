// Python values as op arguments, shared by the DTensor bindings (dtensor_py.cc) and the torch
// bridge (bridge_py.cc): both take ATen's list arguments (int[] or float[]) from Python sequences.
#pragma once

#include <Python.h>

#include <cstdint>
#include <vector>

#include <nanobind/nanobind.h>

namespace dtensor::python {

// Appends e, an element of a Python list argument, to `ints` (when an int; a bool as 0/1, as
// torch takes it: convolution_backward's bool[3] output_mask) and to `floats` (any number),
// clearing *all_int for a float. Returns false, appending nothing, for any other type: the caller
// names the argument in its error.
inline bool append_number(nanobind::handle e, std::vector<int64_t>* ints, std::vector<double>* floats,
                          bool* all_int) {
  if (PyLong_Check(e.ptr())) {
    ints->push_back(nanobind::cast<int64_t>(e));
    floats->push_back(static_cast<double>(ints->back()));
    return true;
  }
  if (PyFloat_Check(e.ptr())) {
    *all_int = false;
    floats->push_back(nanobind::cast<double>(e));
    return true;
  }
  return false;
}

}  // namespace dtensor::python

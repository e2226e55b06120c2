// dtensor's checkpoint format (nn/checkpoint.h) from Python, for dtensor.checkpoint's conversions
// to and from torch.distributed.checkpoint: the C++ writer (its commit protocol) and loader (every
// size checked before a byte is copied), not a second implementation of the format.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "dtensor/core/error.h"
#include "dtensor/dtensor.h"
#include "nn/checkpoint.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// [(name, DTensor)] as the NamedTensors the C++ calls take (pointers into the Python objects, so a
// load fills the caller's DTensors).
dtensor::nn::NamedTensors named(const nb::list& tensors, const char* fn) {
  dtensor::nn::NamedTensors out;
  for (nb::handle item : tensors) {
    DT_CHECK(nb::isinstance<nb::tuple>(item) && nb::len(item) == 2, fn,
             ": every entry must be a (name, dtensor.DTensor) pair");
    nb::tuple pair = nb::borrow<nb::tuple>(item);
    DT_CHECK(nb::isinstance<nb::str>(pair[0]) && nb::isinstance<dtensor::DTensor>(pair[1]), fn,
             ": every entry must be a (name, dtensor.DTensor) pair");
    out.emplace_back(nb::cast<std::string>(pair[0]), &nb::cast<dtensor::DTensor&>(pair[1]));
  }
  return out;
}

}  // namespace

void bind_checkpoint(nb::module_& m) {
  m.def("_save_checkpoint", [](const std::string& dir, const nb::list& tensors, int64_t step) {
    auto t = named(tensors, "save_checkpoint");
    nb::gil_scoped_release release;  // collective over the tensors' mesh
    dtensor::nn::save_checkpoint(dir, t, step);
  }, "dir"_a, "tensors"_a, "step"_a,
        "Writes [(name, DTensor)] as a new version of the dtensor checkpoint in dir (nn/checkpoint.h); collective.");
  m.def("_load_checkpoint", [](const std::string& dir, const nb::list& tensors) {
    auto t = named(tensors, "load_checkpoint");
    nb::gil_scoped_release release;
    return dtensor::nn::load_checkpoint(dir, t);
  }, "dir"_a, "tensors"_a,
        "Fills [(name, DTensor)] (their target layouts) from the dtensor checkpoint in dir; returns its step.");
}

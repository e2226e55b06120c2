// Helpers shared by the backward formula files (all run under NoGradGuard inside backward).
#pragma once

#include <source_location>

#include "autograd/functional.h"

namespace dtensor::bw {

using Grads = std::vector<std::optional<DTensor>>;

// Registers `fn` as op `name`'s backward. Throws dtensor::Error naming the op and the registering
// file:line when the registry does not define `name`.
void def(const std::string& name, BackwardFn fn,
         std::source_location where = std::source_location::current());

// Sums a broadcast gradient back to `shape` (torch's sum_to_size).
DTensor sum_to(const DTensor& g, const Shape& shape);
// A tensor of `value` like t (Replicate placements).
DTensor full_like(const DTensor& t, double value);
// 0/1 mask of a bool DTensor as t's dtype.
DTensor as_float(const DTensor& mask, DType dtype);
// The gradient of a reduction over `dims` (empty: all) broadcast back to `shape`.
DTensor unreduce(const DTensor& g, const Shape& shape, std::vector<int64_t> dims, bool keepdim);
// Normalized, sorted reduced dims of a call's "dim" argument (all dims when absent or empty).
std::vector<int64_t> reduced_dims(const OpCall& c, int64_t rank);
IValue iv(int64_t v);
IValue iv(double v);
IValue iv(bool v);
IValue iv(std::vector<int64_t> v);
IValue iv(const std::string& v);

}  // namespace dtensor::bw

// The definition shared by the view family's op files (ops/view/defs.cc, copy_defs.cc).
#pragma once

#include <string>

#include "ops/common/defs.h"

namespace dtensor::ops {

// An op of the view family: `cls` kView for views (aliases of the input), kCopy for ops that write
// a new tensor; nothing kept for the backward (Keeps::kNothing).
inline OpDef& define_view_op(Registry& reg, const std::string& schema, CostClass cls, MetaFn meta,
                             KernelFn kernel, SampleFn samples) {
  OpDef& op = reg.define(schema, "view");
  op.cost = cost(cls, Keeps::kNothing);
  op.meta = std::move(meta);
  op.kernel = std::move(kernel);
  op.samples = std::move(samples);
  return op;
}

}  // namespace dtensor::ops

// Forward FLOPs of a bound op call by its op's cost class (OpDef::cost, set where the op is
// defined): what the planner prices compute by and what `explain`'s run budget bounds.
#pragma once

#include <vector>

#include "ops/op_call.h"
#include "ops/registry.h"

namespace dtensor {

// FLOPs of `call`'s forward, given its output metadata `out` (OpDef::meta). Throws dtensor::Error
// naming the op when it has no cost class, or is a contraction without OpCost::flops.
double forward_flops(const OpCall& call, const std::vector<TensorMeta>& out);

}  // namespace dtensor

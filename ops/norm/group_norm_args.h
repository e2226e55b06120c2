// The N, C, HxW and group arguments of ATen's native_group_norm and native_group_norm_backward,
// which restate the input's shape, checked once for both (ops/norm/defs.cc).
#pragma once

#include "ops/registry.h"

namespace dtensor::ops {

// Fails, naming the call, unless tensor `x` is [N, C, ...] holding HxW elements per channel (sizes
// multiplied with overflow checks) and group is positive and divides C.
void check_group_norm_args(const OpCall& c, int x);

}  // namespace dtensor::ops

// The parameters of a call of a pointwise row with parameters (ops/pointwise/rows.h), as the
// kernel, the dtype rule and the backward read them.
#pragma once

#include "ops/op_call.h"
#include "ops/pointwise/rows.h"

namespace dtensor::ops {

// The call's values after self, in schema order (up to 3): None as NaN, an int as its double, and
// whether each was a Python float. Throws dtensor::Error naming the op and the argument for an
// explicit NaN where None is allowed (the kernel could not tell them apart).
RowParams row_params(const OpCall& c);

}  // namespace dtensor::ops

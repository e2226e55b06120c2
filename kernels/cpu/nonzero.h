// nonzero (ATen's nonzero(Tensor self) -> Tensor): the indices of x's nonzero elements. Its row count
// is known only from the data (OpDef::data_dependent, ops/registry.h).
#pragma once

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// The index of every nonzero element of x, one row each in row-major order: [n, x.dim()] int64 (a
// 0-d x gives [1, 0] when its value is nonzero, else [0, 0], as torch). Every dtype (bool, integers,
// floating, complex): NaN counts as nonzero, -0.0 as zero, a complex value when either part is not
// zero. `offset` (x.dim() entries, or empty for zeros) is added to every row: x as a block at that
// offset of a larger tensor gives its nonzeros' indices in that tensor. Throws dtensor::Error naming
// nonzero when offset has another length. A host kernel (a device x runs on a host copy).
Tensor nonzero(const Tensor& x, const Shape& offset = {});

}  // namespace dtensor::kernels

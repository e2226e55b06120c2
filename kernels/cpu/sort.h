// sort and topk along one dim, with torch's order: numbers ascending (descending when asked), NaN
// after every number ascending and before every number descending (torch treats NaN as the largest
// value); among equal values the lower index first (a stable sort; torch.sort(stable=True) gives
// the same, topk's choice among ties is unspecified in torch). Host kernels: a device tensor is
// sorted on a host copy (DT_KERNEL_HOST_ONLY; no CUDA sort yet).
#pragma once

#include <utility>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// (values, indices): x's shape and dtype, and int64 positions along `dim`. A 0-d x is its own sort
// (index 0). Throws dtensor::Error for a dim out of range.
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
// The k largest (or smallest) along `dim`, sorted in that order: values and int64 indices with
// size k along dim. Throws dtensor::Error naming k and the size when k is outside [0, size].
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);

}  // namespace dtensor::kernels

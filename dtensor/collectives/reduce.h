// Element-wise reduction of raw buffers, shared by the collective backends.
#pragma once

#include <cstdint>

#include "dtensor/collectives/process_group.h"

namespace dtensor {

// acc[i] = op(acc[i], x[i]) for n elements of dtype. kAvg accumulates as a sum (see finish_avg).
// NaN propagates through max and min, as in PyTorch. bool: sum is logical or, max or, min and.
void reduce_into(void* acc, const void* x, int64_t n, DType dtype, ReduceOp op);
// out[i] = op(a[i], b[i]).
void reduce_pair(void* out, const void* a, const void* b, int64_t n, DType dtype, ReduceOp op);
// Divides n summed elements by `count` to finish an average (integers truncate toward zero).
void finish_avg(void* acc, int64_t n, DType dtype, int count);

}  // namespace dtensor

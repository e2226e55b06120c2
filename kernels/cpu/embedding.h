// Embedding lookups (forward only). Results are contiguous, in the weight's dtype (any dtype).
#pragma once

#include <cstdint>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// weight[V, D] rows picked by indices (int64 or int32, any shape) -> [*indices.shape, D].
// An index outside [0, V) throws naming it.
Tensor embedding(const Tensor& weight, const Tensor& indices);
// The row-wise sharded form: weight_shard holds rows [row_start, row_end) of the full table.
// Indices in that range are looked up at index - row_start; all others give zero rows (the local
// partial of a sharded embedding, summed across shards afterwards).
Tensor embedding_masked(const Tensor& weight_shard, const Tensor& indices, int64_t row_start,
                        int64_t row_end);

}  // namespace dtensor::kernels

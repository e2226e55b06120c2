// ATen's _embedding_bag on one device: the bags of `indices` delimited by `offsets`, each reduced over
// its rows of `weight` [V, D] by mode 0 (sum, rows scaled by per_sample_weights when given), 1
// (mean) or 2 (max, elementwise); indices equal to padding_idx (>= 0) take no part. Returns ATen's
// four outputs, with ATen's CPU conventions:
//   output [B, D] (weight's dtype; an empty bag gives zeros),
//   offset2bag [n]: the bag of each index position (padding ones too); empty [0] for sum over a
//     float32, float16 or bfloat16 table without padding_idx (ATen's fast path computes none;
//     embedding_bag_offset2bag_is_empty says when),
//   bag_size [B]: non-padding indices per bag for mean and max, zeros for sum,
//   max_indices: for max [B, D] the row of each maximum (the first on ties; 0 in an empty bag), for
//     mean equal to bag_size, for sum zeros [B].
// B = offsets.numel() (minus one with include_last_offset; the last bag ends at n whatever the last
// offset says, as ATen's CPU kernel has it). With [row_start, row_end) narrower than [0, V): `weight` holds only those rows of the table
// (a vocabulary shard) and the output sums or averages only them (mean still divides by the whole
// bag's count), so the shards' outputs add up to the whole one; max is refused there. Index and
// offset dtypes int64 or int32 (the bookkeeping outputs take the indices' dtype). Throws
// dtensor::Error for an index outside [0, V), offsets that do not start at 0 or decrease or pass
// n, a per_sample_weights shape other than indices' or with a mode other than sum. Sums in double.
// Host kernel (DT_KERNEL_HOST_ONLY).
#pragma once

#include <array>
#include <cstdint>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// Whether ATen's CPU kernel returns an empty offset2bag for this call (its fast path for sum).
bool embedding_bag_offset2bag_is_empty(DType weight, int64_t mode, int64_t padding_idx);

std::array<Tensor, 4> embedding_bag(const Tensor& weight, const Tensor& indices, const Tensor& offsets,
                                    int64_t mode, const Tensor& per_sample_weights, bool include_last_offset,
                                    int64_t padding_idx, int64_t num_weights, int64_t row_start, int64_t row_end);

}  // namespace dtensor::kernels

// Joining, splitting and indexing along a dim (negative dims count from the end).
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// cat(tensors, dim): dtensor::cat from the core (same dtype, same sizes outside dim).
using ::dtensor::cat;
// Joins equally shaped tensors of one dtype along a new dim (0 <= dim <= rank after wrapping).
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Views of x along dim in pieces of split_size (the last may be smaller); split_size > 0, or 0 for
// a size-0 dim. The pieces share x's storage (not contiguous in general).
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
// Views of x along dim with the given sizes, which must be >= 0 and sum to x.size(dim).
std::vector<Tensor> split_with_sizes(const Tensor& x, const std::vector<int64_t>& sizes,
                                     int64_t dim = 0);
// x's slices at `index` (int64/int32, 0-d or 1-d, values in [0, x.size(dim))) along dim ->
// contiguous, with size(dim) = index.numel(). x needs at least 1 dim.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

}  // namespace dtensor::kernels

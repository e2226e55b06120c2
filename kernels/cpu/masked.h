// masked_scatter and its gradient for the source (ATen's masked_scatter, masked_scatter_backward):
// the k-th true element of the mask, in row-major order over the whole (broadcast) output, takes
// source's k-th element (source read flat, row-major). Both also run on a block of the output:
// given the whole mask broadcast to the global output shape and the block's global offset, a block
// takes the source elements whose mask positions it holds, each at its global rank among the true
// elements (counted over the whole mask, which every rank holds). Any dtype (copied, no arithmetic);
// mask bool. Host kernels (a device tensor runs on a host copy: DT_KERNEL_HOST_ONLY).
#pragma once

#include <cstdint>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// out = self where mask is false, else source's element of the true element's rank. self: the
// block [already self's values at the block's positions, the block's shape]; mask: bool, the whole
// mask broadcastable to global_shape; offset: the block's global offset (zeros for the whole).
// Throws dtensor::Error naming masked_scatter when mask is not bool, source's dtype differs from
// self's, or source has fewer elements than the mask has true elements.
Tensor masked_scatter(const Tensor& self, const Tensor& mask, const Tensor& source, const Shape& global_shape,
                      const Shape& offset);

// The source's gradient, flat [source_numel], grad's dtype: grad's elements at the block's true
// mask positions, each at its global rank; zero elsewhere (a Partial(sum) piece when the block is
// a shard). grad: a block at `offset` of the global output shape global_shape. Throws naming
// masked_scatter_backward as masked_scatter does.
Tensor masked_scatter_source_grad(const Tensor& grad, const Tensor& mask, int64_t source_numel,
                                  const Shape& global_shape, const Shape& offset);

// The number of true elements of a bool mask broadcast to `shape` (throws naming `op` for another
// dtype).
int64_t masked_count(const char* op, const Tensor& mask, const Shape& shape);

}  // namespace dtensor::kernels

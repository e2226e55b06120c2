// as_strided and resize_ on a contiguous tensor (ATen's as_strided, resize_): sizes and strides
// address the tensor's storage, which for a contiguous tensor that is not a view is its elements in
// row-major order. Any dtype (copied). Host kernels (a device tensor runs on a host copy).
#pragma once

#include <cstdint>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// The flat positions (int64, shape `size`) as_strided reads: offset + sum_k i_k stride[k]. Throws
// dtensor::Error naming as_strided when size and stride differ in length, a size, stride or the
// offset is negative, or a position lies at or past `storage` (the elements there are).
Tensor as_strided_positions(const Shape& size, const Shape& stride, int64_t offset, int64_t storage);

// out[i] = flat(self)[as_strided_positions(size, stride, offset, self.numel())[i]]: torch's
// elements for a contiguous self; throws as as_strided_positions.
Tensor as_strided(const Tensor& self, const Shape& size, const Shape& stride, int64_t offset);

// self resized to `size`: its first min(numel(size), self.numel()) elements in row-major order
// (torch keeps them in the storage); where it grows, zeros (torch leaves those uninitialized).
// Throws naming resize_ for a negative size.
Tensor resize(const Tensor& self, const Shape& size);

}  // namespace dtensor::kernels

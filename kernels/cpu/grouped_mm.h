// Grouped matrix product with the semantics of PyTorch's torch._grouped_mm (checked against torch
// 2.15 on CUDA; see tests/kernels/grouped_mm_test.cc): one product per group g, the groups laid out
// along a dim of one operand by `offs`, int32 cumulative group ends (group g covers
// [offs[g-1], offs[g]), offs[-1] = 0). The four forms:
//   a[M, K]    @ b[G, K, N], offs[G] over M -> [M, N]     (rows of group g use b[g]: MoE experts)
//   a[M, K]    @ b[K, N],    offs[G] over K -> [G, M, N]  (the experts' weight gradient)
//   a[G, M, K] @ b[K, N],    offs[G] over N -> [M, N]     (columns of group g use a[g])
//   a[G, M, K] @ b[G, K, N], no offs       -> [G, M, N]   (bmm)
// Float dtypes as kernels::mm (a and b share one). Rows/columns past offs[G-1] are zero (torch leaves
// them uninitialized). Unlike torch, offs must be non-decreasing and end within the grouped dim;
// errors (dtensor::Error) name grouped_mm and the shapes: wrong ranks, K or G mismatch, offs not
// int32 1-d of G entries, offs given for 3-d x 3-d or missing otherwise, offs out of order or range.
#pragma once

#include <optional>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

Tensor grouped_mm(const Tensor& a, const Tensor& b, const std::optional<Tensor>& offs);

// Checks the operands shared by the CPU and CUDA kernels (one floating dtype, 2-d or 3-d, equal
// contraction dims, offs given exactly when not 3-d x 3-d, equal group counts for 3-d x 3-d) and
// returns the call's name for errors: "grouped_mm(float32[M, K], float32[G, K, N])".
std::string grouped_mm_check(const Tensor& a, const Tensor& b, const std::optional<Tensor>& offs);

// Checks offs (int32 1-d of `groups` entries, non-decreasing, within [0, extent]) and returns its
// values; `what` names the call in errors. Shared by the CPU and CUDA kernels and the op's meta.
std::vector<int64_t> grouped_mm_offsets(const Tensor& offs, int64_t groups, int64_t extent,
                                        const std::string& what);

}  // namespace dtensor::kernels

// Value-selecting reductions along a dim (max/min with indices, argmax/argmin, median, nanmedian,
// kthvalue), their backward, and the per-row helpers of a distributed k-th-value search.
// torch's single-device CPU semantics. `dim` may be negative; a 0-d tensor reduces over "dim 0/-1"
// as one element. keepdim keeps the reduced dim with size 1. Values keep the input dtype (any
// dtype; floating values are compared in double, integer/bool in int64), indices are int64.
// Reducing a dim of size 0 throws (no identity), as in torch.
//
// NaN and tie rules (and how they were determined):
// - max_dim / min_dim / argmax / argmin: NaN is both the max and the min; the FIRST NaN wins; among
//   equal values the FIRST index wins. (ATen's CPU max/min kernels replace the running value only
//   when !(x <= best) resp. !(x >= best) and stop at the first NaN; argmax/argmin combine with
//   "NaN wins, equal values keep the lower index".)
// - median / median_dim: any NaN in the row -> the value is NaN and the index is the FIRST NaN.
//   Otherwise the LOWER median: the element of rank (n - 1) / 2 (0-based) in ascending order.
//   Index among equal values: the row is ordered by (value, index) -- equal values by position, a
//   stable sort -- and the index of the element at that rank is returned. This is exactly what
//   ATen's CPU median_with_indices_impl computes (nth_element with the comparator
//   a < b || (a == b && i < j)). E.g. median_dim([5, 1, 5, 5]) = (5, 0): the stable order is
//   1@1, 5@0, 5@2, 5@3 and rank (4 - 1) / 2 = 1 holds 5@0; median_dim([1, 1, 1]) = (1, 1).
// - nanmedian / nanmedian_dim: NaNs are ignored; the lower median of the m non-NaN values (rank
//   (m - 1) / 2), same stable index rule; an all-NaN row gives (NaN, index 0 = its first NaN).
// - kthvalue(k): the k-th smallest (1-based) in the order "numbers ascending, NaN after every
//   number" (torch sorts NaN last). Index: the position of the k-th element of the stable sort by
//   (value, index), NaNs ordered by index among themselves -- the same rule as median_dim, so
//   kthvalue(x, (n + 1) / 2) == median_dim(x) for NaN-free rows. torch's CPU kthvalue runs an
//   unstable quickselect whose tie index is unspecified (torch documents the indices of
//   median/kthvalue among equal values as not guaranteed); we pick this deterministic rule, which
//   a sharded implementation can reproduce (see index_of_occurrence).
// - median(x) / nanmedian(x) over the whole tensor: the value only (0-d); empty input gives NaN.
//
// Backward:
// - value_index_backward: zeros of input_shape with grad_values scattered to the selected indices
//   along dim (torch's value_selecting_reduction_backward; used by max_dim, min_dim, median_dim,
//   nanmedian_dim, kthvalue).
// - median_backward (whole-tensor median/nanmedian, also max()/min() of a whole tensor): torch's
//   evenly_distribute_backward -- the gradient is split EVENLY among all elements equal to the
//   result (when the result is NaN: among all NaN elements).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// (values, indices).
std::pair<Tensor, Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min_dim(const Tensor& x, int64_t dim, bool keepdim = false);
// Without dim: the index into the flattened tensor (0-d result, or all-ones shape with keepdim);
// an empty tensor throws.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

Tensor median(const Tensor& x);
std::pair<Tensor, Tensor> median_dim(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor nanmedian(const Tensor& x);
std::pair<Tensor, Tensor> nanmedian_dim(const Tensor& x, int64_t dim, bool keepdim = false);
// 1 <= k <= size(dim), else throws.
std::pair<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim = -1,
                                   bool keepdim = false);

// grad_values / indices have the reduced shape (with or without the kept dim, per keepdim);
// the result has input_shape and grad_values' dtype (floating).
Tensor value_index_backward(const Tensor& grad_values, const Tensor& indices,
                            const Shape& input_shape, int64_t dim, bool keepdim);
// grad and result are 0-d; the result has x's shape and grad's dtype.
Tensor median_backward(const Tensor& grad, const Tensor& x, const Tensor& result);

// ---- Helpers for a distributed k-th value over a sharded dim (a pivot search; the distributed
// step itself runs the radix select of kernels/cpu/radix_select.h and uses index_of_occurrence). Each works on the local shard and
// returns per-row quantities that combine across shards with one all-reduce (named below).
// Per-row tensors (`pivots`, `lo`, `hi`, `values`, `occurrence`) are shaped like x with `dim` of
// size 1, or like x without `dim`; results are shaped like them (the keepdim shape for count_nan
// and min_max with keepdim = true). All comparisons use kthvalue's order: numbers ascending, NaN
// greater than every number and equal to NaN.
//
// A sketch of the search for rank k (1-based) per row: M = sum count_nan; if k > n - M the answer
// is NaN. Otherwise keep an open value interval (lo, hi), starting from min_max; each round every
// shard proposes median_between(lo, hi) (a value and a candidate count), the caller picks a
// pivot p (e.g. the count-weighted median of the proposals), all-reduces count_less(p) and
// count_less_equal(p), and either finds the answer (count_less < k <= count_less_equal) or
// narrows to (lo, p) or (p, hi). The index is then the (k - count_less(v))-th occurrence of v in
// global order: exclusive-prefix the per-shard counts of v and call index_of_occurrence.
//
// #{x < pivot} per row (int64, all-reduce SUM).
Tensor count_less(const Tensor& x, int64_t dim, const Tensor& pivots);
// #{x <= pivot} per row (int64, all-reduce SUM); a NaN pivot counts every element.
Tensor count_less_equal(const Tensor& x, int64_t dim, const Tensor& pivots);
// #NaN per row (int64, all-reduce SUM).
Tensor count_nan(const Tensor& x, int64_t dim, bool keepdim = true);
// (min, max) per row ignoring NaN, in x's dtype (all-reduce MIN / MAX). A row with no number (all
// NaN, or a shard with an empty dim) gives the identities (+inf, -inf), or the dtype's (max, min)
// for integer dtypes.
std::pair<Tensor, Tensor> min_max(const Tensor& x, int64_t dim, bool keepdim = true);
// Per row, the lower median of the numbers v with lo < v < hi (strict; NaN never qualifies) in x's
// dtype (NaN when there is none; 0 for integer dtypes) and how many there are (int64).
std::pair<Tensor, Tensor> median_between(const Tensor& x, int64_t dim, const Tensor& lo,
                                         const Tensor& hi);
// Per row, index_offset + i for the position i of the occurrence-th (1-based) element equal to
// the row's value (NaN matches NaN), or -1 when the shard has fewer (or occurrence < 1). With
// index_offset = the shard's global start, all-reduce MAX gives the global index.
Tensor index_of_occurrence(const Tensor& x, int64_t dim, const Tensor& values,
                           const Tensor& occurrence, int64_t index_offset);

}  // namespace dtensor::kernels

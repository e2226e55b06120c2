// Scans (cumulative ops) along one dim, torch's single-device CPU semantics. `dim` may be negative;
// a 0-d tensor scans as one element. Results are contiguous and shaped like the input.
//
// Dtypes: floating inputs are computed in double and rounded to the input dtype (torch's CPU scans
// accumulate float32 in double too); integer/bool inputs of cumsum/cumprod give int64 (wrapping);
// logcumsumexp and every backward take floating tensors only; cummax/cummin keep any dtype.
//
// Semantics:
// - cumsum / cumprod: running sum / product from position 0 (NaN and inf propagate as in IEEE).
// - logcumsumexp: out_i = logaddexp(x_i, out_{i-1}), out_{-1} = -inf, with torch's helper:
//   logaddexp(a, b) = max + log1p(exp(min - max)), except when min == max and both are infinite,
//   which gives a (so -inf,-inf -> -inf and inf,inf -> inf); NaN propagates.
// - cummax / cummin: element i replaces the running (value, index) when it is NaN, or when the
//   running value is not NaN and x_i >= value (cummax) / x_i <= value (cummin). So ties take the
//   LAST index, and once a NaN is seen the values stay NaN while the index follows each later NaN:
//   cummax([1, 3, 3, 2]) = ([1, 3, 3, 3], [0, 1, 2, 2]);
//   cummax([1, NaN, 5, NaN, 0]) = ([1, NaN, NaN, NaN, NaN], [0, 1, 1, 3, 3]).
//   (Read off ATen's CPU cummax_cummin_helper: the test is isnan(x) || (!isnan(out) && op(x, out))
//   with op = std::greater_equal / std::less_equal.)
//
// Sharded scans (carry exchange): the *_with_carry variants scan a shard of the dim as if it were
// preceded by the earlier shards, summarized by a per-row carry shaped like x with `dim` of size 1
// (any dtype; cast to the compute type):
// - cumsum_with_carry: carry + cumsum(x) (the carry is the running sum before the shard; 0 = none).
// - cumprod_with_carry: the running product starts at the carry (1 = none).
// - logcumsumexp_with_carry: the running value starts at the carry (-inf = none).
// - cummax/cummin_with_carry: the running (value, index) starts at (carry_values, carry_indices)
//   (carry_indices int64, global); local position i has global index index_offset + i. With the
//   rule above a local element beats the carry on ties (it comes later), and a NaN carry sticks
//   unless a local NaN replaces it. Returned indices are global. Neutral carries: -inf (cummax),
//   +inf (cummin) with any index. The carry for shard s is the last (value, index) of shard s-1's
//   own carried scan; scanning the shards' last elements with these same functions combines them.
#pragma once

#include <cstdint>
#include <utility>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

Tensor cumsum(const Tensor& x, int64_t dim);
Tensor cumprod(const Tensor& x, int64_t dim);
Tensor logcumsumexp(const Tensor& x, int64_t dim);
// (values, int64 indices).
std::pair<Tensor, Tensor> cummax(const Tensor& x, int64_t dim);
std::pair<Tensor, Tensor> cummin(const Tensor& x, int64_t dim);

Tensor cumsum_with_carry(const Tensor& x, int64_t dim, const Tensor& carry);
Tensor cumprod_with_carry(const Tensor& x, int64_t dim, const Tensor& carry);
Tensor logcumsumexp_with_carry(const Tensor& x, int64_t dim, const Tensor& carry);
std::pair<Tensor, Tensor> cummax_with_carry(const Tensor& x, int64_t dim,
                                            const Tensor& carry_values, const Tensor& carry_indices,
                                            int64_t index_offset);
std::pair<Tensor, Tensor> cummin_with_carry(const Tensor& x, int64_t dim,
                                            const Tensor& carry_values, const Tensor& carry_indices,
                                            int64_t index_offset);

// ---- Backward (grad has the input's shape; the result has grad's dtype).
// Reverse cumulative sum of grad. For a sharded dim: add the sum of grad over the later shards.
Tensor cumsum_backward(const Tensor& grad, int64_t dim);
// dx_k = sum_{i>=k} g_i * prod_{j<=i, j!=k} x_j, computed without division as
// out_{k-1} * S_k with S_k = g_k + x_{k+1} * S_{k+1} (out_{-1} = 1), so zeros in x (one or many)
// are exact. `out` is cumprod(x, dim).
Tensor cumprod_backward(const Tensor& grad, const Tensor& x, const Tensor& out, int64_t dim);
// dx_j = sum_{i>=j} g_i * exp(x_j - out_i), accumulated right to left in log space separately for
// the positive and negative parts of g (torch's formulation). `out` is logcumsumexp(x, dim).
Tensor logcumsumexp_backward(const Tensor& grad, const Tensor& x, const Tensor& out, int64_t dim);
// Scatter-adds grad into a zero tensor of input_shape at the cummax/cummin indices along dim.
// For a sharded dim pass the shard's index_offset: indices below it point into earlier shards (at
// the carry) and are skipped here; the caller routes their summed grad to the carry's owner.
Tensor cummaxmin_backward(const Tensor& grad, const Tensor& indices, const Shape& input_shape,
                          int64_t dim, int64_t index_offset = 0);

}  // namespace dtensor::kernels

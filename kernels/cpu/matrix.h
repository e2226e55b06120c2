// Matrix products through OpenBLAS (float32/float64 natively; bfloat16/float16 computed in float32
// and rounded). All operands must share one floating dtype. Strided operands whose rows or columns
// are contiguous go to BLAS with transpose flags, others are copied first. Results are contiguous.
#pragma once

#include <optional>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// a[n, k] @ b[k, m] -> [n, m].
Tensor mm(const Tensor& a, const Tensor& b);
// a[B, n, k] @ b[B, k, m] -> [B, n, m] (batch sizes must match exactly).
Tensor bmm(const Tensor& a, const Tensor& b);
// beta * self + alpha * (a[n, k] @ b[k, m]); self broadcasts to [n, m]. beta == 0 ignores self
// (NaNs in it do not propagate).
Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, double beta = 1,
             double alpha = 1);
// x[..., in] @ w[out, in]^T + bias[out] -> [..., out]; x may be 1-d.
Tensor linear(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias = std::nullopt);
// torch.matmul: 1-d @ 1-d -> 0-d dot; 2-d @ 2-d -> mm; a 1-d operand gets a dim prepended (left) or
// appended (right) that is removed from the result; otherwise batched over the broadcast batch dims
// a[*ba, n, k] @ b[*bb, k, m] -> [*broadcast(ba, bb), n, m].
Tensor matmul(const Tensor& a, const Tensor& b);

}  // namespace dtensor::kernels

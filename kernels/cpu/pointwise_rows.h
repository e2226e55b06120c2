// CPU kernels of the pointwise rows (ops/pointwise/rows.h): one function per table, the row an
// argument, so that a new row needs no new declaration. Broadcasting and type promotion are torch's
// (kernels/cpu/pointwise.h); inputs may be any strided views, results are new contiguous tensors.
#pragma once

#include "dtensor/core/tensor.h"
#include "ops/pointwise/rows.h"

namespace dtensor::kernels {

// The result dtype of a row on inputs of these dtypes and ranks (ranks: a 0-d tensor only raises a
// dimensioned one's dtype across categories, torch.result_type). Throws dtensor::Error naming the
// op, the dtypes and shapes, and the accepted dtypes, when the row's dtype rule rejects them.
DType row_dtype(UnaryRow row, DType x, const Shape& shape);
DType row_dtype(BinaryRow row, DType a, const Shape& a_shape, DType b, const Shape& b_shape);
// The result dtype of a row with parameters (torch.result_type of x and the parameters as Python
// numbers). Throws dtensor::Error naming the op, the dtype and shape, when the rule rejects x, and
// naming the parameters when they fail the row's `valid` condition. (An explicit NaN where NaN
// stands for None is refused earlier, by ops::row_params.)
DType row_dtype(ParamRow row, DType x, const Shape& shape, const RowParams& p);

// out = f(x) elementwise, dtype row_dtype(row, ...); computed in float for float32/bfloat16/
// float16, double for float64, int64 for integers and bool (kernels/cpu/loops.h).
Tensor pointwise_unary_row(UnaryRow row, const Tensor& x);
// out = f(a, b) over the broadcast shape. Rows that divide throw on an integer divisor of 0.
Tensor pointwise_binary_row(BinaryRow row, const Tensor& a, const Tensor& b);
// out = f(x; p) elementwise, dtype row_dtype(row, x, p), computed as the unary rows.
Tensor pointwise_param_row(ParamRow row, const Tensor& x, const RowParams& p);

}  // namespace dtensor::kernels

// Softmax and normalization layers. Floating inputs only; computed in double, rounded to the input
// dtype. Results are contiguous, shaped like the input.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// exp(x - max) / sum(exp(x - max)) along dim (a row of all -inf gives NaN, like torch).
Tensor softmax(const Tensor& x, int64_t dim);
// x - max - log(sum(exp(x - max))) along dim.
Tensor log_softmax(const Tensor& x, int64_t dim);
// log_softmax of one row of n float64 values, as (x - max) - log(sum): x - (max + log(sum)) loses
// log(sum) once |max| is ~1e16 times larger (ATen's CPU kernel subtracts in this order too). out may
// be in (in place). A row of all -inf gives NaN. Also cross_entropy's log-probabilities.
void log_softmax_row(const double* in, double* out, int64_t n);
// (x - mean) / sqrt(biased var + eps) * weight + bias over the trailing dims normalized_shape;
// weight and bias (any floating dtype) have shape normalized_shape.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape,
                  const std::optional<Tensor>& weight = std::nullopt,
                  const std::optional<Tensor>& bias = std::nullopt, double eps = 1e-5);
// Gradients of layer_norm(x, normalized_shape, weight, bias, eps) given grad_out (x's shape), in one
// pass per row (the composite formula of ops/norm/backward.cc fused; mean and rstd recomputed
// from x, since the forward keeps none). With x_hat = (x - mean) * rstd and gw = grad_out * weight:
//   input  = rstd * (gw - mean(gw) - x_hat * mean(gw * x_hat))   (x's shape and dtype)
//   weight = sum over the leading dims of grad_out * x_hat       (normalized_shape)
//   bias   = sum over the leading dims of grad_out                (normalized_shape)
// weight's and bias's gradients have weight's dtype (x's when weight is absent). Computed in double.
// Returns {input, weight, bias}. Errors: the shape checks of layer_norm, and grad_out's shape
// differing from x's. On CUDA one kernel pass per rows and per columns, also in double.
std::vector<Tensor> layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Shape& normalized_shape,
                                        const std::optional<Tensor>& weight, double eps);
// x / sqrt(mean(x^2) + eps) * weight over the trailing dims normalized_shape. eps defaults to
// torch.finfo(x.dtype).eps (float32 2^-23, float64 2^-52, bfloat16 2^-7, float16 2^-10).
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape,
                const std::optional<Tensor>& weight = std::nullopt,
                std::optional<double> eps = std::nullopt);

}  // namespace dtensor::kernels

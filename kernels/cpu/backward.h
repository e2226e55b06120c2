// Small backward kernels of the core ops (torch's single-device CPU semantics): gelu, embedding,
// nll_loss, slice and select. The pooling, scan and selection backward kernels live with their
// forward (pooling.h, scan.h, selection.h); attention's in attention.h.
//
// Results are new contiguous tensors. Floating math is done in float (float32, bfloat16, float16)
// or double (float64) for the pointwise gelu_backward, and accumulated in double and rounded once
// for the scatter-adds (embedding_dense_backward), so that a sharded run that adds the same terms
// in the same order gives bit-identical blocks. Errors are dtensor::Error naming the kernel, the
// shapes and what is accepted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// d/dx gelu(x) * grad, grad and x broadcast together; the result has their promoted floating dtype.
//   approximate "none":  Phi(x) + x * phi(x), Phi the standard normal CDF 0.5 * (1 + erf(x / sqrt 2)),
//                        phi its density exp(-x^2 / 2) / sqrt(2 pi);
//   approximate "tanh":  with u = k (x + 0.044715 x^3), k = sqrt(2 / pi):
//                        0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) k (1 + 3 * 0.044715 x^2).
// Throws for other `approximate` values and non-floating inputs.
Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate = "none");

// The gradient of embedding(weight[num_weights, D], indices) w.r.t. weight: zeros [num_weights, D]
// with every row grad[i, :] added to row indices[i] (grad: [*indices.shape, D], floating; indices
// int64/int32). Indices equal to padding_idx contribute nothing (so a padding row stays 0; a
// negative padding_idx, ATen's -1, matches no index). An index outside [0, num_weights) throws.
// Row-sharded form: only rows [row_start, row_start + row_count) of the result are produced
// (row_count -1: up to num_weights); indices outside that range are skipped (after the range
// check). Rows accumulate in double in the order of the indices, then round to grad's dtype.
Tensor embedding_dense_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights,
                                int64_t padding_idx = -1, int64_t row_start = 0,
                                int64_t row_count = -1);

// The gradient of nll_loss (loss.h) w.r.t. its input. input_shape is [N, C] or [C], target
// [N] / [] class indices (int64/int32), grad_output the loss output's gradient: [N] (or []) for
// "none", [] otherwise. grad_input[i, t_i] = -weight[t_i] * g_i ("none"), -weight[t_i] * g
// ("sum"), -weight[t_i] * g / total_weight ("mean"), total_weight = the summed weights of the
// non-ignored targets; entries of ignored targets and all other classes are 0. weight: floating
// [num_classes] (all ones when absent). The result has `dtype`.
// Block form (for a class-sharded input): input_shape holds the local block's classes
// [class_start, class_start + input_shape.back()) of num_classes (-1: input_shape.back()); targets
// outside that range give no entries here. `total_weight` overrides the divisor of "mean" (a
// caller whose target is a shard passes the global one); absent, it is computed from `target`.
// A target outside [0, num_classes) that is not ignore_index throws naming it.
Tensor nll_loss_backward(const Tensor& grad_output, const Shape& input_shape, DType dtype,
                         const Tensor& target, const std::optional<Tensor>& weight,
                         const std::string& reduction, int64_t ignore_index,
                         std::optional<double> total_weight = std::nullopt,
                         int64_t class_start = 0, int64_t num_classes = -1);
// The divisor of nll_loss's "mean": sum of weight[t] over the targets t != ignore_index.
double nll_loss_total_weight(const Tensor& target, const std::optional<Tensor>& weight,
                             int64_t ignore_index);

// slice_backward: zeros of input_sizes (grad's dtype) with grad written at positions
// start, start + step, ... (< end) of `dim`; grad has input_sizes with dim's size
// ceil((end - start) / step) (0 when end <= start). Requires 0 <= start <= input_sizes[dim],
// start <= end <= input_sizes[dim] (already normalized and clamped, as ATen's callers do) and
// step >= 1. dim may be negative.
Tensor slice_backward(const Tensor& grad, const Shape& input_sizes, int64_t dim, int64_t start,
                      int64_t end, int64_t step);
// select_backward: zeros of input_sizes with grad (input_sizes without dim) at `index` of `dim`
// (negative index counts from the end).
Tensor select_backward(const Tensor& grad, const Shape& input_sizes, int64_t dim, int64_t index);
// Block form of slice_backward for sharded layouts: the block of the result of shape out_shape at
// global offset out_offset, given the block of grad at global offset grad_offset (in grad's
// coordinates). Positions of the out block whose grad element lies outside the grad block are
// left 0, so the grad block must cover what the out block needs (a grad block sharded like the
// out block on the other dims and whole along `dim`, or a whole grad).
Tensor slice_backward_block(const Tensor& grad, const Shape& grad_offset, const Shape& input_sizes,
                            int64_t dim, int64_t start, int64_t end, int64_t step,
                            const Shape& out_shape, const Shape& out_offset);

}  // namespace dtensor::kernels

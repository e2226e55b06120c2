// Merging attention computed over disjoint key blocks (ring attention, flash-attention's online
// softmax): a block's partial result (out_b, lse_b), where out_b is softmax over the block's keys
// applied to its values and lse_b each query row's log-sum-exp of the block's scores, combines with
// the running (out, lse) as
//   lse' = log(exp(lse) + exp(lse_b)),  out' = exp(lse - lse') out + exp(lse_b - lse') out_b,
// which equals attention over the union of the keys. A row that has seen no key yet has lse = -inf
// and out = 0 (so the first merged block is copied).
//
// Shapes: out and out_b [..., L, Ev]; lse and lse_b [..., L]; contiguous, one dtype, float32 or
// float64 (the compute dtype of kernels::scaled_dot_product_attention_with_lse), on one device (both
// have CUDA kernels, kernels/kernel_list.h). Errors (dtensor::Error naming the function): shapes or
// dtypes that differ, another dtype, non-contiguous.
#pragma once

#include <utility>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// The merged (out', lse'), new tensors (the inputs are not written).
std::pair<Tensor, Tensor> merge_attention(const Tensor& out, const Tensor& lse, const Tensor& out_b,
                                          const Tensor& lse_b);

// The backward of one key block from the merged forward: the block's probabilities are its local
// softmax times w = exp(lse_b - lse) per query row, so the single-block backward
// (kernels::scaled_dot_product_attention_backward) given grad_out * w and the merged `out` yields the
// block's share of dQ and its exact dK, dV. Returns w [..., L] (0 where lse_b or lse is -inf), in
// lse's dtype.
Tensor attention_block_weight(const Tensor& lse_b, const Tensor& lse);

}  // namespace dtensor::kernels

// Scaled dot-product attention on the CPU: torch.nn.functional.scaled_dot_product_attention (its
// math backend, without dropout) and its backward.
//
// Shapes: query [..., L, E], key [..., S, E], value [..., S, Ev], with identical batch dims "..."
// (no broadcasting among query, key and value; rank >= 2) and one floating dtype. The result is
// [..., L, Ev] in that dtype:
//   out = softmax(scale * query @ key^T + bias, over S) @ value,   scale = 1 / sqrt(E) by default.
// bias: is_causal masks key j for query i when j > i (torch's top-left aligned lower-triangular
// mask, also when L != S); a bool attn_mask (True = attend) masks where False; a floating attn_mask
// is added. attn_mask broadcasts to [..., L, S]. A row whose keys are all masked gives zeros (as
// torch's math backend, which uses a "safe" softmax since 2.5) rather than NaN.
//
// Numerics: float32, bfloat16 and float16 compute in float, float64 in double; products go through
// BLAS in blocks of 64 query rows (scores of one block: 64 x S), softmax subtracts the row max.
// With is_causal a block only computes the keys its rows can see.
//
// Sharded query rows: `query_offset` is the global position of the first local query row (the
// causal mask compares key j with query_offset + i); attn_mask must then hold the local rows only.
//
// Backward (flash-attention's formulation, recomputing the probabilities P from query and key):
//   dV = P^T dO,  dP = dO V^T,  D_i = sum_e dO_ie O_ie (= sum_j P_ij dP_ij),  dS = P * (dP - D),
//   dQ = scale * dS K,  dK = scale * dS^T Q.
// `out` must be the forward result for these inputs (D uses it). Each gradient has its input's
// shape and dtype. The backward takes the same masks as the forward.
//
// Errors (dtensor::Error naming the op): mismatched shapes, batch dims or dtypes, a non-floating
// input, an attn_mask that is neither bool nor floating or does not broadcast to [..., L, S],
// attn_mask together with is_causal.
#pragma once

#include <cstdint>
#include <optional>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const std::optional<Tensor>& attn_mask = std::nullopt,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    int64_t query_offset = 0);

struct AttentionGrads {
  Tensor query, key, value;
};

AttentionGrads scaled_dot_product_attention_backward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value,
    const Tensor& out, bool is_causal = false, std::optional<double> scale = std::nullopt,
    const std::optional<Tensor>& attn_mask = std::nullopt, int64_t query_offset = 0);

// The forward without attn_mask, also returning each query row's log-sum-exp of the scaled, masked
// scores (the softmax denominator in log space), for attention computed in key blocks whose partial
// results merge by log-sum-exp (ring attention, kernels/cpu/attention_merge.h). out [..., L, Ev] and
// lse [..., L] are in the compute dtype (float32, or float64 for float64 inputs); a row that sees
// no key has out 0 and lse -inf. query_offset may be negative (a key block that starts after the
// query block). On CUDA (kernels/kernel_list.h) the math kernel or cuDNN (bfloat16 / float16 at
// offset 0), lse float32 or float64 alike.
struct AttentionWithLse {
  Tensor out, lse;
};
AttentionWithLse scaled_dot_product_attention_with_lse(const Tensor& query, const Tensor& key,
                                                        const Tensor& value, bool is_causal = false,
                                                        std::optional<double> scale = std::nullopt,
                                                        int64_t query_offset = 0);

}  // namespace dtensor::kernels

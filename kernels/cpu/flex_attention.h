// FlexAttention-style attention on the CPU: scaled dot-product attention whose mask and score
// modifier are given as data (FlexMask, FlexScoreMod) rather than as code, after PyTorch's
// torch.nn.attention.flex_attention (its mask_mod / score_mod / BlockMask), restricted to the
// masks and modifiers listed here.
//
// Shapes: query [..., L, E], key [..., S, E], value [..., S, Ev] with identical batch dims "..."
// (rank >= 2) and one floating dtype; the result is [..., L, Ev] in that dtype. Positions are
// global: query row i sits at qp = q_offset + i, key j at kp = kv_offset + j (0 and 0 unless the
// sequence is sharded), so a sequence-sharded caller evaluates the same mask on any (q, kv) block.
//
// Score, for query qp and key kp (in this order, as flex_attention's score_mod sees it):
//   s = scale * q . k                          scale = 1 / sqrt(E) by default
//   s += alibi_slopes[h] * (kp - qp)           ALiBi (Press et al., 2022); h = the head index,
//                                              i.e. the index along dim -3 (rank >= 3)
//   s = soft_cap * tanh(s / soft_cap)          tanh soft-capping (Gemma 2), when soft_cap > 0
// Mask (True = attend), for batch index b0 along dim 0:
//   document(qp, kp) and (kp < prefix_length or (causal(qp, kp) and window(qp, kp)))
//   causal:   kp <= qp (when is_causal)
//   window:   |qp - kp| <= window (sliding window, when window >= 0)
//   document: document_ids[b0, qp] == document_ids[b0, kp] (jagged / packed sequences; when given)
//   prefix_length > 0 makes keys [0, prefix_length) visible to every query (prefix-LM).
// out = softmax over visible keys of s, @ value; a query with no visible key gives zeros (as the
// SDPA kernel, kernels/cpu/attention.h).
//
// Block mask: the L x S scores split into tiles of block_size x block_size (the last ones
// shorter); create_block_mask classifies each tile as kEmptyTile (no visible pair), kFullTile
// (every pair visible) or kPartialTile. The kernels skip empty tiles entirely and evaluate the mask
// only on partial tiles. It depends only on the FlexMask, the offsets and L, S, block_size, so it is
// computed once and passed to every layer's forward and backward (like PyTorch's BlockMask).
//
// Backward (as kernels/cpu/attention.h, with the soft cap's derivative 1 - tanh^2 applied to dS):
// gradients of query, key and value; document_ids and alibi_slopes are data and get none.
//
// Errors (dtensor::Error naming the op): the SDPA shape errors; document_ids not int64 [N] or
// [query.size(0), N] with N covering every position; alibi_slopes not floating [query.size(-3)];
// window < -1; prefix_length < 0; soft_cap < 0; block_size < 1; a block_mask that is not int32
// [1 or document_ids.size(0), ceil(L / block_size), ceil(S / block_size)].
#pragma once

#include <cstdint>
#include <optional>

#include "dtensor/core/tensor.h"
#include "kernels/cpu/attention.h"

namespace dtensor::kernels {

struct FlexMask {
  bool is_causal = false;
  int64_t window = -1;         // -1: no sliding window
  int64_t prefix_length = 0;   // 0: no prefix
  std::optional<Tensor> document_ids;  // int64 [N] or [B0, N]
};

struct FlexScoreMod {
  std::optional<Tensor> alibi_slopes;  // floating [H]
  double soft_cap = 0;                 // 0: none
};

// Tile classes of a block mask (int32 values).
enum FlexTile : int32_t { kEmptyTile = 0, kPartialTile = 1, kFullTile = 2 };

// int32 [Bd, ceil(L / block_size), ceil(S / block_size)] of FlexTile; Bd = document_ids.size(0)
// for 2-d document ids, else 1.
Tensor create_block_mask(const FlexMask& mask, int64_t L, int64_t S, int64_t block_size,
                         int64_t q_offset = 0, int64_t kv_offset = 0);

// A block mask computed here when none is given.
Tensor flex_attention(const Tensor& query, const Tensor& key, const Tensor& value, const FlexMask& mask,
                      const FlexScoreMod& score_mod, const std::optional<Tensor>& block_mask,
                      int64_t block_size, std::optional<double> scale, int64_t q_offset, int64_t kv_offset);

AttentionGrads flex_attention_backward(const Tensor& grad_out, const Tensor& query, const Tensor& key,
                                       const Tensor& value, const Tensor& out, const FlexMask& mask,
                                       const FlexScoreMod& score_mod, const std::optional<Tensor>& block_mask,
                                       int64_t block_size, std::optional<double> scale, int64_t q_offset,
                                       int64_t kv_offset);

}  // namespace dtensor::kernels

// Context parallel attention by ring attention (Liu et al., "Ring Attention with Blockwise
// Transformers", 2023; PyTorch's context_parallel uses the same scheme): query, key and value are
// sharded on the sequence dim over the ranks of one process group, torch.chunk-style (rank r holds
// positions chunk_range(seq_len, n, r), dtensor_spec.h). Each rank keeps its query block; the key
// and value blocks travel the ring (rank r sends to r+1 and receives from r-1, by batch_isend_irecv
// on a helper thread while the rank computes on the block it holds), and the partial results merge
// by log-sum-exp (kernels/cpu/attention_merge.h). The causal mask is on global positions; a key block
// entirely after the query block is skipped.
//
// Shapes (local blocks): query [..., Lr, E], key [..., Lr, E], value [..., Lr, Ev], with Lr this
// rank's chunk of seq_len (the same length for query and key: self-attention). One floating dtype;
// cpu tensors. out [..., Lr, Ev] in the inputs' dtype; lse [..., Lr] in float32 (float64 for float64
// inputs), the global log-sum-exp of each local query row, kept for the backward.
//
// Bytes sent per rank: forward (n-1) (K_r + V_r) — (n-1)/n of the global K and V for even chunks;
// backward (n-1) (K_r + V_r + dK_r + dV_r) + (dK_r + dV_r) (the gradients ride with their blocks
// and go home at the end), with K_r the bytes of the travelling block (ring_attention_bytes_sent).
//
// Errors (dtensor::Error naming the op, the shapes and the group): local lengths that are not this
// rank's chunk of seq_len, mismatched shapes or dtypes; transport failures are CommError.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "dtensor/collectives/process_group.h"
#include "kernels/cpu/attention.h"

namespace dtensor::ops {

struct RingAttentionOut {
  Tensor out, lse;
};

RingAttentionOut ring_attention_forward(ProcessGroup& pg, const Tensor& query, const Tensor& key,
                                        const Tensor& value, int64_t seq_len, bool is_causal = false,
                                        std::optional<double> scale = std::nullopt,
                                        Timeout timeout = default_timeout());

// grad_out [..., Lr, Ev]; out and lse from ring_attention_forward on the same inputs. Returns this
// rank's dQ, dK, dV blocks, in the inputs' shapes and dtype.
kernels::AttentionGrads ring_attention_backward(ProcessGroup& pg, const Tensor& grad_out,
                                                const Tensor& query, const Tensor& key,
                                                const Tensor& value, const Tensor& out,
                                                const Tensor& lse, int64_t seq_len,
                                                bool is_causal = false,
                                                std::optional<double> scale = std::nullopt,
                                                Timeout timeout = default_timeout());

// Causal load balancing (head-tail or "zigzag" layout, as in Brandon et al., "Striped Attention",
// 2023, and PyTorch's context_parallel load balancer): the sequence is cut into 2n chunks
// (chunk_range(seq_len, 2n, i)) and rank r holds chunks r and 2n-1-r, concatenated on dim -2, so
// every rank holds as many early (cheap) as late (expensive) causal query rows. The blocks travel the
// ring as in ring_attention_forward; each (query chunk, key chunk) pair that the causal mask leaves
// visible is computed with its global offsets and merged by log-sum-exp. Causal only; forward only
// (no engine rule or placement yet: the caller lays the sequence out, ring_attention_balanced_rows).
// Shapes as ring_attention_forward with Lr = the two chunks' lengths; same bytes formula with those
// block lengths. Errors: as ring_attention_forward.
RingAttentionOut ring_attention_forward_balanced(ProcessGroup& pg, const Tensor& query, const Tensor& key,
                                                 const Tensor& value, int64_t seq_len,
                                                 std::optional<double> scale = std::nullopt,
                                                 Timeout timeout = default_timeout());
// The global rows of rank `rank` of `n` in the head-tail layout, in local order: chunk `rank`, then
// chunk 2n-1-rank, as (start, length) pairs.
std::pair<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>> ring_attention_balanced_rows(int64_t seq_len, int n,
                                                                                                 int rank);

// Bytes rank `rank` of `n` sends in the forward (backward = false) or the backward, for inputs of
// global shape [..., seq_len, E] (key) and [..., seq_len, Ev] (value) with `batch` = numel(...) and
// `elem` bytes per element: the formula above.
int64_t ring_attention_bytes_sent(int64_t batch, int64_t seq_len, int64_t E, int64_t Ev, int64_t elem,
                                  int n, int rank, bool backward);

}  // namespace dtensor::ops

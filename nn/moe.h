// Mixture-of-experts feed-forward layer (dropless token-choice routing, as in Mixtral / torchtitan)
// with expert parallelism on the mesh dim named "ep":
//   router: probs = softmax(x W_r^T) [tokens, E]; each token picks its top_k experts (ties: lower
//           index) and weighs their outputs by its probabilities of them (not renormalized);
//   dispatch: tokens sorted by expert, sent to the rank holding the expert (all_to_all_v over ep,
//           split sizes from an all_gather of the per-expert counts), grouped by local expert;
//   experts: grouped_mm(x, w1[e]) -> gelu(tanh) -> grouped_mm(., w2[e]) with int32 group offsets;
//   combine: the reverse all_to_all_v, then the top_k outputs of each token summed with its weights.
// Parameters: router [E, D] (replicated), w1 [E, D, H] and w2 [E, H, D] (S(0) on "ep": each ep rank
// holds E / ep experts; on the module's tp dim, when it is another dim of more than one rank, w1 S(2)
// and w2 S(1): each expert's FFN split Megatron-style, its output all-reduced over tp). Tokens are split over "ep" on the batch dim
// (the batch must divide by the ep size, else dtensor::Error); the layer's output comes back as the
// input's batch split [S(0) on ep, R elsewhere]. Without an "ep" dim every rank holds every expert.
// aux_loss(): the Switch Transformer load-balancing loss (Fedus et al. 2021, eq. 4),
// E * sum_e f_e P_e over all tokens of the step, f_e the fraction of routed (token, slot) pairs that
// chose e (no gradient) and P_e the mean router probability of e.
#pragma once

#include <optional>

#include "nn/module.h"
#include "nn/parallel.h"

namespace dtensor::nn {

class MoE : public Module {
 public:
  MoE(int64_t dim, int64_t hidden, int64_t experts, int64_t top_k, uint64_t seed);
  DTensor forward(const DTensor& x) override;  // [B, T, D] -> [B, T, D]
  // The load-balancing loss of the last forward (a replicated 0-d DTensor); nullopt before any.
  const std::optional<DTensor>& aux_loss() const { return aux_; }
  int64_t experts() const { return experts_; }
  // Rows (token, slot pairs) this rank sent to / received from other ep ranks in the last forward's
  // dispatch. The combine sends the received ones back, and the backward repeats both exchanges
  // reversed: 2 (sent + received) rows of dim elements leave this rank per step.
  int64_t rows_sent() const { return rows_sent_; }
  int64_t rows_received() const { return rows_received_; }

 private:
  int64_t dim_, hidden_, experts_, top_k_;
  DTensor *router_, *w1_, *w2_;
  std::optional<DTensor> aux_;
  int64_t rows_sent_ = 0, rows_received_ = 0;
};

// The style of MoE modules: w1/w2 S(0) on the mesh dim named "ep" (when the mesh has one), w1 S(2) /
// w2 S(1) on the tp dim (when it is not ep and has more than one rank), everything else replicated; activations pass as they come (the layer splits tokens itself).
struct ExpertParallel : ParallelStyle {
  Placement param_placement(const std::string&, const Module&) const override { return Replicate(); }
  Placements param_placements(const std::string& name, const Module& m, const DeviceMesh& mesh,
                              int tp_dim) const override;
  std::string str() const override { return "ExpertParallel"; }
};

// megatron_plan (nn/parallel.h) for a GPT with MoE blocks: its MLP entries replaced by
// ExpertParallel on "blocks.*.moe".
ParallelPlan moe_plan(bool sequence_parallel, bool loss_parallel);

}  // namespace dtensor::nn

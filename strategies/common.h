// Helpers shared by the per-family rule files.
#pragma once

#include <initializer_list>

#include "ops/registry.h"

namespace dtensor::strategies {

inline Rule row(std::initializer_list<Placement> outputs, std::initializer_list<Placement> inputs,
                uint8_t step = 0) {
  Rule r;
  r.outputs.assign(outputs.begin(), outputs.end());
  r.inputs.assign(inputs.begin(), inputs.end());
  r.step = step;
  return r;
}

// The same placement for every output and every input: e.g. Partial passing through a view.
inline Rule uniform(int n_out, int n_in, Placement p) {
  Rule r;
  r.outputs.assign(n_out, p);
  r.inputs.assign(n_in, p);
  return r;
}

// Rows that pass a Partial(op) straight through, for each op in `ops`.
void add_partial_passthrough(RuleList& rules, int n_out, int n_in,
                             std::initializer_list<ReduceOp> ops);

// Rules of ops linear in their incoming gradient `grad` (the backward ops): P(sum) and P(avg) of
// that input pass with every other input replicated.
void add_linear_in(RuleList& rules, int n_in, int grad);
// Also P(max)/P(min): for ops that only place each gradient element somewhere and write 0 elsewhere
// on every rank (max/min over ranks keep those zeros too).
void add_pass_all(RuleList& rules, int n_in, int grad);
// One output; dims d in `dims` sharded alike on the output and every input.
void add_alike(RuleList& rules, int n_in, const std::vector<int32_t>& dims);

// Output dim of tensor dim `d` of an input of rank `in_rank` broadcast to rank `out_rank`, or -1 when
// that input dim is broadcast (size 1 against a larger output size).
int64_t broadcast_dim(const Shape& in, const Shape& out, int64_t d);

// The Shard rows of a pointwise op whose tensor inputs broadcast to `out`: output dim d sharded
// with every input dim that maps onto it (broadcast dims replicated) (strategies/pointwise.cc).
RuleList pointwise_shard_rules(const OpCall& call, const Shape& out);

// Normalizes a dim argument against a rank (negative counts from the end).
int64_t norm_dim(int64_t d, int64_t rank);

// Rule setters, one per family file; each sets OpDef::rules of the ops it owns.
void register_pointwise_rules(Registry& r);
// The rules of the pointwise tables' ops (ops/pointwise_rows.h), called by register_pointwise_rules.
void register_pointwise_row_rules(Registry& r);
void register_matrix_rules(Registry& r);
void register_reduction_rules(Registry& r);
void register_norm_rules(Registry& r);
void register_embedding_rules(Registry& r);
void register_view_rules(Registry& r);
void register_loss_rules(Registry& r);
void register_scan_rules(Registry& r);
void register_selection_rules(Registry& r);
void register_pooling_rules(Registry& r);
void register_attention_rules(Registry& r);
void register_grouped_mm_rules(Registry& r);
void register_flex_attention_rules(Registry& r);
void register_ring_attention_rules(Registry& r);  // after register_attention_rules

// All of the above, once.
void register_all_rules();

}  // namespace dtensor::strategies

// Helpers shared by the op families' rule files (ops/<family>/rules.cc).
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
// with every input dim that maps onto it (broadcast dims replicated) (ops/pointwise/rules.cc).
RuleList pointwise_shard_rules(const OpCall& call, const Shape& out);

// Normalizes a dim argument against a rank (negative counts from the end).
int64_t norm_dim(int64_t d, int64_t rank);

// Runs the rules part of every linked op family (ops/family.h), once (thread-safe).
void register_all_rules();

}  // namespace dtensor::strategies

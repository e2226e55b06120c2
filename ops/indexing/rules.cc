// index_select: every dim but the indexed one shards through (index replicated); a 1-d index
// sharded gives the output sharded along dim; self sharded along dim gives Partial(sum) pieces
// (each block looks up the indices it holds); any Partial of self passes (a selection of elements).
// index_select_backward: the same dims, grad sharded with its index gives Partial(sum), and
// replicated grad and index give the output sharded along dim (each block its rows).
// index_add: self and source share every dim but the indexed one; self sharded along dim adds the
// rows of its block (source and index replicated); Partial(sum/avg) of self and source together
// passes (linear in both).
#include <functional>

#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

// The rows of a call on a tensor of `rank` dims indexed along dim d: each other dim i sharded on
// the output and on the tensors `with(i)` marks (the others replicated), then `more(d)`; none for a
// 0-d tensor (only the all-Replicate row the engine adds).
template <typename With, typename More>
RuleList indexed_rules(const OpCall& c, size_t rank, int n_in, With with, More more) {
  RuleList rules;
  if (rank == 0) return rules;
  const int32_t d = static_cast<int32_t>(norm_dim(c.get_int("dim"), static_cast<int64_t>(rank)));
  for (int32_t i = 0; i < static_cast<int32_t>(rank); ++i) {
    if (i == d) continue;
    Rule r;
    r.outputs.push_back(Shard(i));
    for (int t = 0; t < n_in; ++t) r.inputs.push_back(with(t) ? Placement(Shard(i)) : Placement(Replicate()));
    rules.push_back(r);
  }
  more(rules, Shard(d));
  return rules;
}

// A row of a scatter: the output's placement, then self's, index's and (with src) src's.
using ScatterRow = std::function<void(Placement, Placement, Placement, Placement)>;

// The rows of scatter_add, scatter and scatter_reduce (tensor inputs self, index and, `with_src`,
// src): every tensor sharded on a dim other than dim where their sizes agree; then `partial(add, d)`
// adds the op's own rows; then self sharded along dim, index and src replicated (a block takes
// what lands in it). None for a 0-d self.
template <typename Partials>
RuleList scatter_rules(const OpCall& c, bool with_src, Partials partial) {
  RuleList rules;
  const Shape& self = c.tensor(0).shape;
  const Shape& index = c.tensor(1).shape;
  if (self.empty()) return rules;
  const int32_t d = static_cast<int32_t>(norm_dim(c.get_int("dim"), static_cast<int64_t>(self.size())));
  const ScatterRow add = [&](Placement out, Placement s, Placement i, Placement r) {
    Rule x;
    x.outputs.push_back(out);
    x.inputs = {s, i};
    if (with_src) x.inputs.push_back(r);
    rules.push_back(x);
  };
  for (int32_t i = 0; i < static_cast<int32_t>(self.size()); ++i)
    if (i != d && self[i] == index[i] && (!with_src || index[i] == c.tensor(2).shape[i]))
      add(Shard(i), Shard(i), Shard(i), Shard(i));
  partial(add, d);
  add(Shard(d), Shard(d), Replicate(), Replicate());
  return rules;
}

void register_indexing_rules(Registry& reg) {
  // Tensor inputs: self, index.
  reg.mutable_find("index_select").rules = [](const OpCall& c, const OutMeta&) {
    return indexed_rules(
        c, c.tensor(0).shape.size(), 2, [](int t) { return t == 0; },
        [&](RuleList& rules, Placement sd) {
          if (c.tensor(1).shape.size() == 1) rules.push_back(row({sd}, {Replicate(), Shard(0)}));
          rules.push_back(row({Partial()}, {sd, Replicate()}));
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin})
            rules.push_back(row({Partial(op)}, {Partial(op), Replicate()}));
        });
  };
  // Tensor inputs: grad, index.
  reg.mutable_find("index_select_backward").rules = [](const OpCall& c, const OutMeta& out) {
    return indexed_rules(
        c, out[0].shape.size(), 2, [](int t) { return t == 0; },
        [&](RuleList& rules, Placement sd) {
          if (c.tensor(1).shape.size() == 1) rules.push_back(row({Partial()}, {sd, Shard(0)}));
          rules.push_back(row({sd}, {Replicate(), Replicate()}));
          add_linear_in(rules, 2, 0);
        });
  };
  // Tensor inputs: self, index, source.
  reg.mutable_find("index_add").rules = [](const OpCall& c, const OutMeta&) {
    return indexed_rules(
        c, c.tensor(0).shape.size(), 3, [](int t) { return t != 1; },
        [](RuleList& rules, Placement sd) {
          rules.push_back(row({sd}, {sd, Replicate(), Replicate()}));
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg})
            rules.push_back(row({Partial(op)}, {Partial(op), Replicate(), Partial(op)}));
        });
  };
  // Tensor inputs: self, index. The output has index's shape: index sharded along dim shards it
  // (self replicated; along another dim a block's positions would not be self's); self and index
  // sharded together on a dim other than dim where their sizes agree (same chunks); self sharded along dim gives Partial(sum) (each block reads the indices
  // it holds); Partial self passes (a selection of elements).
  reg.mutable_find("gather").rules = [](const OpCall& c, const OutMeta&) {
    RuleList rules;
    const Shape& self = c.tensor(0).shape;
    const Shape& index = c.tensor(1).shape;
    if (self.empty()) return rules;
    const int32_t d = static_cast<int32_t>(norm_dim(c.get_int("dim"), static_cast<int64_t>(self.size())));
    for (int32_t i = 0; i < static_cast<int32_t>(self.size()); ++i)
      if (i != d && self[i] == index[i]) rules.push_back(row({Shard(i)}, {Shard(i), Shard(i)}));
    rules.push_back(row({Shard(d)}, {Replicate(), Shard(d)}));
    rules.push_back(row({Partial()}, {Shard(d), Replicate()}));
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin})
      rules.push_back(row({Partial(op)}, {Partial(op), Replicate()}));
    return rules;
  };
  // Tensor inputs: self, index, src. All three sharded on a dim other than dim where their sizes
  // agree; self sharded along dim adds what lands in its block (index and src replicated);
  // Partial(sum) self with index and src sharded together along dim (each rank adds its part of
  // the contributions to its piece; along another dim the blocks' positions would not be self's);
  // Partial(sum/avg) self and src together (linear in both).
  reg.mutable_find("scatter_add").rules = [](const OpCall& c, const OutMeta&) {
    return scatter_rules(c, true, [&](const ScatterRow& add, int32_t d) {
      if (c.tensor(1).shape[d] == c.tensor(2).shape[d]) add(Partial(), Partial(), Shard(d), Shard(d));
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) add(Partial(op), Partial(op), Replicate(), Partial(op));
    });
  };
  // scatter.src (self, index, src) / scatter.value (self, index): the sharded rows of scatter_add
  // but no Partial(sum) from an index sharded along dim (a rank's piece keeps self where another
  // rank writes). The written elements replace self's, every rank writing the same positions: a
  // Partial(op) self with a Partial(op) src passes every op (piece by piece, each element is self's
  // or src's), and with a replicated src or the value, the ops that give c from c on every rank
  // (avg, max, min).
  for (bool value : {false, true})
    reg.mutable_find(value ? "scatter.value" : "scatter.src").rules = [value](const OpCall& c, const OutMeta&) {
      return scatter_rules(c, !value, [&](const ScatterRow& add, int32_t) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
          if (!value) add(Partial(op), Partial(op), Replicate(), Partial(op));
          if (op != ReduceOp::kSum) add(Partial(op), Partial(op), Replicate(), Replicate());
        }
      });
    };
  // scatter_reduce.two (self, index, src): scatter_add's sharded rows; Partial(sum/avg) self and src
  // together for sum and a floating mean (linear in both, the counts fixed by the index; an integer
  // mean rounds down, which does not add up over pieces), Partial(max) for amax and Partial(min) for
  // amin, also with a replicated src (a max of maxes); none for prod.
  reg.mutable_find("scatter_reduce.two").rules = [](const OpCall& c, const OutMeta&) {
    const std::string r = c.get_str("reduce");
    return scatter_rules(c, true, [&](const ScatterRow& add, int32_t) {
      if (r == "sum" || (r == "mean" && is_floating(c.tensor(0).dtype)))
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) add(Partial(op), Partial(op), Replicate(), Partial(op));
      if (r == "amax" || r == "amin") {
        const ReduceOp op = r == "amax" ? ReduceOp::kMax : ReduceOp::kMin;
        add(Partial(op), Partial(op), Replicate(), Partial(op));
        add(Partial(op), Partial(op), Replicate(), Replicate());
      }
    });
  };
}

}  // namespace

DTENSOR_FAMILY_PART("indexing", kRules, register_indexing_rules);

}  // namespace dtensor::strategies

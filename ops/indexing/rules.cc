// index_select: every dim but the indexed one shards through (index replicated); a 1-d index
// sharded gives the output sharded along dim; self sharded along dim gives Partial(sum) pieces
// (each block looks up the indices it holds); any Partial of self passes (a selection of elements).
// index_select_backward: the same dims, grad sharded with its index gives Partial(sum), and
// replicated grad and index give the output sharded along dim (each block its rows).
// index_add: self and source share every dim but the indexed one; self sharded along dim adds the
// rows of its block (source and index replicated); Partial(sum/avg) of self and source together
// passes (linear in both).
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

void register_indexing_rules(Registry& reg) {
  reg.mutable_find("index_select").rules = [](const OpCall& c, const OutMeta&) {
    RuleList rules;
    const int32_t rank = static_cast<int32_t>(c.tensor(0).shape.size());
    if (rank == 0) return rules;
    const int32_t d = static_cast<int32_t>(norm_dim(c.get_int("dim"), rank));
    for (int32_t i = 0; i < rank; ++i)
      if (i != d) rules.push_back(row({Shard(i)}, {Shard(i), Replicate()}));
    if (c.tensor(1).shape.size() == 1) rules.push_back(row({Shard(d)}, {Replicate(), Shard(0)}));
    rules.push_back(row({Partial()}, {Shard(d), Replicate()}));
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin})
      rules.push_back(row({Partial(op)}, {Partial(op), Replicate()}));
    return rules;
  };
  reg.mutable_find("index_select_backward").rules = [](const OpCall& c, const OutMeta& out) {
    RuleList rules;
    const int32_t rank = static_cast<int32_t>(out[0].shape.size());
    if (rank == 0) return rules;
    const int32_t d = static_cast<int32_t>(norm_dim(c.get_int("dim"), rank));
    for (int32_t i = 0; i < rank; ++i)
      if (i != d) rules.push_back(row({Shard(i)}, {Shard(i), Replicate()}));
    if (c.tensor(1).shape.size() == 1) rules.push_back(row({Partial()}, {Shard(d), Shard(0)}));
    rules.push_back(row({Shard(d)}, {Replicate(), Replicate()}));
    add_linear_in(rules, 2, 0);
    return rules;
  };
  reg.mutable_find("index_add").rules = [](const OpCall& c, const OutMeta&) {
    RuleList rules;
    const int32_t rank = static_cast<int32_t>(c.tensor(0).shape.size());
    if (rank == 0) return rules;
    const int32_t d = static_cast<int32_t>(norm_dim(c.get_int("dim"), rank));
    for (int32_t i = 0; i < rank; ++i)
      if (i != d) rules.push_back(row({Shard(i)}, {Shard(i), Replicate(), Shard(i)}));
    rules.push_back(row({Shard(d)}, {Shard(d), Replicate(), Replicate()}));
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg})
      rules.push_back(row({Partial(op)}, {Partial(op), Replicate(), Partial(op)}));
    return rules;
  };
}

}  // namespace

DTENSOR_FAMILY_PART("indexing", kRules, register_indexing_rules);

}  // namespace dtensor::strategies

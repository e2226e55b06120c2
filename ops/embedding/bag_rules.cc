// Single-mesh-dim rules of _embedding_bag (bag_defs.cc); tensor inputs (weight, indices, offsets,
// per_sample_weights?), outputs (output, offset2bag, bag_size, max_indices):
//   columns   [S(1), R, R, S(1) for max else R] <- [S(1), R, R, R]: each rank reduces its columns
//   rows      [P(sum), R, R, R] <- [S(0), R, R, R] for sum and mean: each rank adds the rows it holds
//             (mean divides by the whole bag's count), the shards' outputs add up; the bookkeeping
//             outputs come from the whole indices, alike on every rank
//   Partial   sum and mean are linear in the weight, and sum in per_sample_weights: P(sum/avg) passes
// Indices and offsets stay whole (their bags cannot be split without moving the bag boundaries).
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

void register_embedding_bag_rules(Registry& reg) {
  reg.mutable_find("_embedding_bag").rules = [](const OpCall& c, const OutMeta&) {
    const int64_t mode = c.get_int("mode");
    const int n_in = c.num_tensors();
    const int psw = c.tensor_index("per_sample_weights");
    auto rule = [&](Placement out, Placement max_idx, Placement w, Placement p) {
      Rule r;
      r.outputs = {out, Replicate(), Replicate(), max_idx};
      r.inputs.assign(n_in, Replicate());
      r.inputs[0] = w;
      if (psw >= 0) r.inputs[psw] = p;
      return r;
    };
    RuleList rules;
    rules.push_back(rule(Shard(1), mode == 2 ? Shard(1) : Replicate(), Shard(1), Replicate()));
    if (mode != 2) {
      rules.push_back(rule(Partial(), Replicate(), Shard(0), Replicate()));
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        rules.push_back(rule(Partial(op), Replicate(), Partial(op), Replicate()));
        if (psw >= 0) rules.push_back(rule(Partial(op), Replicate(), Replicate(), Partial(op)));
      }
    }
    return rules;
  };
}

}  // namespace

DTENSOR_FAMILY_PART("embedding", kRules, register_embedding_bag_rules);

}  // namespace dtensor::strategies

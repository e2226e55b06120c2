// embedding(weight[V, D], indices[...]) -> [..., D] (DESIGN §4; PyTorch DTensor's rules):
//   column-wise  [S(r), S(1), R]   (r = rank of indices: the output's last dim)
//   row-wise     [P(sum), S(0), R] (a masked partial: rows outside a rank's shard give zeros)
//   batch        [S(d), R, S(d)]   for each dim d of indices.
#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {

void register_embedding_rules(Registry& reg) {
  reg.mutable_find("embedding").rules = [](const OpCall& c, const OutMeta&) {
    const int32_t r = static_cast<int32_t>(c.tensor(1).shape.size());
    RuleList rules;
    rules.push_back(row({Shard(r)}, {Shard(1), Replicate()}));
    rules.push_back(row({Partial()}, {Shard(0), Replicate()}));
    for (int32_t d = 0; d < r; ++d) rules.push_back(row({Shard(d)}, {Replicate(), Shard(d)}));
    return rules;
  };

  // embedding_dense_backward (ops/embedding/backward_defs.cc): grad_output S(d), indices S(d)
  // (d < indices.dim) -> P(sum): each rank's lookups add up; grad_output S(last), indices R -> S(1).
  // A rule never makes a shard out of replicated inputs only (e.g. embedding rows): the greedy
  // selection would take it for free and pay for it in the next op.
  reg.mutable_find("embedding_dense_backward").rules = [](const OpCall& c, const OutMeta&) {
    const int32_t ri = static_cast<int32_t>(c.tensor(1).shape.size());
    RuleList rules;
    for (int32_t d = 0; d < ri; ++d) rules.push_back(row({Partial()}, {Shard(d), Shard(d)}));
    rules.push_back(row({Shard(1)}, {Shard(ri), Replicate()}));
    add_linear_in(rules, 2, 0);
    return rules;
  };
}

DTENSOR_FAMILY_PART("embedding", kRules, register_embedding_rules);

}  // namespace dtensor::strategies

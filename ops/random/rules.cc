// Random draws: each block draws the elements at its global positions, so self sharded along any
// dim gives the output sharded alike; a Partial self (only its shape matters) gives a Replicate
// draw. philox_dropout multiplies by a mask and a scale >= 0 that are the same on every rank, so
// every Partial of its input passes to the output (sum and avg as a linear map, max and min as a
// nonnegative one), the mask being Replicate. native_dropout_backward: grad and mask sharded
// alike; Partial(sum/avg) of the gradient passes (linear in it).
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

RuleList draw_rules(const OpCall& c, const OutMeta&) {
  RuleList rules;
  for (int32_t d = 0; d < static_cast<int32_t>(c.tensor(0).shape.size()); ++d) rules.push_back(row({Shard(d)}, {Shard(d)}));
  for (ReduceOp op : kAllReduceOps) rules.push_back(row({Replicate()}, {Partial(op)}));
  return rules;
}

void register_random_rules(Registry& reg) {
  for (const char* name : {"philox_rand_like", "philox_randn_like", "philox_bernoulli"})
    reg.mutable_find(name).rules = draw_rules;
  reg.mutable_find("philox_dropout").rules = [](const OpCall& c, const OutMeta&) {
    RuleList rules;
    for (int32_t d = 0; d < static_cast<int32_t>(c.tensor(0).shape.size()); ++d)
      rules.push_back(row({Shard(d), Shard(d)}, {Shard(d)}));
    for (ReduceOp op : kAllReduceOps) rules.push_back(row({Partial(op), Replicate()}, {Partial(op)}));
    return rules;
  };
  reg.mutable_find("native_dropout_backward").rules = [](const OpCall& c, const OutMeta& out) {
    RuleList rules = pointwise_shard_rules(c, out[0].shape);
    add_linear_in(rules, 2, 0);
    return rules;
  };
}

}  // namespace

DTENSOR_FAMILY_PART("random", kRules, register_random_rules);

}  // namespace dtensor::strategies

// Sharding rules of the pointwise rows (ops/pointwise/rows.h): every row shards like any pointwise
// op (pointwise_shard_rules); Partial(max)/Partial(min) pass through a monotone row (swapped when
// decreasing), since f(max_i a_i) = max_i f(a_i) for a non-decreasing f. No row is linear, so
// Partial(sum)/Partial(avg) never pass: the inputs are made Replicate first.
#include "ops/pointwise/rows.h"
#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {

namespace {

// The rules of a one-input row of this order.
RuleFn one_input_rules(RowOrder order) {
  return [order](const OpCall& call, const OutMeta& out) {
    RuleList rules = pointwise_shard_rules(call, out[0].shape);
    if (order == RowOrder::kNone) return rules;
    const bool swap = order == RowOrder::kDecreasing;
    rules.push_back(row({Partial(swap ? ReduceOp::kMin : ReduceOp::kMax)}, {Partial(ReduceOp::kMax)}));
    rules.push_back(row({Partial(swap ? ReduceOp::kMax : ReduceOp::kMin)}, {Partial(ReduceOp::kMin)}));
    return rules;
  };
}

}  // namespace

void register_pointwise_row_rules(Registry& reg) {
  for (const UnaryRowInfo& info : kUnaryRows) reg.mutable_find(info.name).rules = one_input_rules(info.order);
  for (const ParamRowInfo& info : kParamRows) reg.mutable_find(info.name).rules = one_input_rules(info.order);
  for (const BinaryRowInfo& info : kBinaryRows)
    reg.mutable_find(info.name).rules = [](const OpCall& call, const OutMeta& out) {
      return pointwise_shard_rules(call, out[0].shape);
    };
}

DTENSOR_FAMILY_PART("pointwise", kRules, register_pointwise_row_rules);

}  // namespace dtensor::strategies

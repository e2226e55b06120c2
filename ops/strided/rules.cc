// Single-mesh-dim rules of as_strided and resize_ (defs.cc): their size, stride and offset
// numbers address the whole tensor's row-major storage, which no block of it holds under its own
// numbering, so no Shard row is offered (a sharded input is gathered). Each output element is one
// input element or (resize_ growing) a 0 on every rank: a selection, so Partial of any kind passes.
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

void register_strided_rules(Registry& reg) {
  for (const char* name : {"as_strided", "resize_"})
    reg.mutable_find(name).rules = [](const OpCall&, const OutMeta&) {
      RuleList rules;
      add_partial_passthrough(rules, 1, 1, {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin});
      return rules;
    };
}

}  // namespace

DTENSOR_FAMILY_PART("strided", kRules, register_strided_rules);

}  // namespace dtensor::strategies

// Rules of the complex family. view_as_real / view_as_complex keep every shard of a dim they keep
// (the pair dim, last, is whole); real, imag, the conjugates and complex(real, imag) are pointwise.
// All are linear over the reals, so Partial(sum) and Partial(avg) pass (for complex(real, imag): on
// both inputs together). No Partial(max/min): complex numbers have no order.
#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {

void register_complex_rules(Registry& reg) {
  auto same_dims = [](int64_t rank) {
    RuleList rules;
    for (int64_t d = 0; d < rank; ++d) rules.push_back(uniform(1, 1, Shard(static_cast<int32_t>(d))));
    add_partial_passthrough(rules, 1, 1, {ReduceOp::kSum, ReduceOp::kAvg});
    return rules;
  };
  for (const char* name : {"view_as_real", "real", "imag", "conj_physical", "_conj"})
    reg.mutable_find(name).rules = [same_dims](const OpCall& c, const OutMeta&) {
      return same_dims(static_cast<int64_t>(c.tensor(0).shape.size()));
    };
  reg.mutable_find("view_as_complex").rules = [same_dims](const OpCall& c, const OutMeta&) {
    return same_dims(static_cast<int64_t>(c.tensor(0).shape.size()) - 1);  // not the pair dim
  };
  reg.mutable_find("complex").rules = [](const OpCall& c, const OutMeta& out) {
    RuleList rules = pointwise_shard_rules(c, out[0].shape);
    add_partial_passthrough(rules, 1, 2, {ReduceOp::kSum, ReduceOp::kAvg});
    return rules;
  };
}

DTENSOR_FAMILY_PART("complex", kRules, register_complex_rules);

}  // namespace dtensor::strategies

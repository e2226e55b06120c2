// nonzero: self replicated gives the output replicated (the plain kernel); self sharded along any dim
// gives the output replicated through the step that gathers every rank's rows (nonzero_steps.cc), so
// self is never gathered. No Partial row: nonzero is not linear (the engine reduces a Partial self
// first). The output's row count is data-dependent (OpDef::data_dependent): no row shards it.
#include "ops/common/steps.h"
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

void register_nonzero_rules(Registry& reg) {
  OpDef& op = reg.mutable_find("nonzero");
  const uint8_t gather = ops::step_id(op, "nonzero_gather");
  op.rules = [gather](const OpCall& c, const OutMeta&) {
    RuleList rules;
    for (int32_t d = 0; d < static_cast<int32_t>(c.tensor(0).shape.size()); ++d) {
      Rule r;
      r.outputs.push_back(Replicate());
      r.inputs.push_back(Shard(d));
      r.step = gather;
      rules.push_back(r);
    }
    return rules;
  };
}

}  // namespace

DTENSOR_FAMILY_PART("indexing", kRules, register_nonzero_rules);

}  // namespace dtensor::strategies

// nll_loss and cross_entropy over a batch-sharded input: reduction 'none' keeps the batch shard and
// 'sum' gives P(sum). 'mean' divides by a global count (of non-ignored targets, or their weights)
// that no rank has locally, so it runs replicated.
#include "ops/defs/steps.h"
#include "strategies/common.h"

namespace dtensor::strategies {

void register_loss_rules(Registry& reg) {
  for (const char* name : {"nll_loss", "cross_entropy"}) {
    reg.mutable_find(name).rules = [](const OpCall& c) {
      RuleList rules;
      std::string red = c.get_str("reduction");
      if (c.tensor(0).shape.size() < 2 || red == "mean") return rules;
      Rule r;
      r.outputs.push_back(red == "none" ? Shard(0) : Partial());
      r.inputs = {Shard(0), Shard(0)};
      if (c.num_tensors() > 2) r.inputs.push_back(Replicate());  // class weights
      rules.push_back(r);
      return rules;
    };
  }
  // Loss parallel (DESIGN §6): logits sharded over the classes, targets and class weights replicated;
  // only per-row scalars are all-reduced. Any reduction; the result is replicated.
  OpDef& ce = reg.mutable_find("cross_entropy");
  const uint8_t lp = ops::step_id(ce, "loss_parallel");
  RuleFn base = ce.rules;
  ce.rules = [base, lp](const OpCall& c) {
    RuleList rules = base(c);
    if (c.tensor(0).shape.size() != 2) return rules;
    Rule r;
    r.outputs.push_back(Replicate());
    r.inputs = {Shard(1), Replicate()};
    if (c.num_tensors() > 2) r.inputs.push_back(Replicate());
    r.step = lp;
    rules.push_back(r);
    return rules;
  };
}

}  // namespace dtensor::strategies

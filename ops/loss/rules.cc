// nll_loss and cross_entropy over a batch-sharded input: reduction 'none' keeps the batch shard and
// 'sum' gives P(sum). 'mean' divides by a global count (of non-ignored targets, or their weights)
// that no rank has locally, so it runs replicated.
#include "ops/common/steps.h"
#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {

void register_loss_rules(Registry& reg) {
  for (const char* name : {"nll_loss", "cross_entropy"}) {
    reg.mutable_find(name).rules = [](const OpCall& c, const OutMeta&) {
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
  ce.rules = [base, lp](const OpCall& c, const OutMeta& out) {
    RuleList rules = base(c, out);
    if (c.tensor(0).shape.size() != 2) return rules;
    Rule r;
    r.outputs.push_back(Replicate());
    r.inputs = {Shard(1), Replicate()};
    if (c.num_tensors() > 2) r.inputs.push_back(Replicate());
    r.step = lp;
    rules.push_back(r);
    return rules;
  };

  // nll_loss_backward (ops/loss/backward_defs.cc), self [N, C]: 'none': all S(0) (weight R);
  // 'sum': grad_output R, self S(0), target S(0) -> S(0); 'mean': grad_output R, self S(0), target R
  // -> S(0) (the divisor needs every target); any reduction: self S(1) (classes), the rest R -> S(1).
  // (self [C]: the class row only.)
  reg.mutable_find("nll_loss_backward").rules = [](const OpCall& c, const OutMeta&) {
    const bool two_d = c.tensor(1).shape.size() == 2;
    const std::string red = c.get_str("reduction");
    const int n_in = c.num_tensors();  // weight (3), when given, stays replicated
    RuleList rules;
    auto add = [&](Placement out, Placement grad, Placement self, Placement target) {
      Rule r;
      r.outputs.push_back(out);
      r.inputs.assign(n_in, Replicate());
      r.inputs[0] = grad;
      r.inputs[1] = self;
      r.inputs[2] = target;
      rules.push_back(r);
    };
    const Placement R = Replicate();
    if (two_d) {
      // One kind of batch row per reduction: a target sharded on one mesh dim and replicated on
      // another would not line up with self's nested row blocks.
      if (red == "none") add(Shard(0), Shard(0), Shard(0), Shard(0));
      if (red == "sum") add(Shard(0), R, Shard(0), Shard(0));
      if (red == "mean") add(Shard(0), R, Shard(0), R);
      add(Shard(1), R, Shard(1), R);
    } else {
      add(Shard(0), R, Shard(0), R);
    }
    add_linear_in(rules, n_in, 0);
    return rules;
  };
}

DTENSOR_FAMILY_PART("loss", kRules, register_loss_rules);

}  // namespace dtensor::strategies

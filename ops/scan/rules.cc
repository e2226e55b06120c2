// Scans along a dim (DESIGN §6). Shards on other dims pass through; cumsum is linear, so P(sum) and
// P(avg) pass. A shard on the scanned dim keeps it sharded with the carry exchange (PyTorch
// replicates it): values and indices share the input's placement, indices are never Partial.
#include "ops/common/steps.h"
#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {

void register_scan_rules(Registry& reg) {
  for (const char* name : {"cumsum", "cumprod", "logcumsumexp", "cummax", "cummin"}) {
    OpDef& op = reg.mutable_find(name);
    const uint8_t carry = ops::step_id(op, "carry_exchange");
    const bool linear = std::string(name) == "cumsum";
    op.rules = [carry, linear](const OpCall& c, const OutMeta& out) {
      const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
      const int64_t dim = norm_dim(c.get_int("dim"), rank);
      const int n_out = static_cast<int>(out.size());
      RuleList rules;
      for (int64_t d = 0; d < rank; ++d) {
        Rule r = uniform(n_out, 1, Shard(static_cast<int32_t>(d)));
        if (d == dim) r.step = carry;
        rules.push_back(r);
      }
      if (linear) add_partial_passthrough(rules, 1, 1, {ReduceOp::kSum, ReduceOp::kAvg});
      return rules;
    };
  }

  // cummaxmin/cumprod/logcumsumexp_backward (ops/scan/backward_defs.cc): shards of the other
  // dims on all three tensors; linear in the gradient.
  for (const char* name : {"cummaxmin_backward", "cumprod_backward", "logcumsumexp_backward"}) {
    reg.mutable_find(name).rules = [](const OpCall& c, const OutMeta&) {
      const int64_t rank = static_cast<int64_t>(c.tensor(1).shape.size());
      RuleList rules;
      if (rank > 0) {
        const int64_t dim = norm_dim(c.get_int("dim"), rank);
        std::vector<int32_t> others;
        for (int64_t d = 0; d < rank; ++d)
          if (d != dim) others.push_back(static_cast<int32_t>(d));
        add_alike(rules, 3, others);
      }
      add_linear_in(rules, 3, 0);
      return rules;
    };
  }
}

DTENSOR_FAMILY_PART("scan", kRules, register_scan_rules);

}  // namespace dtensor::strategies

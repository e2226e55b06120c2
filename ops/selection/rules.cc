// Value-selecting reductions (DESIGN §6). Shards on kept dims pass (renumbered without keepdim);
// values and indices share one placement and indices are never Partial. A shard on the reduced dim
// (any dim, for argmax/argmin over the whole tensor) leaves the op replicated on that mesh dim
// through its distributed step: the candidate gather for max/min/argmax/argmin (PyTorch
// replicates the input instead).
#include "ops/common/steps.h"
#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {
namespace {

RuleList selection_rules(const OpCall& c, int n_out, uint8_t step, bool has_dim) {
  const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
  const bool keep = c.op().schema.index_of("keepdim") >= 0 && c.get_bool("keepdim");
  RuleList rules;
  if (!has_dim) {
    for (int64_t d = 0; d < rank && step; ++d) {
      Rule r = uniform(n_out, 1, Replicate());
      r.inputs[0] = Shard(static_cast<int32_t>(d));
      r.step = step;
      rules.push_back(r);
    }
    return rules;
  }
  const int64_t dim = norm_dim(c.get_int("dim"), rank);
  for (int64_t d = 0; d < rank; ++d) {
    if (d == dim) {
      if (!step) continue;
      Rule r = uniform(n_out, 1, Replicate());
      r.inputs[0] = Shard(static_cast<int32_t>(d));
      r.step = step;
      rules.push_back(r);
      continue;
    }
    int64_t od = keep || d < dim ? d : d - 1;
    Rule r = uniform(n_out, 1, Shard(static_cast<int32_t>(od)));
    r.inputs[0] = Shard(static_cast<int32_t>(d));
    rules.push_back(r);
  }
  return rules;
}

uint8_t find_step(const OpDef& op, const char* name) {
  for (size_t i = 0; i < op.steps.size(); ++i)
    if (op.steps[i].name == name) return static_cast<uint8_t>(i + 1);
  return 0;
}

}  // namespace

void register_selection_rules(Registry& reg) {
  for (const char* name : {"max.dim", "min.dim", "argmax", "argmin", "median", "median.dim", "nanmedian",
                           "nanmedian.dim", "kthvalue"}) {
    OpDef& op = reg.mutable_find(name);
    uint8_t step = find_step(op, "candidate_gather");
    if (!step) step = find_step(op, "select");
    op.rules = [step](const OpCall& c, const OutMeta& out) {
      return selection_rules(c, static_cast<int>(out.size()), step,
                             c.op().schema.index_of("dim") >= 0 && c.has("dim"));
    };
  }

  // value_selecting_reduction_backward (ops/selection/backward_defs.cc): shards of the kept dims
  // on grad and indices, mapped; every Partial op of the gradient passes (each element is placed
  // once, 0 elsewhere on every rank).
  reg.mutable_find("value_selecting_reduction_backward").rules = [](const OpCall& c, const OutMeta&) {
    const int64_t rank = static_cast<int64_t>(c.get_int_list("sizes").size());
    const bool keep = c.get_bool("keepdim");
    RuleList rules;
    if (rank > 0) {
      const int64_t dim = norm_dim(c.get_int("dim"), rank);
      for (int64_t d = 0; d < rank; ++d) {
        if (d == dim) continue;
        const int32_t gd = static_cast<int32_t>(keep || d < dim ? d : d - 1);
        rules.push_back(row({Shard(static_cast<int32_t>(d))}, {Shard(gd), Shard(gd)}));
      }
    }
    add_pass_all(rules, 2, 0);
    return rules;
  };
}

DTENSOR_FAMILY_PART("selection", kRules, register_selection_rules);

}  // namespace dtensor::strategies

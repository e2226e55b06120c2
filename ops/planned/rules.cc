// Single-mesh-dim rules of the planned family (defs.cc documents each op's rows).
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

void register_planned_rules(Registry& reg) {
  reg.mutable_find("batch_norm").rules = [](const OpCall& c, const OutMeta&) {
    const int n_in = c.num_tensors();
    const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
    RuleList rules;
    Rule ch;
    ch.outputs = {Shard(1)};
    ch.inputs.assign(n_in, Shard(0));
    ch.inputs[0] = Shard(1);
    rules.push_back(ch);
    for (int64_t d = 0; d < rank; ++d) {
      if (d == 1) continue;
      Rule r;
      r.outputs = {Shard(static_cast<int32_t>(d))};
      r.inputs.assign(n_in, Replicate());
      r.inputs[0] = Shard(static_cast<int32_t>(d));
      if (c.get_bool("training")) r.step = 1;
      rules.push_back(r);
    }
    return rules;
  };
  reg.mutable_find("moe_dispatch").rules = [](const OpCall&, const OutMeta&) {
    RuleList r;
    Rule tok = row({Shard(1)}, {Shard(0), Shard(0)});
    tok.even_input0 = 1u;
    tok.even_output0 = 1u << 1;
    r.push_back(tok);
    r.push_back(row({Shard(2)}, {Shard(1), Replicate()}));
    r.push_back(row({Shard(0)}, {Replicate(), Replicate()}));
    r.push_back(row({Partial()}, {Partial(), Replicate()}));
    return r;
  };
  reg.mutable_find("moe_combine").rules = [](const OpCall&, const OutMeta&) {
    RuleList r;
    Rule tok = row({Shard(0)}, {Shard(1), Shard(0)});
    tok.even_input0 = 1u << 1;
    tok.even_output0 = 1u;
    r.push_back(tok);
    r.push_back(row({Shard(1)}, {Shard(2), Replicate()}));
    r.push_back(row({Partial()}, {Shard(0), Replicate()}));
    r.push_back(row({Partial()}, {Partial(), Replicate()}));
    return r;
  };
  reg.mutable_find("pad").rules = [](const OpCall& c, const OutMeta&) {
    const std::vector<int64_t> p = c.get_int_list("pad");
    const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
    RuleList rules;
    for (int64_t d = 0; d < rank; ++d) {
      const size_t i = static_cast<size_t>(2 * (rank - 1 - d));
      if (i + 1 < p.size() && (p[i] != 0 || p[i + 1] != 0)) continue;
      rules.push_back(row({Shard(static_cast<int32_t>(d))}, {Shard(static_cast<int32_t>(d))}));
    }
    return rules;
  };
}

}  // namespace

DTENSOR_FAMILY_PART("planned", kRules, register_planned_rules);

}  // namespace dtensor::strategies

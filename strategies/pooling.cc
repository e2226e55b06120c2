// Pooling (DESIGN §6; PyTorch DTensor's batch and channel rules). Batch and channel shards pass;
// avg pooling is linear, so P(sum) and P(avg) pass, max pooling takes no Partial; values and indices
// share one placement. A shard on a spatial dim stays sharded through the halo exchange (PyTorch
// replicates it): neighbours send the rows the local windows read, nothing when shard boundaries fall
// on window boundaries.
#include "ops/defs/steps.h"
#include "strategies/common.h"

namespace dtensor::strategies {

void register_pooling_rules(Registry& reg) {
  for (const std::string& name : reg.names()) {
    OpDef& op = reg.mutable_find(name);
    if (op.family != "pooling") continue;
    const bool is_avg = name.find("avg") != std::string::npos;
    const int dims = name.find("1d") != std::string::npos ? 1 : name.find("3d") != std::string::npos ? 3 : 2;
    const uint8_t halo = ops::step_id(op, "halo_exchange");
    op.rules = [is_avg, dims, halo](const OpCall& c) {
      const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
      const int n_out = static_cast<int>(c.op().meta(c).size());
      RuleList rules;
      for (int64_t d = 0; d < rank; ++d) {
        Rule r = uniform(n_out, 1, Shard(static_cast<int32_t>(d)));
        if (d >= rank - dims) r.step = halo;
        rules.push_back(r);
      }
      if (is_avg) add_partial_passthrough(rules, 1, 1, {ReduceOp::kSum, ReduceOp::kAvg});
      return rules;
    };
  }
}

}  // namespace dtensor::strategies

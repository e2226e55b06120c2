// Pooling (DESIGN §6; PyTorch DTensor's batch and channel rules). Batch and channel shards pass;
// avg pooling is linear, so P(sum) and P(avg) pass, max pooling takes no Partial; values and indices
// share one placement. A shard on a spatial dim stays sharded through the halo exchange (PyTorch
// replicates it): neighbours send the rows the local windows read, nothing when shard boundaries fall
// on window boundaries.
#include "ops/common/steps.h"
#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {
namespace {

// (op name, spatial dims) of the forward pooling ops, or of their backward ops.
std::vector<std::pair<std::string, int>> pooling_ops(bool backward) {
  std::vector<std::pair<std::string, int>> ops;
  const std::string suffix = backward ? "_backward" : "";
  for (int dims : {1, 2, 3}) {
    const std::string d = std::to_string(dims);
    ops.push_back({"avg_pool" + d + "d" + suffix, dims});
    ops.push_back({"max_pool" + d + "d_with_indices" + suffix, dims});
  }
  for (int dims : {1, 2, 3}) ops.push_back({"adaptive_avg_pool" + std::to_string(dims) + "d" + suffix, dims});
  return ops;
}

}  // namespace

void register_pooling_rules(Registry& reg) {
  for (const auto& [name, dims_] : pooling_ops(false)) {
    OpDef& op = reg.mutable_find(name);
    const bool is_avg = name.find("avg") != std::string::npos;
    const int dims = dims_;
    const uint8_t halo = ops::step_id(op, "halo_exchange");
    op.rules = [is_avg, dims, halo](const OpCall& c, const OutMeta& out) {
      const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
      const int n_out = static_cast<int>(out.size());
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

  // Pooling backward ops (ops/pooling/backward_defs.cc): batch and channel dims sharded alike on
  // grad_output, self (indices) and the result; a spatial dim sharded alike on all of them stays
  // sharded through the backward halo exchange (PyTorch replicates it): each rank sends the partial
  // sums of its neighbours' halo rows back to them. (A P(sum) row -- each rank's output rows into
  // the whole input -- is valid too but not listed: greedy selection would take it for free and pay
  // a reduce-scatter of the whole input in the next op.) Linear in the gradient; no P(max)/P(min),
  // since several gradient elements add into one place.
  for (const auto& [name, dims_] : pooling_ops(true)) {
    OpDef& op = reg.mutable_find(name);
    const int dims = dims_;
    const uint8_t halo = ops::step_id(op, "halo_exchange");
    op.rules = [dims, halo](const OpCall& c, const OutMeta&) {
      const int32_t lead = static_cast<int32_t>(c.tensor(1).shape.size()) - dims;
      std::vector<int32_t> batch;
      for (int32_t d = 0; d < lead; ++d) batch.push_back(d);
      RuleList rules;
      add_alike(rules, c.num_tensors(), batch);
      // A spatial dim sharded alike on every input stays sharded through the backward halo
      // exchange (halo rows' partial sums go back to their owners).
      const int32_t rank = static_cast<int32_t>(c.tensor(1).shape.size());
      for (int32_t d = lead; d < rank; ++d) {
        Rule r = uniform(1, c.num_tensors(), Shard(d));
        r.step = halo;
        rules.push_back(r);
      }
      add_linear_in(rules, c.num_tensors(), 0);
      return rules;
    };
  }
}

DTENSOR_FAMILY_PART("pooling", kRules, register_pooling_rules);

}  // namespace dtensor::strategies

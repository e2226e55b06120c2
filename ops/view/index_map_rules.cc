// Sharding rules of the index-map ops (ops/view/index_map_defs.cc): reflection_pad{1,2,3}d,
// replication_pad{1,2,3}d, upsample_nearest2d, upsample_bilinear2d and their _backward ops. A mapped
// dim (padded, resized) stays whole: its output positions read positions anywhere along the dim;
// every other dim shards alike on input and output. Each output element of a pad or a nearest
// upsampling is one input element, so every Partial passes; bilinear weights sum to 1, so
// Partial(sum/avg) passes it. The backward ops sum gradient elements: Partial(sum/avg) of the
// gradient passes (a pad's self, read for its shape only, replicated).
#include "absl/strings/str_cat.h"
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

// The dims an op mapping the last k dims leaves alone, of a rank-`rank` tensor.
std::vector<int32_t> unmapped_dims(size_t rank, int k) {
  std::vector<int32_t> dims;
  for (int64_t d = 0; d < static_cast<int64_t>(rank) - k; ++d) dims.push_back(static_cast<int32_t>(d));
  return dims;
}

// The forward's rules: the unmapped dims shard alike; Partial(op) passes for each op in `ops`.
RuleFn forward_rules(int k, std::initializer_list<ReduceOp> ops) {
  return [k, ops = std::vector<ReduceOp>(ops)](const OpCall& c, const OutMeta&) {
    RuleList rules;
    for (ReduceOp op : ops) rules.push_back(uniform(1, 1, Partial(op)));
    add_alike(rules, 1, unmapped_dims(c.tensor(0).shape.size(), k));
    return rules;
  };
}

// The backward's: linear in the gradient (tensor input 0, of the output's rank), n_in tensor inputs.
RuleFn backward_rules(int k, int n_in) {
  return [k, n_in](const OpCall& c, const OutMeta&) {
    RuleList rules;
    add_linear_in(rules, n_in, 0);
    add_alike(rules, n_in, unmapped_dims(c.tensor(0).shape.size(), k));
    return rules;
  };
}

}  // namespace

void register_index_map_rules(Registry& reg) {
  const std::initializer_list<ReduceOp> kAll = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
  for (const char* mode : {"reflection", "replication"})
    for (int k = 1; k <= 3; ++k) {
      const std::string name = absl::StrCat(mode, "_pad", k, "d");
      reg.mutable_find(name).rules = forward_rules(k, kAll);
      reg.mutable_find(name + "_backward").rules = backward_rules(k, 2);
    }
  reg.mutable_find("upsample_nearest2d").rules = forward_rules(2, kAll);
  reg.mutable_find("upsample_bilinear2d").rules = forward_rules(2, {ReduceOp::kSum, ReduceOp::kAvg});
  for (const char* name : {"upsample_nearest2d_backward", "upsample_bilinear2d_backward"})
    reg.mutable_find(name).rules = backward_rules(2, 1);
}

DTENSOR_FAMILY_PART("view", kRules, register_index_map_rules);

}  // namespace dtensor::strategies

// Sharding rules of reflection_pad{1,2,3}d, replication_pad{1,2,3}d and their _backward ops
// (ops/view/pad_defs.cc). A padded dim stays whole (its edge positions read the far side of the
// dim); every other dim shards alike on input and output. Each output element is one input
// element, so every Partial passes the forward; the backward sums gradient elements, so a
// Partial(sum/avg) gradient passes (self, read for its shape only, replicated).
#include "absl/strings/str_cat.h"
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

// The dims a k-d pad leaves alone: all but the last k of a rank-`rank` tensor.
std::vector<int32_t> unpadded_dims(int64_t rank, int k) {
  std::vector<int32_t> dims;
  for (int64_t d = 0; d < rank - k; ++d) dims.push_back(static_cast<int32_t>(d));
  return dims;
}

}  // namespace

void register_pad_rules(Registry& reg) {
  for (const char* mode : {"reflection", "replication"})
    for (int k = 1; k <= 3; ++k) {
      const std::string name = absl::StrCat(mode, "_pad", k, "d");
      reg.mutable_find(name).rules = [k](const OpCall& c, const OutMeta&) {
        RuleList rules;
        add_partial_passthrough(rules, 1, 1, {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin});
        add_alike(rules, 1, unpadded_dims(static_cast<int64_t>(c.tensor(0).shape.size()), k));
        return rules;
      };
      reg.mutable_find(name + "_backward").rules = [k](const OpCall& c, const OutMeta&) {
        RuleList rules;
        add_linear_in(rules, 2, 0);
        add_alike(rules, 2, unpadded_dims(static_cast<int64_t>(c.tensor(1).shape.size()), k));
        return rules;
      };
    }
}

DTENSOR_FAMILY_PART("view", kRules, register_pad_rules);

}  // namespace dtensor::strategies

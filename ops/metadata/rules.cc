// Rules of the metadata family (defs.cc). A size query reads the global metadata only, so its 0-d
// answer is Replicate whatever self's placement: R <- S(d) for every dim d, R <- R, R <- P(op) for
// every reduce op; the propagation then keeps self where it is, at no cost. _local_scalar_dense
// needs self's whole value: only the all-R row (added by the engine), so a Partial or Shard self is
// redistributed to Replicate first.
#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {

void register_metadata_rules(Registry& reg) {
  for (const char* name : {"sym_size.int", "sym_stride.int", "sym_numel", "sym_storage_offset", "sym_is_contiguous"})
    reg.mutable_find(name).rules = [](const OpCall& c, const OutMeta&) {
      RuleList rules;
      for (int32_t d = 0; d < static_cast<int32_t>(c.tensor(0).shape.size()); ++d)
        rules.push_back(row({Replicate()}, {Shard(d)}));
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin})
        rules.push_back(row({Replicate()}, {Partial(op)}));
      return rules;
    };
  reg.mutable_find("_local_scalar_dense").rules = [](const OpCall&, const OutMeta&) {
    return RuleList{};  // all-R only
  };
}

DTENSOR_FAMILY_PART("metadata", kRules, register_metadata_rules);

}  // namespace dtensor::strategies

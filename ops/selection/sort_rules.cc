// Sharding rules of sort, sort.stable and topk: every dim but the sorted one shards, values and
// indices alike. The sorted dim stays whole (a sharded one is gathered first, as PyTorch's DTensor
// does; a merge of sorted blocks is not written yet) and Partial inputs are reduced first (sorting
// does not commute with a sum, nor elementwise with max/min).
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {

void register_sort_rules(Registry& reg) {
  for (const char* name : {"sort", "sort.stable", "topk"})
    reg.mutable_find(name).rules = [](const OpCall& c, const OutMeta&) {
      const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
      RuleList rules;
      if (rank == 0) return rules;
      const int64_t dim = norm_dim(c.get_int("dim"), rank);
      for (int64_t d = 0; d < rank; ++d) {
        if (d == dim) continue;
        const Placement s = Shard(static_cast<int32_t>(d));
        rules.push_back(row({s, s}, {s}));
      }
      return rules;
    };
}

DTENSOR_FAMILY_PART("selection", kRules, register_sort_rules);

}  // namespace dtensor::strategies

// grouped_mm rules (forms in kernels/cpu/grouped_mm.h). offs stays replicated: every rank needs the
// global group boundaries. Shards of a grouped dim are used only where the kernel can cut the
// offsets to its block (ops/grouped_mm/defs.cc):
//   a[M, K] @ b[G, K, N] -> [M, N]:  S(0) <- [S(0), R]  token rows split
//                                    P    <- [R, S(0)]  expert parallel: each rank runs its experts'
//                                                       rows, the others' rows are zero
//                                    S(1) <- [R, S(2)]  tensor parallel on N
//                                    P    <- [S(1), S(1)] tensor parallel on K
//   a[M, K] @ b[K, N] (groups over K) -> [G, M, N]: S(1) <- [S(0), R], S(2) <- [R, S(1)]
//   a[G, M, K] @ b[K, N] (groups over N) -> [M, N]: S(0) <- [S(1), R], P <- [S(2), S(0)]
//   a[G, M, K] @ b[G, K, N] -> [G, M, N]: bmm's rows (S(0) on both = expert parallel).
// All forms are linear in each operand: P(sum)/P(avg) of one with the other replicated passes.
#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {
namespace {

Rule with_offs(Rule r, bool offs) {
  if (offs) r.inputs.push_back(Replicate());
  return r;
}

}  // namespace

void register_grouped_mm_rules(Registry& reg) {
  reg.mutable_find("grouped_mm").rules = [](const OpCall& c, const OutMeta&) {
    const bool offs = c.tensor_index("offs") >= 0;
    const size_t ra = c.tensor(0).shape.size(), rb = c.tensor(1).shape.size();
    const Placement R = Replicate();
    RuleList rules;
    auto add = [&](Placement o, Placement a, Placement b) { rules.push_back(with_offs(row({o}, {a, b}), offs)); };
    if (ra == 2 && rb == 3) {
      add(Shard(0), Shard(0), R);
      add(Partial(), R, Shard(0));
      add(Shard(1), R, Shard(2));
      add(Partial(), Shard(1), Shard(1));
    } else if (ra == 2 && rb == 2) {
      add(Shard(1), Shard(0), R);
      add(Shard(2), R, Shard(1));
    } else if (ra == 3 && rb == 2) {
      add(Shard(0), Shard(1), R);
      add(Partial(), Shard(2), Shard(0));
    } else {
      add(Shard(0), Shard(0), Shard(0));
      add(Shard(1), Shard(1), R);
      add(Shard(2), R, Shard(2));
      add(Partial(), Shard(2), Shard(1));
    }
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      add(Partial(op), Partial(op), R);
      add(Partial(op), R, Partial(op));
    }
    return rules;
  };
}

DTENSOR_FAMILY_PART("grouped_mm", kRules, register_grouped_mm_rules);

}  // namespace dtensor::strategies

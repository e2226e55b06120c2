// Single-mesh-dim rules of masked_scatter and masked_scatter_backward (defs.cc, backward_defs.cc).
// Which source element lands at a position depends on every mask element before it, so the mask
// stays whole (replicated) on every row and each block counts the true elements before its offset
// itself (no collective); source is read at any position, so it stays whole too.
//   masked_scatter(self, mask, source): output dim d sharded with self's dim of the same size
//     [S(d); S(d'), R, R]; each element is self's or one source element (a selection, no
//     arithmetic), so Partial of any kind passes with self and source alike [P; P, R, P], and
//     avg, max and min with the other one replicated [P; P, R, R] and [P; R, R, P].
//   masked_scatter_backward(grad, mask): grad sharded on any dim gives a Partial(sum) of source's
//     gradient [P(sum); S(d), R] (each rank places its block's elements, zeros elsewhere); Partial
//     of any kind of grad passes [P; P, R] (elements placed, zeros on every rank elsewhere).
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

void register_masked_rules(Registry& reg) {
  reg.mutable_find("masked_scatter").rules = [](const OpCall& c, const OutMeta& out) {
    const Shape& self = c.tensor(0).shape;
    const Shape& o = out[0].shape;
    const Placement R = Replicate();
    RuleList rules;
    for (int64_t ds = 0; ds < static_cast<int64_t>(self.size()); ++ds) {
      const int64_t d = broadcast_dim(self, o, ds);  // -1 where self is broadcast
      if (d >= 0) rules.push_back(row({Shard(static_cast<int32_t>(d))}, {Shard(static_cast<int32_t>(ds)), R, R}));
    }
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin})
      rules.push_back(row({Partial(op)}, {Partial(op), R, Partial(op)}));
    // With one of them replicated, avg, max and min of pieces of the other still select (a
    // replicated value is its own avg, max and min); sum is not (it would add it n times).
    for (ReduceOp op : {ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      rules.push_back(row({Partial(op)}, {Partial(op), R, R}));
      rules.push_back(row({Partial(op)}, {R, R, Partial(op)}));
    }
    return rules;
  };
  reg.mutable_find("masked_scatter_backward").rules = [](const OpCall& c, const OutMeta&) {
    RuleList rules;
    for (int32_t d = 0; d < static_cast<int32_t>(c.tensor(0).shape.size()); ++d)
      rules.push_back(row({Partial()}, {Shard(d), Replicate()}));
    add_pass_all(rules, 2, 0);
    return rules;
  };
}

}  // namespace

DTENSOR_FAMILY_PART("masked", kRules, register_masked_rules);

}  // namespace dtensor::strategies

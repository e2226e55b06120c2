// Context parallel rows of scaled_dot_product_attention and its backward (ops/attention/ring.h):
//   forward   out S(-2) <- query S(-2), key S(-2), value S(-2)           step ring_attention
//   backward  [S(-2), S(-2), S(-2)] <- [S(-2) x 5]                        step ring_attention
// for self-attention shapes (L == S) without attn_mask. They sit beside the queries rows
// (ops/attention/rules.cc: key and value replicated, i.e. all-gathered from a sequence shard), and
// the cost model picks by time: the all-gather sends (n-1)/n of key and value before the kernel
// runs; the ring sends the same bytes in n-1 point-to-point rounds hidden behind the block
// computations (StepTraffic::overlapped), and keeps only two key/value blocks in memory.
#include "ops/common/steps.h"
#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {
namespace {

// Self-attention without a mask: query [..., L, E], key [..., L, E].
bool ring_applies(const OpCall& c, int q, int k) {
  const Shape& qs = c.tensor(q).shape;
  const Shape& ks = c.tensor(k).shape;
  return qs.size() >= 2 && qs == ks && c.tensor_index("attn_mask") < 0;
}

}  // namespace

void register_ring_attention_rules(Registry& reg) {
  OpDef& fwd = reg.mutable_find("scaled_dot_product_attention");
  const uint8_t fs = ops::step_id(fwd, "ring_attention");
  RuleFn fbase = fwd.rules;
  // These rows extend attention's own (rules.cc, which runs first: family parts run in file order).
  DT_CHECK(fbase, "scaled_dot_product_attention: ring rows registered before the op's rules");
  fwd.rules = [fbase, fs](const OpCall& c, const OutMeta& out) {
    RuleList rules = fbase(c, out);
    if (!ring_applies(c, 0, 1)) return rules;
    const Placement s = Shard(static_cast<int32_t>(c.tensor(0).shape.size()) - 2);
    Rule x = row({s}, {s, s, s});
    x.step = fs;
    rules.push_back(x);
    return rules;
  };
  OpDef& bwd = reg.mutable_find("_scaled_dot_product_attention_backward");
  const uint8_t bs = ops::step_id(bwd, "ring_attention");
  RuleFn bbase = bwd.rules;
  DT_CHECK(bbase, "_scaled_dot_product_attention_backward: ring rows registered before the op's rules");
  bwd.rules = [bbase, bs](const OpCall& c, const OutMeta& out) {
    RuleList rules = bbase(c, out);
    if (!ring_applies(c, 1, 2)) return rules;
    const Placement s = Shard(static_cast<int32_t>(c.tensor(1).shape.size()) - 2);
    Rule x = row({s, s, s}, {s, s, s, s, s});
    x.step = bs;
    rules.push_back(x);
    return rules;
  };
}

DTENSOR_FAMILY_PART("attention", kRules, register_ring_attention_rules);

}  // namespace dtensor::strategies

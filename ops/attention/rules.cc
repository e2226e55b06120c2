// scaled_dot_product_attention (PyTorch DTensor's batch/head rules, plus query-row sharding):
//   batch    out S(b) <- query S(b), key S(b), value S(b), attn_mask S(b') where its dim lines up
//            with b (else R: a broadcast dim), for every batch dim b (all but the last two);
//   queries  out S(-2) <- query S(-2), key R, value R, attn_mask S(its L dim) or R: each rank
//            attends its own query rows to all keys (the kernel offsets the causal mask by the
//            block's global row);
//   values   out S(-1) <- query R, key R, value S(-1): each rank computes its output columns;
//            out P(op) <- query R, key R, value P(op) for sum/avg (out is linear in value).
// _scaled_dot_product_attention_backward (grad_out, query, key, value, out [, attn_mask] ->
// grad_query, grad_key, grad_value; the mask placed as in the forward, R in the last two rows):
//   batch    all S(b);
//   queries  [S(-2), P(sum), P(sum)] <- [S(-2), S(-2), R, R, S(-2)]: each rank's query rows add
//            their share to grad_key and grad_value;
//   values   [P(sum), P(sum), S(-1)] <- [S(-1), R, R, S(-1), S(-1)]: the row sums
//            D = sum(grad_out * out) and grad_out @ value^T split over the value columns;
//   linear   all P(op) <- [P(op), R, R, R, R] for sum/avg: every gradient is linear in grad_out
//            once out is given.
// Sharding the key/value sequence (ring attention) is not offered.
#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {

void register_attention_rules(Registry& reg) {
  reg.mutable_find("scaled_dot_product_attention").rules = [](const OpCall& c, const OutMeta&) {
    const Shape& q = c.tensor(0).shape;
    const int32_t r = static_cast<int32_t>(q.size());
    const int mi = c.tensor_index("attn_mask");
    // The mask's placement that lines up with dim qd of the scores [..., L, S] (qd < r - 1).
    auto mask_for = [&](int32_t qd) -> Placement {
      if (mi < 0) return Replicate();
      const Shape& m = c.tensor(mi).shape;
      const int32_t md = qd - (r - static_cast<int32_t>(m.size()));
      if (md >= 0 && m[md] == q[qd]) return Shard(md);
      return Replicate();
    };
    RuleList rules;
    auto add = [&](Placement out, Placement qp, Placement kp, Placement vp, Placement mp) {
      Rule x;
      x.outputs.push_back(out);
      x.inputs = {qp, kp, vp};
      if (mi >= 0) x.inputs.push_back(mp);
      rules.push_back(x);
    };
    for (int32_t b = 0; b + 2 < r; ++b) add(Shard(b), Shard(b), Shard(b), Shard(b), mask_for(b));
    add(Shard(r - 2), Shard(r - 2), Replicate(), Replicate(), mask_for(r - 2));
    add(Shard(r - 1), Replicate(), Replicate(), Shard(r - 1), Replicate());
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg})
      add(Partial(op), Replicate(), Replicate(), Partial(op), Replicate());
    return rules;
  };
  reg.mutable_find("_scaled_dot_product_attention_backward").rules = [](const OpCall& c, const OutMeta&) {
    const Shape& qs = c.tensor(1).shape;
    const int32_t r = static_cast<int32_t>(qs.size());
    const int mi = c.tensor_index("attn_mask");
    const Placement R = Replicate(), P = Partial();
    // The mask's placement lining up with dim qd of the scores, as in the forward.
    auto mask_for = [&](int32_t qd) -> Placement {
      if (mi < 0) return R;
      const Shape& m = c.tensor(mi).shape;
      const int32_t md = qd - (r - static_cast<int32_t>(m.size()));
      if (md >= 0 && m[md] == qs[qd]) return Shard(md);
      return R;
    };
    RuleList rules;
    auto add = [&](std::initializer_list<Placement> outs, std::initializer_list<Placement> ins, Placement mask) {
      Rule x = row(outs, ins);
      if (mi >= 0) {
        x.inputs.resize(c.num_tensors(), R);
        x.inputs[mi] = mask;
      }
      rules.push_back(x);
    };
    for (int32_t b = 0; b + 2 < r; ++b) {
      const Placement s = Shard(b);
      add({s, s, s}, {s, s, s, s, s}, mask_for(b));
    }
    const Placement q = Shard(r - 2), e = Shard(r - 1);
    add({q, P, P}, {q, q, R, R, q}, mask_for(r - 2));
    add({P, P, e}, {e, R, R, e, e}, R);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      const Placement p = Partial(op);
      add({p, p, p}, {p, R, R, R, R}, R);
    }
    return rules;
  };
}

DTENSOR_FAMILY_PART("attention", kRules, register_attention_rules);

}  // namespace dtensor::strategies

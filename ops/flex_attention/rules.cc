// flex_attention (ops/flex_attention/defs.cc), as scaled_dot_product_attention
// (ops/attention/rules.cc), with the mask data placed alongside:
//   batch    out S(b) <- query, key, value S(b), for every batch dim b; document_ids and
//            block_mask S(0) with b = 0 when they have one row per batch entry (else R);
//            alibi_slopes S(0) with the head dim b = -3 (else R);
//   queries  out S(-2) <- query S(-2), key R, value R, mask data R: the kernel evaluates the mask at
//            the global position of its first row; offered only without a block_mask, whose tiles
//            would not line up with the shards (each rank builds its own);
//   values   out S(-1) <- value S(-1), the rest R; out P(op) <- value P(op) for sum/avg.
// _flex_attention_backward (grad_out, query, key, value, out, mask data -> grad_query, grad_key,
// grad_value), as _scaled_dot_product_attention_backward: batch all S(b); queries [S(-2), P(sum),
// P(sum)] (no block_mask); values [P(sum), P(sum), S(-1)] (dS = P * (dP - D) * cap' is linear in
// the per-column pieces of dP and D); linear in grad_out for P(sum)/P(avg).
// create_block_mask: document_ids S(0) -> S(0) (rows of the tile map follow the batch).
// Key/value sequence sharding (ring attention) is not offered.
#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {
namespace {

// Placements of the mask data (document_ids, alibi_slopes, block_mask) for a rule sharding
// batch dim b of the query (qi: the query's tensor index), or all R for b < 0.
void place_data(const OpCall& c, int qi, int32_t b, decltype(Rule::inputs)& in) {
  const int32_t r = static_cast<int32_t>(c.tensor(qi).shape.size());
  if (int d = c.tensor_index("document_ids"); d >= 0)
    in[d] = b == 0 && c.tensor(d).shape.size() == 2 ? Placement(Shard(0)) : Placement(Replicate());
  if (int a = c.tensor_index("alibi_slopes"); a >= 0)
    in[a] = b >= 0 && b == r - 3 ? Placement(Shard(0)) : Placement(Replicate());
  if (int m = c.tensor_index("block_mask"); m >= 0)
    in[m] = b == 0 && c.tensor(m).shape[0] > 1 ? Placement(Shard(0)) : Placement(Replicate());
}

}  // namespace

void register_flex_attention_rules(Registry& reg) {
  reg.mutable_find("flex_attention").rules = [](const OpCall& c, const OutMeta&) {
    const int32_t r = static_cast<int32_t>(c.tensor(0).shape.size());
    const bool tiles_given = c.tensor_index("block_mask") >= 0;
    RuleList rules;
    auto add = [&](Placement out, Placement q, Placement k, Placement v, int32_t b) {
      Rule x;
      x.outputs.push_back(out);
      x.inputs.assign(c.num_tensors(), Replicate());
      x.inputs[0] = q;
      x.inputs[1] = k;
      x.inputs[2] = v;
      place_data(c, 0, b, x.inputs);
      rules.push_back(x);
    };
    for (int32_t b = 0; b + 2 < r; ++b) add(Shard(b), Shard(b), Shard(b), Shard(b), b);
    if (!tiles_given) add(Shard(r - 2), Shard(r - 2), Replicate(), Replicate(), -1);
    add(Shard(r - 1), Replicate(), Replicate(), Shard(r - 1), -1);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg})
      add(Partial(op), Replicate(), Replicate(), Partial(op), -1);
    return rules;
  };
  reg.mutable_find("_flex_attention_backward").rules = [](const OpCall& c, const OutMeta&) {
    const int32_t r = static_cast<int32_t>(c.tensor(1).shape.size());
    const bool tiles_given = c.tensor_index("block_mask") >= 0;
    const Placement R = Replicate(), P = Partial();
    RuleList rules;
    auto add = [&](std::initializer_list<Placement> outs, std::initializer_list<Placement> ins, int32_t b) {
      Rule x = row(outs, ins);
      x.inputs.resize(c.num_tensors(), R);
      place_data(c, 1, b, x.inputs);
      rules.push_back(x);
    };
    for (int32_t b = 0; b + 2 < r; ++b) {
      const Placement s = Shard(b);
      add({s, s, s}, {s, s, s, s, s}, b);
    }
    const Placement q = Shard(r - 2), e = Shard(r - 1);
    if (!tiles_given) add({q, P, P}, {q, q, R, R, q}, -1);
    add({P, P, e}, {e, R, R, e, e}, -1);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      const Placement p = Partial(op);
      add({p, p, p}, {p, R, R, R, R}, -1);
    }
    return rules;
  };
  reg.mutable_find("create_block_mask").rules = [](const OpCall& c, const OutMeta&) {
    RuleList rules;
    if (c.tensor(0).shape.size() == 2) rules.push_back(row({Shard(0)}, {Shard(0)}));
    return rules;
  };
}

DTENSOR_FAMILY_PART("flex_attention", kRules, register_flex_attention_rules);

}  // namespace dtensor::strategies

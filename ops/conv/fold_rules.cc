// Single-mesh-dim rules of im2col and col2im (fold_defs.cc). Both are linear and move each element
// (col2im also adds overlapping ones), so:
//   im2col: the batch dim [S(0); S(0)]; channels [S(1); S(c)] (c the channel dim: C evenly split,
//     so each rank's C k column rows are its channels'); Partial of any kind passes (a copy with
//     zeros in the padding, the same zeros on every rank).
//   col2im: the batch dim; the C k rows [S(c); S(rows)] with C evenly split; the blocks dim L
//     [P(sum); S(L)]: each rank adds its blocks into the image, the overlaps summed over ranks (a
//     spatial split PyTorch DTensor would gather); Partial sum and avg pass (max and min do not: the
//     overlaps add).
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

void register_fold_rules(Registry& reg) {
  reg.mutable_find("im2col").rules = [](const OpCall& c, const OutMeta&) {
    const bool batched = c.tensor(0).shape.size() == 4;
    const int32_t ch = batched ? 1 : 0;
    RuleList rules;
    if (batched) rules.push_back(row({Shard(0)}, {Shard(0)}));
    Rule r = row({Shard(ch)}, {Shard(ch)});
    r.even_input0 = 1u << ch;
    rules.push_back(r);
    add_partial_passthrough(rules, 1, 1, {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin});
    return rules;
  };
  reg.mutable_find("col2im").rules = [](const OpCall& c, const OutMeta&) {
    const bool batched = c.tensor(0).shape.size() == 3;
    const int32_t rows = batched ? 1 : 0, blocks = rows + 1;
    RuleList rules;
    if (batched) rules.push_back(row({Shard(0)}, {Shard(0)}));
    Rule r = row({Shard(rows)}, {Shard(rows)});
    r.even_output0 = 1u << rows;  // C split evenly: each rank's rows are whole channels' k rows
    r.even_input0 = 1u << rows;
    rules.push_back(r);
    rules.push_back(row({Partial()}, {Shard(blocks)}));
    add_partial_passthrough(rules, 1, 1, {ReduceOp::kSum, ReduceOp::kAvg});
    return rules;
  };
}

}  // namespace

DTENSOR_FAMILY_PART("conv", kRules, register_fold_rules);

}  // namespace dtensor::strategies

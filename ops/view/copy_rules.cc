// Sharding rules of the copies (ops/view/copy_defs.cc). A dim the op rearranges along (flipped,
// repeated, padded) stays whole: its blocks would land elsewhere than a Shard places them. Every
// other dim shards as it is. Partial inputs: a copy or rearrangement passes every Partial op; the
// pad value v of constant_pad_nd passes max/min/avg (v on every rank reduces to v) and sum only
// when v is 0; the outputs of fill and full_like do not depend on the input's values, so a Partial
// input gives a Replicate output with no communication.
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

constexpr std::initializer_list<ReduceOp> kAllOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax,
                                                     ReduceOp::kMin};
Placement S(int64_t d) { return Shard(static_cast<int32_t>(d)); }

// Input dim d -> output dim d + shift for every d with keep(d).
template <typename Keep>
void shard_rows(RuleList& rules, int64_t rank, int64_t shift, Keep keep) {
  for (int64_t d = 0; d < rank; ++d)
    if (keep(d)) rules.push_back(row({S(d + shift)}, {S(d)}));
}

int64_t rank_of(const OpCall& c) { return static_cast<int64_t>(c.tensor(0).shape.size()); }

// copy(self, src): out = src broadcast and cast to self's dtype. A dim of self shards with self and
// with src's aligned dim (or src replicated where it broadcasts); a Partial src passes as the cast
// allows: sum and avg when the dtypes are the same or both floating, max and min unless the result
// is bool (a cast that keeps the order); self's values are unused, so a Partial self with a
// replicated src gives a Replicate output.
RuleList copy_rules(const OpCall& c) {
  const Shape& self = c.tensor(0).shape;
  const Shape& src = c.tensor(1).shape;
  const int64_t lead = static_cast<int64_t>(self.size()) - static_cast<int64_t>(src.size());
  RuleList rules;
  for (int64_t d = 0; d < static_cast<int64_t>(self.size()); ++d) {
    const bool along = d >= lead && src[d - lead] != 1;  // src has this dim, not broadcast
    rules.push_back(row({S(d)}, {S(d), along ? S(d - lead) : Placement(Replicate())}));
  }
  const DType to = c.tensor(0).dtype, from = c.tensor(1).dtype;
  const bool linear = to == from || (is_floating(to) && is_floating(from));
  const bool ordered = to != DType::kBool;
  for (ReduceOp op : kAllOps) {
    rules.push_back(row({Replicate()}, {Partial(op), Replicate()}));
    if ((op == ReduceOp::kSum || op == ReduceOp::kAvg) ? linear : ordered)
      rules.push_back(row({Partial(op)}, {Replicate(), Partial(op)}));
  }
  return rules;
}

}  // namespace

void register_copy_rules(Registry& reg) {
  reg.mutable_find("copy").rules = [](const OpCall& c, const OutMeta&) { return copy_rules(c); };
  for (const char* name : {"clone", "alias"})
    reg.mutable_find(name).rules = [](const OpCall& c, const OutMeta&) {
      RuleList rules;
      add_partial_passthrough(rules, 1, 1, kAllOps);
      shard_rows(rules, rank_of(c), 0, [](int64_t) { return true; });
      return rules;
    };
  reg.mutable_find("flip").rules = [](const OpCall& c, const OutMeta&) {
    const int64_t rank = rank_of(c);
    std::vector<bool> flipped(rank, false);
    for (int64_t d : c.get_int_list("dims"))
      if (rank > 0) flipped[norm_dim(d, rank)] = true;
    RuleList rules;
    add_partial_passthrough(rules, 1, 1, kAllOps);
    shard_rows(rules, rank, 0, [&](int64_t d) { return !flipped[d]; });
    return rules;
  };
  reg.mutable_find("repeat").rules = [](const OpCall& c, const OutMeta&) {
    const std::vector<int64_t> reps = c.get_int_list("repeats");
    const int64_t rank = rank_of(c), lead = static_cast<int64_t>(reps.size()) - rank;
    RuleList rules;
    add_partial_passthrough(rules, 1, 1, kAllOps);
    shard_rows(rules, rank, lead, [&](int64_t d) { return reps[d + lead] == 1; });
    return rules;
  };
  reg.mutable_find("constant_pad_nd").rules = [](const OpCall& c, const OutMeta&) {
    const std::vector<int64_t> pad = c.get_int_list("pad");
    const int64_t rank = rank_of(c);
    std::vector<bool> padded(rank, false);
    for (size_t k = 0; k < pad.size() / 2; ++k)
      padded[rank - 1 - static_cast<int64_t>(k)] = pad[2 * k] != 0 || pad[2 * k + 1] != 0;
    RuleList rules;
    if (c.get_double("value") == 0.0) add_partial_passthrough(rules, 1, 1, kAllOps);
    else add_partial_passthrough(rules, 1, 1, {ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin});
    shard_rows(rules, rank, 0, [&](int64_t d) { return !padded[d]; });
    return rules;
  };
  // select_scatter / slice_scatter: self's dims other than dim shard alike with src's (select drops
  // dim from src); dim stays whole (the region lands in one place). A Partial(op) self with a
  // Partial(op) src passes every op (each element is one of theirs); src alone cannot (the region
  // would reduce k copies of it).
  for (const char* name : {"select_scatter", "slice_scatter"})
    reg.mutable_find(name).rules = [](const OpCall& c, const OutMeta&) {
      const int64_t rank = rank_of(c);
      const int64_t at = norm_dim(c.get_int("dim"), rank);
      const bool select = c.op().schema.name == "select_scatter";
      RuleList rules;
      add_partial_passthrough(rules, 1, 2, kAllOps);
      for (int64_t d = 0; d < rank; ++d)
        if (d != at) rules.push_back(row({S(d)}, {S(d), S(select && d > at ? d - 1 : d)}));
      return rules;
    };
  for (const char* name : {"fill.Scalar", "full_like"})
    reg.mutable_find(name).rules = [](const OpCall& c, const OutMeta&) {
      RuleList rules;
      for (ReduceOp op : kAllOps) rules.push_back(row({Replicate()}, {Partial(op)}));
      shard_rows(rules, rank_of(c), 0, [](int64_t) { return true; });
      return rules;
    };
}

DTENSOR_FAMILY_PART("view", kRules, register_copy_rules);

}  // namespace dtensor::strategies

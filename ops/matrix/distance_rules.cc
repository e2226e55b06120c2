// Sharding rules of _cdist_forward, _cdist_backward, _pdist_forward and _pdist_backward
// (ops/matrix/distance_defs.cc). Output
// [*, P, R]: a batch dim shards alike on the output and on each input that has it at full size
// (an input broadcast there stays replicated); P with x1's rows, R with x2's rows; the columns M
// split a sum for p = 0 and 1 (Partial(sum) output) and a max for p = inf (Partial(max)); no
// Partial input passes (the distance is not linear). The backward [*, P, M]: batch, P and M
// shard alike (M with both inputs' columns; each column's gradient needs only its own
// differences and the distances); R splits the sum over x2's rows (Partial(sum) output, grad and
// cdist sharded along R); a Partial(sum/avg) grad passes (the gradient is linear in it).
#include <cmath>

#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

Placement S(int64_t d) { return Shard(static_cast<int32_t>(d)); }
int64_t rank(const OpCall& c, int t) { return static_cast<int64_t>(c.tensor(t).shape.size()); }

// Input t's placement for output batch dim b (of `nb` batch dims): Shard of its own dim when it
// has that dim at the output's size, else Replicate.
Placement batch_of(const OpCall& c, int t, int64_t b, int64_t nb, int64_t out_size) {
  const Shape& s = c.tensor(t).shape;
  const int64_t own = static_cast<int64_t>(s.size()) - 2 - (nb - b);
  return own >= 0 && s[own] == out_size ? S(own) : Placement(Replicate());
}

RuleList forward_rules(const OpCall& c, const OutMeta& out) {
  const Shape& o = out[0].shape;
  const int64_t nb = static_cast<int64_t>(o.size()) - 2;
  const int64_t r1 = rank(c, 0), r2 = rank(c, 1);
  RuleList rules;
  for (int64_t b = 0; b < nb; ++b)
    rules.push_back(row({S(b)}, {batch_of(c, 0, b, nb, o[b]), batch_of(c, 1, b, nb, o[b])}));
  rules.push_back(row({S(nb)}, {S(r1 - 2), Replicate()}));
  rules.push_back(row({S(nb + 1)}, {Replicate(), S(r2 - 2)}));
  const double p = c.get_double("p");
  if (p == 0 || p == 1) rules.push_back(row({Partial(ReduceOp::kSum)}, {S(r1 - 1), S(r2 - 1)}));
  if (std::isinf(p)) rules.push_back(row({Partial(ReduceOp::kMax)}, {S(r1 - 1), S(r2 - 1)}));
  return rules;
}

RuleList backward_rules(const OpCall& c, const OutMeta& out) {
  const Shape& o = out[0].shape;  // [*, P, M]
  const int64_t nb = static_cast<int64_t>(o.size()) - 2;
  const int64_t r1 = rank(c, 1), r2 = rank(c, 2);
  RuleList rules;
  add_linear_in(rules, 4, 0);
  for (int64_t b = 0; b < nb; ++b)
    rules.push_back(row({S(b)}, {S(b), batch_of(c, 1, b, nb, o[b]), batch_of(c, 2, b, nb, o[b]), S(b)}));
  rules.push_back(row({S(nb)}, {S(nb), S(r1 - 2), Replicate(), S(nb)}));
  rules.push_back(row({S(nb + 1)}, {Replicate(), S(r1 - 1), S(r2 - 1), Replicate()}));
  rules.push_back(row({Partial(ReduceOp::kSum)}, {S(nb + 1), Replicate(), S(r2 - 2), S(nb + 1)}));
  return rules;
}

// pdist: rows stay whole (every pair); columns split a sum (p = 0, 1) or a max (inf). Its backward
// shards the columns alike; a Partial(sum/avg) grad passes.
RuleList pdist_rules(const OpCall& c, const OutMeta&) {
  RuleList rules;
  const double p = c.get_double("p");
  if (p == 0 || p == 1) rules.push_back(row({Partial(ReduceOp::kSum)}, {S(1)}));
  if (std::isinf(p)) rules.push_back(row({Partial(ReduceOp::kMax)}, {S(1)}));
  return rules;
}

RuleList pdist_backward_rules(const OpCall&, const OutMeta&) {
  RuleList rules;
  add_linear_in(rules, 3, 0);
  rules.push_back(row({S(1)}, {Replicate(), S(1), Replicate()}));
  return rules;
}

}  // namespace

void register_distance_rules(Registry& reg) {
  reg.mutable_find("_cdist_forward").rules = forward_rules;
  reg.mutable_find("_cdist_backward").rules = backward_rules;
  reg.mutable_find("_pdist_forward").rules = pdist_rules;
  reg.mutable_find("_pdist_backward").rules = pdist_backward_rules;
}

DTENSOR_FAMILY_PART("matrix", kRules, register_distance_rules);

}  // namespace dtensor::strategies

// Matrix products (DESIGN §4): the mm rows [S(0), S(0), R], [S(1), R, S(1)], [P, S(1), S(0)],
// [P, P, R], [P, R, P] (Partial sum and avg: the product is linear in each factor), with batch dims
// sharded alike for bmm/matmul, and the bias following the output (Partial with the output, since it
// must be added once: R -> P keeps it on coordinate 0 only).
#include <array>

#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {
namespace {

constexpr ReduceOp kLinearOps[] = {ReduceOp::kSum, ReduceOp::kAvg};

// Rows of a (batched) matmul with output rank `r_out`, self's row/contraction dims (sr, sk), other's
// contraction/col dims (ok_, oc), the output's row/col dims (orow, ocol) (-1: absent), and batch dims
// shared by all (pairs of (out dim, self dim, other dim)).
struct MatDims {
  int64_t sr = -1, sk = -1, ok = -1, oc = -1, orow = -1, ocol = -1;
  std::vector<std::array<int64_t, 3>> batch;  // (out, self, other); other may be -1 (broadcast)
};

RuleList mat_rules(const MatDims& m) {
  auto S = [](int64_t d) { return Shard(static_cast<int32_t>(d)); };
  RuleList rules;
  for (const auto& [o, s, t] : m.batch) rules.push_back(row({S(o)}, {S(s), t >= 0 ? S(t) : Replicate()}));
  if (m.sr >= 0 && m.orow >= 0) rules.push_back(row({S(m.orow)}, {S(m.sr), Replicate()}));
  if (m.oc >= 0 && m.ocol >= 0) rules.push_back(row({S(m.ocol)}, {Replicate(), S(m.oc)}));
  rules.push_back(row({Partial()}, {S(m.sk), S(m.ok)}));
  for (ReduceOp op : kLinearOps) {
    rules.push_back(row({Partial(op)}, {Partial(op), Replicate()}));
    rules.push_back(row({Partial(op)}, {Replicate(), Partial(op)}));
  }
  return rules;
}

// Appends a bias input (broadcast to the output) to every row: it follows the output's placement
// on the dims it has, stays R on broadcast dims, and is Partial where the output is.
void add_bias(RuleList& rules, const Shape& bias, const Shape& out, bool bias_first) {
  for (Rule& r : rules) {
    const Placement& o = r.outputs[0];
    Placement b = Replicate();
    if (o.is_partial()) {
      b = o;
    } else if (o.is_shard()) {
      int64_t bd = o.dim - (static_cast<int64_t>(out.size()) - static_cast<int64_t>(bias.size()));
      if (bd >= 0 && bias[bd] == out[o.dim]) b = Shard(static_cast<int32_t>(bd));
    }
    if (bias_first) r.inputs.insert(r.inputs.begin(), b);
    else r.inputs.push_back(b);
  }
}

}  // namespace

void register_matrix_rules(Registry& reg) {
  reg.mutable_find("mm").rules = [](const OpCall&, const OutMeta&) {
    return mat_rules({0, 1, 0, 1, 0, 1, {}});
  };
  reg.mutable_find("bmm").rules = [](const OpCall&, const OutMeta&) {
    return mat_rules({1, 2, 1, 2, 1, 2, {{0, 0, 0}}});
  };
  reg.mutable_find("addmm").rules = [](const OpCall& c, const OutMeta&) {
    RuleList r = mat_rules({0, 1, 0, 1, 0, 1, {}});
    add_bias(r, c.tensor(0).shape, {c.tensor(1).shape[0], c.tensor(2).shape[1]}, true);
    return r;
  };
  // linear(x[..., in], w[out, in], b[out]?) = x @ w^T + b.
  reg.mutable_find("linear").rules = [](const OpCall& c, const OutMeta&) {
    const int64_t r = static_cast<int64_t>(c.tensor(0).shape.size());
    MatDims m;
    m.sk = r - 1;
    m.ok = 1;   // w's in dim
    m.oc = 0;   // w's out dim
    m.ocol = r - 1;
    for (int64_t d = 0; d + 1 < r; ++d) m.batch.push_back({d, d, -1});
    RuleList rules = mat_rules(m);
    if (c.tensor_index("bias") >= 0) {
      Shape out = c.tensor(0).shape;
      out.back() = c.tensor(1).shape[0];
      add_bias(rules, c.tensor(c.tensor_index("bias")).shape, out, false);
    }
    return rules;
  };
  // matmul: the 2-d and batched cases whose batch dims need no broadcasting of `other`; other shapes
  // run replicated.
  reg.mutable_find("matmul").rules = [](const OpCall& c, const OutMeta&) {
    const Shape& a = c.tensor(0).shape;
    const Shape& b = c.tensor(1).shape;
    const int64_t ra = static_cast<int64_t>(a.size()), rb = static_cast<int64_t>(b.size());
    if (ra < 2 || rb < 2) return RuleList{};
    MatDims m;
    m.sr = ra - 2;
    m.sk = ra - 1;
    m.ok = rb - 2;
    m.oc = rb - 1;
    m.orow = ra - 2;
    m.ocol = std::max(ra, rb) - 1;
    m.orow = std::max(ra, rb) - 2;
    if (rb == 2) {
      for (int64_t d = 0; d + 2 < ra; ++d) m.batch.push_back({d, d, -1});
    } else if (ra == rb) {
      for (int64_t d = 0; d + 2 < ra; ++d)
        if (a[d] == b[d]) m.batch.push_back({d, d, d});
    } else {
      return RuleList{};
    }
    return mat_rules(m);
  };
}

DTENSOR_FAMILY_PART("matrix", kRules, register_matrix_rules);

}  // namespace dtensor::strategies

// Pointwise ops with broadcasting (DESIGN §4). A row shards one output dim and every input dim that
// maps onto it (broadcast dims stay replicated). Partial passes where the math allows: sums through
// add/sub/where and scaling by a replicated factor; max/min through monotone non-decreasing maps (and
// swapped through decreasing ones: neg, rsqrt).
#include <cmath>
#include <string>

#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {

RuleList pointwise_shard_rules(const OpCall& call, const Shape& out) {
  RuleList rules;
  for (int64_t d = 0; d < static_cast<int64_t>(out.size()); ++d) {
    Rule r;
    r.outputs.push_back(Shard(static_cast<int32_t>(d)));
    bool any = false;
    for (int t = 0; t < call.num_tensors(); ++t) {
      const Shape& in = call.tensor(t).shape;
      int64_t id = d - (static_cast<int64_t>(out.size()) - static_cast<int64_t>(in.size()));
      if (id >= 0 && in[id] == out[d]) {
        r.inputs.push_back(Shard(static_cast<int32_t>(id)));
        any = true;
      } else {
        r.inputs.push_back(Replicate());
      }
    }
    if (any) rules.push_back(std::move(r));
  }
  return rules;
}

namespace {

using Extra = std::function<void(const OpCall&, RuleList&)>;

void set(Registry& reg, const std::string& name, Extra extra = nullptr,
         std::source_location where = std::source_location::current()) {
  OpDef& op = reg.mutable_find(name, where);
  op.rules = [extra](const OpCall& call, const OutMeta& out) {
    RuleList rules = pointwise_shard_rules(call, out[0].shape);
    if (extra) extra(call, rules);
    return rules;
  };
}

constexpr std::initializer_list<ReduceOp> kLinear = {ReduceOp::kSum, ReduceOp::kAvg};
constexpr std::initializer_list<ReduceOp> kOrder = {ReduceOp::kMax, ReduceOp::kMin};

ReduceOp swap_order(ReduceOp op) {
  return op == ReduceOp::kMax ? ReduceOp::kMin : op == ReduceOp::kMin ? ReduceOp::kMax : op;
}

}  // namespace

void register_pointwise_rules(Registry& reg) {
  auto linear = [](const OpCall& c, RuleList& r) { add_partial_passthrough(r, 1, c.num_tensors(), kLinear); };
  set(reg, "add", linear);
  set(reg, "sub", linear);
  // A replicated factor scales every partial term: P * R, R * P; P / R.
  set(reg, "mul", [](const OpCall&, RuleList& r) {
    for (ReduceOp op : kLinear) {
      r.push_back(row({Partial(op)}, {Partial(op), Replicate()}));
      r.push_back(row({Partial(op)}, {Replicate(), Partial(op)}));
    }
  });
  // Rounded quotients (rounding_mode) are not linear in the dividend: no Partial.
  set(reg, "div", [](const OpCall& c, RuleList& r) {
    if (c.has("rounding_mode")) return;
    for (ReduceOp op : kLinear) r.push_back(row({Partial(op)}, {Partial(op), Replicate()}));
  });
  // max(max_i a_i, max_i b_i) = max_i max(a_i, b_i), and max(max_i a_i, b) = max_i max(a_i, b).
  for (auto [name, op] : {std::pair{"maximum", ReduceOp::kMax}, {"minimum", ReduceOp::kMin}}) {
    ReduceOp p = op;
    set(reg, name, [p](const OpCall&, RuleList& r) {
      r.push_back(row({Partial(p)}, {Partial(p), Partial(p)}));
      r.push_back(row({Partial(p)}, {Partial(p), Replicate()}));
      r.push_back(row({Partial(p)}, {Replicate(), Partial(p)}));
    });
  }
  for (const char* name : {"pow", "pow.Tensor_Scalar", "eq", "ne", "lt", "le", "gt", "ge", "abs",
                           "gelu", "silu"})
    set(reg, name);
  // where(c, a, b) is linear in (a, b) and selects element-wise, so every Partial op passes.
  set(reg, "where", [](const OpCall&, RuleList& r) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin})
      r.push_back(row({Partial(op)}, {Replicate(), Partial(op), Partial(op)}));
  });
  // masked_fill writes the same value on every rank: fine for avg/max/min, and for sum only when the
  // value is 0 (the identity).
  set(reg, "masked_fill", [](const OpCall& c, RuleList& r) {
    for (ReduceOp op : {ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin})
      r.push_back(row({Partial(op)}, {Partial(op), Replicate()}));
    if (c.get_double("value") == 0.0) r.push_back(row({Partial()}, {Partial(), Replicate()}));
  });
  // x * c and x / c: linear (sum, avg); max/min pass for c >= 0 and swap for c < 0. Only for a
  // finite factor: pieces times inf (or over 0) give inf - inf = NaN where the value gives +-inf.
  for (const char* name : {"mul.Scalar", "div.Scalar"}) {
    const bool is_div = std::string(name) == "div.Scalar";
    set(reg, name, [is_div](const OpCall& c, RuleList& r) {
      if (c.has("rounding_mode")) return;  // rounded quotients: neither linear nor order-preserving
      const double s = c.get_double("other");
      if (is_div ? s == 0.0 : !std::isfinite(s)) return;
      add_partial_passthrough(r, 1, 1, kLinear);
      const bool neg = c.get_double("other") < 0;
      for (ReduceOp op : kOrder) r.push_back(row({Partial(neg ? swap_order(op) : op)}, {Partial(op)}));
    });
  }
  // x + c: every rank adds c, so sums would count it k times; avg/max/min pass.
  set(reg, "add.Scalar", [](const OpCall&, RuleList& r) {
    for (ReduceOp op : {ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) r.push_back(row({Partial(op)}, {Partial(op)}));
  });
  set(reg, "neg", [](const OpCall&, RuleList& r) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin})
      r.push_back(row({Partial(swap_order(op))}, {Partial(op)}));
  });
  // Monotone on all reals. log, sqrt and rsqrt are monotone only on their domain, and a Partial(max)
  // piece may lie outside it even when the reduced value does not, so they take no Partial.
  for (const char* name : {"exp", "tanh", "sigmoid", "relu"})
    set(reg, name, [](const OpCall&, RuleList& r) { add_partial_passthrough(r, 1, 1, kOrder); });
  for (const char* name : {"log", "sqrt", "rsqrt"}) set(reg, name);
  // Casts are monotone (max/min pass); sums pass only through exact widening float casts.
  set(reg, "to", [](const OpCall& c, RuleList& r) {
    DType from = c.tensor(0).dtype, to = dtype_from_name(c.get_str("dtype"));
    if (to != DType::kBool) add_partial_passthrough(r, 1, 1, kOrder);
    bool widening = from == to || (from == DType::kFloat32 && to == DType::kFloat64) ||
                    ((from == DType::kBFloat16 || from == DType::kFloat16) &&
                     (to == DType::kFloat32 || to == DType::kFloat64));
    if (widening) add_partial_passthrough(r, 1, 1, kLinear);
  });

  // gelu_backward (ops/pointwise/backward_defs.cc): pointwise with broadcasting (a shard maps
  // onto every input dim of that output dim); linear in the gradient.
  reg.mutable_find("gelu_backward").rules = [](const OpCall& c, const OutMeta& meta) {
    const Shape& out = meta[0].shape;
    RuleList rules;
    for (int64_t d = 0; d < static_cast<int64_t>(out.size()); ++d) {
      Rule r;
      r.outputs.push_back(Shard(static_cast<int32_t>(d)));
      for (int t = 0; t < 2; ++t) {
        const Shape& in = c.tensor(t).shape;
        const int64_t id = d - (static_cast<int64_t>(out.size()) - static_cast<int64_t>(in.size()));
        r.inputs.push_back(id >= 0 && in[id] == out[d] ? Shard(static_cast<int32_t>(id)) : Replicate());
      }
      rules.push_back(r);
    }
    add_linear_in(rules, 2, 0);
    return rules;
  };
}

DTENSOR_FAMILY_PART("pointwise", kRules, register_pointwise_rules);

}  // namespace dtensor::strategies

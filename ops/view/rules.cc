// View and shape ops (DESIGN §4). Data is only rearranged, so every Partial op passes through.
// view/reshape/flatten/squeeze/unsqueeze map groups of input dims onto groups of output dims with
// equal products; a shard survives on the first non-1 dim of a group, and when the group really
// merges or splits dims, only if both that input dim and the output dim it lands on split evenly
// (otherwise torch.chunk boundaries would not line up).
#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {
namespace {

constexpr std::initializer_list<ReduceOp> kAllOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax,
                                                     ReduceOp::kMin};
Placement S(int64_t d) { return Shard(static_cast<int32_t>(d)); }

RuleList view_rules(const Shape& in, const Shape& out) {
  RuleList rules;
  add_partial_passthrough(rules, 1, 1, kAllOps);
  if (numel(in) == 0) return rules;
  const size_t ni = in.size(), no = out.size();
  size_t i = 0, j = 0;
  while (i < ni || j < no) {
    // One group: dims [i0, i) of in and [j0, j) of out with equal products.
    size_t i0 = i, j0 = j;
    int64_t pi = 1, pj = 1;
    if (i < ni) pi = in[i++];
    if (j < no) pj = out[j++];
    while (pi != pj) {
      if (pi < pj && i < ni) pi *= in[i++];
      else if (j < no) pj *= out[j++];
      else break;
    }
    // Trailing size-1 dims join the group.
    while (i < ni && in[i] == 1 && (j >= no || out[j] != 1)) ++i;
    while (j < no && out[j] == 1 && (i >= ni || in[i] != 1)) ++j;
    int64_t fi = -1, fo = -1;
    for (size_t k = i0; k < i; ++k)
      if (in[k] != 1) { fi = static_cast<int64_t>(k); break; }
    for (size_t k = j0; k < j; ++k)
      if (out[k] != 1) { fo = static_cast<int64_t>(k); break; }
    if (fi < 0 || fo < 0) continue;
    Rule r = row({S(fo)}, {S(fi)});
    if (in[fi] != pi || out[fo] != pj) {  // a real merge or split
      r.even_input0 = 1u << fi;
      r.even_output0 = 1u << fo;
    }
    rules.push_back(r);
  }
  return rules;
}

RuleList as_view(const OpCall& c, const OutMeta& out) { return view_rules(c.tensor(0).shape, out[0].shape); }

// Rows sharding every dim of input 0 except `skip`, mapped to output dim f(d).
template <typename F>
RuleList keep_dims(const OpCall& c, int64_t skip, int n_out, F f) {
  RuleList rules;
  add_partial_passthrough(rules, n_out, c.num_tensors(), kAllOps);
  const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
  for (int64_t d = 0; d < rank; ++d) {
    if (d == skip) continue;
    rules.push_back(uniform(n_out, c.num_tensors(), S(d)));
    for (auto& o : rules.back().outputs) o = S(f(d));
  }
  return rules;
}

}  // namespace

void register_view_rules(Registry& reg) {
  for (const char* name : {"view", "reshape", "flatten", "squeeze", "unsqueeze"})
    reg.mutable_find(name).rules = as_view;
  reg.mutable_find("transpose").rules = [](const OpCall& c, const OutMeta&) {
    const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
    int64_t a = norm_dim(c.get_int("dim0"), rank), b = norm_dim(c.get_int("dim1"), rank);
    return keep_dims(c, -1, 1, [&](int64_t d) { return d == a ? b : d == b ? a : d; });
  };
  reg.mutable_find("t").rules = [](const OpCall& c, const OutMeta&) {
    const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
    return keep_dims(c, -1, 1, [&](int64_t d) { return rank == 2 ? 1 - d : d; });
  };
  reg.mutable_find("permute").rules = [](const OpCall& c, const OutMeta&) {
    const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
    std::vector<int64_t> dims = c.get_int_list("dims"), inverse(rank);
    for (int64_t k = 0; k < rank; ++k) inverse[norm_dim(dims[k], rank)] = k;
    return keep_dims(c, -1, 1, [&](int64_t d) { return inverse[d]; });
  };
  reg.mutable_find("expand").rules = [](const OpCall& c, const OutMeta& meta) {
    const Shape& in = c.tensor(0).shape;
    const Shape& out = meta[0].shape;
    RuleList rules;
    add_partial_passthrough(rules, 1, 1, kAllOps);
    for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
      int64_t od = broadcast_dim(in, out, d);
      if (od >= 0) rules.push_back(row({S(od)}, {S(d)}));
    }
    return rules;
  };
  reg.mutable_find("cat").rules = [](const OpCall& c, const OutMeta&) {
    const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
    return keep_dims(c, norm_dim(c.get_int("dim"), rank), 1, [](int64_t d) { return d; });
  };
  reg.mutable_find("stack").rules = [](const OpCall& c, const OutMeta&) {
    const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
    const int64_t at = norm_dim(c.get_int("dim"), rank + 1);
    return keep_dims(c, -1, 1, [&](int64_t d) { return d < at ? d : d + 1; });
  };
  reg.mutable_find("split").rules = [](const OpCall& c, const OutMeta& out) {
    const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
    const int n_out = static_cast<int>(out.size());
    return keep_dims(c, norm_dim(c.get_int("dim"), rank), n_out, [](int64_t d) { return d; });
  };
  reg.mutable_find("split_with_sizes").rules = [](const OpCall& c, const OutMeta& out) {
    const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
    const int n_out = static_cast<int>(out.size());
    return keep_dims(c, norm_dim(c.get_int("dim"), rank), n_out, [](int64_t d) { return d; });
  };
  reg.mutable_find("slice").rules = [](const OpCall& c, const OutMeta&) {
    const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
    return keep_dims(c, norm_dim(c.get_int("dim"), rank), 1, [](int64_t d) { return d; });
  };
  // diagonal: the kept dims shard alike (they come first in the output, in order); dim1 and dim2
  // stay whole. diagonal_backward maps them back; every Partial passes both (selection and 0 fill).
  reg.mutable_find("diagonal").rules = [](const OpCall& c, const OutMeta&) {
    const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
    const int64_t a = norm_dim(c.get_int("dim1"), rank), b = norm_dim(c.get_int("dim2"), rank);
    RuleList rules;
    add_partial_passthrough(rules, 1, 1, kAllOps);
    for (int64_t d = 0, o = 0; d < rank; ++d)
      if (d != a && d != b) rules.push_back(row({S(o++)}, {S(d)}));
    return rules;
  };
  reg.mutable_find("diagonal_backward").rules = [](const OpCall& c, const OutMeta&) {
    const int64_t rank = static_cast<int64_t>(c.get_int_list("input_sizes").size());
    const int64_t a = norm_dim(c.get_int("dim1"), rank), b = norm_dim(c.get_int("dim2"), rank);
    RuleList rules;
    add_pass_all(rules, 1, 0);
    for (int64_t d = 0, o = 0; d < rank; ++d)
      if (d != a && d != b) rules.push_back(row({S(d)}, {S(o++)}));
    return rules;
  };
  reg.mutable_find("select").rules = [](const OpCall& c, const OutMeta&) {
    const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
    const int64_t at = norm_dim(c.get_int("dim"), rank);
    return keep_dims(c, at, 1, [&](int64_t d) { return d < at ? d : d - 1; });
  };

  // slice_backward / select_backward (ops/view/backward_defs.cc): shards of the other dims,
  // mapped (select drops `dim`). (grad_output S(dim) -> P(sum) is valid but not listed: it would be
  // taken for free and defer a reduction of the whole input.) Every Partial op of the gradient
  // passes: each gradient element is placed once and 0 fills the rest on every rank.
  for (const char* name : {"slice_backward", "select_backward"}) {
    const bool select = std::string(name) == "select_backward";
    reg.mutable_find(name).rules = [select](const OpCall& c, const OutMeta&) {
      const std::vector<int64_t> sizes = c.get_int_list("input_sizes");
      const int64_t rank = static_cast<int64_t>(sizes.size());
      const int64_t dim = norm_dim(c.get_int("dim"), rank);
      RuleList rules;
      for (int64_t d = 0; d < rank; ++d) {
        if (d == dim) continue;
        const int64_t gd = select && d > dim ? d - 1 : d;
        rules.push_back(row({Shard(static_cast<int32_t>(d))}, {Shard(static_cast<int32_t>(gd))}));
      }
      add_pass_all(rules, 1, 0);
      return rules;
    };
  }
}

DTENSOR_FAMILY_PART("view", kRules, register_view_rules);

}  // namespace dtensor::strategies

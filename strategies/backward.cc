// Backward ops (ops/defs/backward_ops.cc). Every one is linear in its incoming gradient, so a
// P(sum)/P(avg) gradient passes with the other inputs replicated. P(max)/P(min) pass only through
// the ops that place each gradient element once and fill 0 elsewhere (slice_backward,
// select_backward, value_selecting_reduction_backward): the fill is the same 0 on every rank, so
// the max/min over ranks keeps it (the validator confirms; the ops that add several gradient
// elements into one place -- embedding, pooling, cummaxmin -- take no P(max)/P(min)). Shards:
//   gelu_backward                 pointwise with broadcasting (a shard maps onto every input dim
//                                 of that output dim).
//   embedding_dense_backward      grad_output S(d), indices S(d) (d < indices.dim) -> P(sum): each
//                                 rank's lookups add up; grad_output S(last), indices R -> S(1).
//   nll_loss_backward             (self [N, C]) 'none': all S(0) (weight R); 'sum': grad_output R,
//                                 self S(0), target S(0) -> S(0); 'mean': grad_output R, self
//                                 S(0), target R -> S(0) (the divisor needs every target); any
//                                 reduction: self S(1) (classes), the rest R -> S(1). (self [C]:
//                                 the class row only.)
//   slice_backward / select_backward  shards of the other dims, mapped (select drops `dim`).
//                                 (grad_output S(dim) -> P(sum) is valid but not listed: it would
//                                 be taken for free and defer a reduction of the whole input.)
//   pooling backward              batch and channel dims sharded alike on grad_output, self
//                                 (indices) and the result; a spatial dim sharded alike on all of
//                                 them stays sharded through the backward halo exchange (DESIGN
//                                 §6; PyTorch replicates it): each rank sends the partial sums of
//                                 its neighbours' halo rows back to them. (A P(sum) row -- each
//                                 rank's output rows into the whole input -- is valid too but not
//                                 listed: greedy selection would take it for free and pay a
//                                 reduce-scatter of the whole input in the next op.)
//   value_selecting_reduction_backward  shards of the kept dims on grad and indices, mapped.
//   cummaxmin/cumprod/logcumsumexp_backward  shards of the other dims on all three tensors.
// A rule never makes a shard out of replicated inputs only (e.g. embedding rows) either: the
// greedy selection would take it for free and pay for it in the next op.
#include "ops/defs/steps.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

constexpr std::initializer_list<ReduceOp> kLinear = {ReduceOp::kSum, ReduceOp::kAvg};

// P(op) of input `grad` with every other input replicated -> P(op), for sum and avg.
void add_linear_in(RuleList& rules, int n_in, int grad) {
  for (ReduceOp op : kLinear) {
    Rule r;
    r.outputs.push_back(Partial(op));
    r.inputs.assign(n_in, Replicate());
    r.inputs[grad] = Partial(op);
    rules.push_back(r);
  }
}

// Every Partial op of input `grad` passes (others replicated): for ops that only place each grad
// element somewhere and write 0 elsewhere on every rank -- max/min over ranks keep those zeros too.
void add_pass_all(RuleList& rules, int n_in, int grad) {
  add_linear_in(rules, n_in, grad);
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
    Rule r;
    r.outputs.push_back(Partial(op));
    r.inputs.assign(n_in, Replicate());
    r.inputs[grad] = Partial(op);
    rules.push_back(r);
  }
}

// One output; dims d in `dims` sharded alike on the output and every input.
void add_alike(RuleList& rules, int n_in, const std::vector<int32_t>& dims) {
  for (int32_t d : dims) rules.push_back(uniform(1, n_in, Shard(d)));
}

}  // namespace

void register_backward_rules(Registry& reg) {
  reg.mutable_find("gelu_backward").rules = [](const OpCall& c) {
    const Shape out = c.op().meta(c)[0].shape;
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

  reg.mutable_find("embedding_dense_backward").rules = [](const OpCall& c) {
    const int32_t ri = static_cast<int32_t>(c.tensor(1).shape.size());
    RuleList rules;
    for (int32_t d = 0; d < ri; ++d) rules.push_back(row({Partial()}, {Shard(d), Shard(d)}));
    rules.push_back(row({Shard(1)}, {Shard(ri), Replicate()}));
    add_linear_in(rules, 2, 0);
    return rules;
  };

  reg.mutable_find("nll_loss_backward").rules = [](const OpCall& c) {
    const bool two_d = c.tensor(1).shape.size() == 2;
    const std::string red = c.get_str("reduction");
    const int n_in = c.num_tensors();  // weight (3), when given, stays replicated
    RuleList rules;
    auto add = [&](Placement out, Placement grad, Placement self, Placement target) {
      Rule r;
      r.outputs.push_back(out);
      r.inputs.assign(n_in, Replicate());
      r.inputs[0] = grad;
      r.inputs[1] = self;
      r.inputs[2] = target;
      rules.push_back(r);
    };
    const Placement R = Replicate();
    if (two_d) {
      // One kind of batch row per reduction: a target sharded on one mesh dim and replicated on
      // another would not line up with self's nested row blocks.
      if (red == "none") add(Shard(0), Shard(0), Shard(0), Shard(0));
      if (red == "sum") add(Shard(0), R, Shard(0), Shard(0));
      if (red == "mean") add(Shard(0), R, Shard(0), R);
      add(Shard(1), R, Shard(1), R);
    } else {
      add(Shard(0), R, Shard(0), R);
    }
    add_linear_in(rules, n_in, 0);
    return rules;
  };

  for (const char* name : {"slice_backward", "select_backward"}) {
    const bool select = std::string(name) == "select_backward";
    reg.mutable_find(name).rules = [select](const OpCall& c) {
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

  for (const std::string& name : reg.names()) {
    const bool pool = name.find("pool") != std::string::npos && name.ends_with("_backward");
    if (!pool || reg.find(name).family != "backward") continue;
    const int dims = name.find("1d") != std::string::npos ? 1 : name.find("3d") != std::string::npos ? 3 : 2;
    const uint8_t halo = ops::step_id(reg.find(name), "halo_exchange");
    reg.mutable_find(name).rules = [dims, halo](const OpCall& c) {
      const int32_t lead = static_cast<int32_t>(c.tensor(1).shape.size()) - dims;
      std::vector<int32_t> batch;
      for (int32_t d = 0; d < lead; ++d) batch.push_back(d);
      RuleList rules;
      add_alike(rules, c.num_tensors(), batch);
      // A spatial dim sharded alike on every input stays sharded through the backward halo
      // exchange (halo rows' partial sums go back to their owners).
      const int32_t rank = static_cast<int32_t>(c.tensor(1).shape.size());
      for (int32_t d = lead; d < rank; ++d) {
        Rule r = uniform(1, c.num_tensors(), Shard(d));
        r.step = halo;
        rules.push_back(r);
      }
      add_linear_in(rules, c.num_tensors(), 0);
      return rules;
    };
  }

  reg.mutable_find("value_selecting_reduction_backward").rules = [](const OpCall& c) {
    const int64_t rank = static_cast<int64_t>(c.get_int_list("sizes").size());
    const bool keep = c.get_bool("keepdim");
    RuleList rules;
    if (rank > 0) {
      const int64_t dim = norm_dim(c.get_int("dim"), rank);
      for (int64_t d = 0; d < rank; ++d) {
        if (d == dim) continue;
        const int32_t gd = static_cast<int32_t>(keep || d < dim ? d : d - 1);
        rules.push_back(row({Shard(static_cast<int32_t>(d))}, {Shard(gd), Shard(gd)}));
      }
    }
    add_pass_all(rules, 2, 0);
    return rules;
  };

  for (const char* name : {"cummaxmin_backward", "cumprod_backward", "logcumsumexp_backward"}) {
    reg.mutable_find(name).rules = [](const OpCall& c) {
      const int64_t rank = static_cast<int64_t>(c.tensor(1).shape.size());
      RuleList rules;
      if (rank > 0) {
        const int64_t dim = norm_dim(c.get_int("dim"), rank);
        std::vector<int32_t> others;
        for (int64_t d = 0; d < rank; ++d)
          if (d != dim) others.push_back(static_cast<int32_t>(d));
        add_alike(rules, 3, others);
      }
      add_linear_in(rules, 3, 0);
      return rules;
    };
  }
}

}  // namespace dtensor::strategies

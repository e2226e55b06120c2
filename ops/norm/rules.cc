// softmax, log_softmax, layer_norm, rms_norm: shards on the dims they do not normalize over; the
// affine weight and bias stay replicated.
#include "ops/common/steps.h"
#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {
namespace {

// Rows sharding each of the first `batch_dims` dims of input 0; the other inputs replicated.
RuleList batch_rules(const OpCall& c, int64_t skip_dim, int64_t batch_dims) {
  RuleList rules;
  for (int64_t d = 0; d < batch_dims; ++d) {
    if (d == skip_dim) continue;
    Rule r;
    r.outputs.push_back(Shard(static_cast<int32_t>(d)));
    r.inputs.push_back(Shard(static_cast<int32_t>(d)));
    for (int t = 1; t < c.num_tensors(); ++t) r.inputs.push_back(Replicate());
    rules.push_back(std::move(r));
  }
  return rules;
}

}  // namespace

void register_norm_rules(Registry& reg) {
  for (const char* name : {"softmax", "log_softmax"}) {
    OpDef& op = reg.mutable_find(name);
    const uint8_t stats = ops::step_id(op, "softmax_stats");
    op.rules = [stats](const OpCall& c, const OutMeta&) {
      const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
      const int64_t dim = norm_dim(c.get_int("dim"), rank);
      RuleList rules = batch_rules(c, dim, rank);
      // The normalized dim stays sharded: max and sum-of-exp all-reduces (DESIGN §6).
      rules.push_back(row({Shard(static_cast<int32_t>(dim))}, {Shard(static_cast<int32_t>(dim))}, stats));
      return rules;
    };
  }
  for (const char* name : {"layer_norm", "rms_norm"}) {
    reg.mutable_find(name).rules = [](const OpCall& c, const OutMeta&) {
      const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
      const int64_t normed = static_cast<int64_t>(c.get_int_list("normalized_shape").size());
      return batch_rules(c, -1, rank - normed);
    };
  }
  // native_layer_norm_backward (grad_out, input, mean, rstd [, weight, bias]) and
  // native_group_norm_backward (grad_out, input, mean, rstd [, weight]): a batch dim (N for the
  // group norm) sharded on the first four gives grad_input sharded alike and the affine gradients
  // as partial sums; every gradient is linear in grad_out, so its Partial(sum/avg) passes.
  for (const char* name : {"native_layer_norm_backward", "native_group_norm_backward"}) {
    const bool group = std::string(name) == "native_group_norm_backward";
    reg.mutable_find(name).rules = [group](const OpCall& c, const OutMeta&) {
      const int64_t rank = static_cast<int64_t>(c.tensor(1).shape.size());
      const int64_t batch = group ? 1 : rank - static_cast<int64_t>(c.get_int_list("normalized_shape").size());
      RuleList rules;
      for (int64_t d = 0; d < batch; ++d) {
        Rule r;
        r.outputs = {Shard(static_cast<int32_t>(d)), Partial(), Partial()};
        r.inputs.assign(c.num_tensors(), Replicate());
        for (int t = 0; t < 4; ++t) r.inputs[t] = Shard(static_cast<int32_t>(d));
        rules.push_back(std::move(r));
      }
      add_linear_in(rules, c.num_tensors(), 0);
      for (Rule& r : rules)
        if (r.inputs[0].is_partial()) r.outputs.assign(3, r.inputs[0]);
      return rules;
    };
  }
  // native_group_norm: the batch dim N shards the output and the [N, group] statistics alike.
  reg.mutable_find("native_group_norm").rules = [](const OpCall& c, const OutMeta&) {
    RuleList rules = batch_rules(c, -1, 1);
    for (Rule& r : rules) r.outputs.assign(3, r.outputs[0]);
    return rules;
  };
  // native_layer_norm: its three outputs (the mean and rstd keep the input's rank) shard alike.
  reg.mutable_find("native_layer_norm").rules = [](const OpCall& c, const OutMeta&) {
    const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
    const int64_t normed = static_cast<int64_t>(c.get_int_list("normalized_shape").size());
    RuleList rules = batch_rules(c, -1, rank - normed);
    for (Rule& r : rules) r.outputs.assign(3, r.outputs[0]);
    return rules;
  };
  // layer_norm_backward (grad_out, input [, weight] -> grad_input, grad_weight, grad_bias): a batch
  // dim sharded on grad_out and input gives grad_input sharded alike and the weight and bias
  // gradients as partial sums over the ranks' rows; every gradient is linear in grad_out, so
  // P(sum)/P(avg) of grad_out passes (input and weight replicated).
  reg.mutable_find("layer_norm_backward").rules = [](const OpCall& c, const OutMeta&) {
    const int64_t rank = static_cast<int64_t>(c.tensor(1).shape.size());
    const int64_t normed = static_cast<int64_t>(c.get_int_list("normalized_shape").size());
    const int n_in = c.num_tensors();
    RuleList rules;
    for (int64_t d = 0; d < rank - normed; ++d) {
      Rule r;
      r.outputs = {Shard(static_cast<int32_t>(d)), Partial(), Partial()};
      r.inputs.assign(n_in, Replicate());
      r.inputs[0] = r.inputs[1] = Shard(static_cast<int32_t>(d));
      rules.push_back(std::move(r));
    }
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      Rule r;
      r.outputs.assign(3, Partial(op));
      r.inputs.assign(n_in, Replicate());
      r.inputs[0] = Partial(op);
      rules.push_back(std::move(r));
    }
    return rules;
  };
}

DTENSOR_FAMILY_PART("norm", kRules, register_norm_rules);

}  // namespace dtensor::strategies

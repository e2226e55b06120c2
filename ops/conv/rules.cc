// Single-mesh-dim rules of convolution and convolution_backward. Spatial sharding (a halo exchange)
// is not offered: a sharded spatial dim is gathered first.
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

void register_conv_rules(Registry& reg) {
  // convolution(input, weight, bias?): batch [S(0); S(0), R, R]; with groups = 1 output channels
  // [S(1); R, S(0), S(0)] and input channels [P; S(1), S(1), P] (each rank sums its channels' share,
  // the bias comes as pieces that add up to it); Partial through [P; P, R, P] and [P; R, P, P].
  reg.mutable_find("convolution").rules = [](const OpCall& c, const OutMeta&) {
    const bool has_bias = c.tensor_index("bias") >= 0;
    const bool dense = c.get_int("groups") == 1;
    RuleList rules;
    auto add = [&](Placement out, Placement x, Placement w, Placement b) {
      Rule r = row({out}, {x, w});
      if (has_bias) r.inputs.push_back(b);
      rules.push_back(r);
    };
    add(Shard(0), Shard(0), Replicate(), Replicate());
    if (dense) {
      add(Shard(1), Replicate(), Shard(0), Shard(0));
      add(Partial(), Shard(1), Shard(1), Partial());
    }
    add(Partial(), Partial(), Replicate(), Partial());
    add(Partial(), Replicate(), Partial(), Partial());
    return rules;
  };
  // convolution_backward(grad, input, weight) -> (grad_input, grad_weight, grad_bias):
  //   batch [S(0), P, P; S(0), S(0), R] (each rank's images add to the weight and bias gradients);
  //   groups = 1, output channels [P, S(0), S(0); S(1), R, S(0)]; input channels [S(1), S(1), R;
  //   R, S(1), S(1)]; every gradient linear in grad: [P, P, P; P, R, R]; grad_input linear in the
  //   weight and grad_weight in the input: [P, R, R; R, R, P] and [R, P, R; R, P, R].
  reg.mutable_find("convolution_backward").rules = [](const OpCall& c, const OutMeta&) {
    const bool dense = c.get_int("groups") == 1;
    RuleList rules;
    rules.push_back(row({Shard(0), Partial(), Partial()}, {Shard(0), Shard(0), Replicate()}));
    if (dense) {
      rules.push_back(row({Partial(), Shard(0), Shard(0)}, {Shard(1), Replicate(), Shard(0)}));
      rules.push_back(row({Shard(1), Shard(1), Replicate()}, {Replicate(), Shard(1), Shard(1)}));
    }
    rules.push_back(row({Partial(), Partial(), Partial()}, {Partial(), Replicate(), Replicate()}));
    rules.push_back(row({Partial(), Replicate(), Replicate()}, {Replicate(), Replicate(), Partial()}));
    rules.push_back(row({Replicate(), Partial(), Replicate()}, {Replicate(), Partial(), Replicate()}));
    return rules;
  };
}

}  // namespace

DTENSOR_FAMILY_PART("conv", kRules, register_conv_rules);

}  // namespace dtensor::strategies

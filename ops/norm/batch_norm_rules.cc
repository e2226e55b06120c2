// Single-mesh-dim rules of _native_batch_norm_legit_functional (batch_norm_defs.cc): tensor inputs
// (input, weight?, bias?, running_mean, running_var); outputs (out, save_mean, save_invstd,
// running_mean_out, running_var_out).
//   channels:  input S(1), the [C] tensors S(0) -> out S(1), the [C] outputs S(0) (in evaluation
//              save_mean and save_invstd are empty [0]: replicated)
//   dim d != 1 of the input (batch or spatial): the [C] tensors replicated -> out S(d), the [C]
//              outputs replicated; in training through the step sync_stats, whose all-reduced
//              statistics every rank then holds (without it a block's statistics are its own).
// No Partial row: the output is not linear in the input (nor affine with a zero offset).
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

void register_batch_norm_rules(Registry& reg) {
  reg.mutable_find("_native_batch_norm_legit_functional").rules = [](const OpCall& c, const OutMeta&) {
    const int n_in = c.num_tensors();
    const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
    const bool training = c.get_bool("training");
    RuleList rules;
    Rule ch;
    ch.inputs.assign(n_in, Shard(0));
    ch.inputs[0] = Shard(1);
    ch.outputs = {Shard(1), training ? Shard(0) : Replicate(), training ? Shard(0) : Replicate(), Shard(0), Shard(0)};
    rules.push_back(ch);
    for (int64_t d = 0; d < rank; ++d) {
      if (d == 1) continue;
      Rule r;
      r.inputs.assign(n_in, Replicate());
      r.inputs[0] = Shard(static_cast<int32_t>(d));
      r.outputs = {Shard(static_cast<int32_t>(d)), Replicate(), Replicate(), Replicate(), Replicate()};
      if (training) r.step = 1;  // sync_stats
      rules.push_back(r);
    }
    return rules;
  };
}

}  // namespace

DTENSOR_FAMILY_PART("norm", kRules, register_batch_norm_rules);

}  // namespace dtensor::strategies

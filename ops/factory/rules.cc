// Factory rules: rows with outputs only (a factory has no tensor input). Every factory computes any
// block of its output from the block's global offset (LocalContext::out_block), so each output dim
// may be sharded; the engine adds the all-Replicate row. No Partial row: every rank makes the whole
// value, so a reduction over the ranks would count it once per rank (dispatch/factory.h refuses it).
// randperm's S(0) is its block of the whole permutation, which each rank computes (the permutation
// of a block depends on every key).
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

RuleList shard_every_dim(const OpCall&, const OutMeta& out) {
  RuleList rules;
  for (int32_t d = 0; d < static_cast<int32_t>(out[0].shape.size()); ++d) rules.push_back(row({Shard(d)}, {}));
  return rules;
}

void register_factory_rules(Registry& reg) {
  for (const char* name : {"arange", "arange.start", "arange.start_step", "empty.memory_format", "empty_strided",
                           "full", "rand", "randn", "randperm"})
    reg.mutable_find(name).rules = shard_every_dim;
}

}  // namespace

DTENSOR_FAMILY_PART("factory", kRules, register_factory_rules);

}  // namespace dtensor::strategies

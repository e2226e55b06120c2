// Reductions over a list of dims (DESIGN §4, §6). A shard on a kept dim stays (renumbered when
// keepdim is false); a shard on a reduced dim becomes Partial where the reduction distributes:
// sum and mean -> P(sum) (mean divides each local sum by the global count, so it is exact on uneven
// shards), amax and any -> P(max), amin and all -> P(min). prod, var, std and logsumexp need the reduced dims whole.
// Partial inputs pass through the reductions that commute with them.
#include "ops/common/steps.h"
#include "strategies/common.h"
#include "ops/family.h"

namespace dtensor::strategies {
namespace {

// kAny / kAll: P(max) / P(min) over a sharded reduced dim like kMax / kMin, but no Partial input
// passes: any(x != 0) is not monotone in x (Partial(max) pieces -1 and 0 of a 0).
enum class Kind { kSum, kMean, kMax, kMin, kAny, kAll, kWhole };

// The reduced dims of a call (normalized); all dims when the list is empty or None.
std::vector<bool> reduced_dims(const OpCall& c, int64_t rank) {
  std::vector<int64_t> dims = c.get_int_list("dim");
  std::vector<bool> red(rank, dims.empty());
  if (rank == 0) return red;  // a 0-d tensor's dim 0 or -1: nothing to reduce, nothing to shard
  for (int64_t d : dims) red[norm_dim(d, rank)] = true;
  return red;
}

RuleList reduction_rules(const OpCall& c, Kind kind) {
  const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
  std::vector<bool> red = reduced_dims(c, rank);
  const bool keep = c.has("keepdim") && c.get_bool("keepdim");
  RuleList rules;
  for (int64_t d = 0; d < rank; ++d) {
    Placement in = Shard(static_cast<int32_t>(d));
    if (!red[d]) {
      int64_t od = d;
      if (!keep)
        for (int64_t k = 0; k < d; ++k) od -= red[k] ? 1 : 0;
      rules.push_back(row({Shard(static_cast<int32_t>(od))}, {in}));
    } else if (kind == Kind::kSum || kind == Kind::kMean) {
      rules.push_back(row({Partial()}, {in}));
    } else if (kind == Kind::kMax || kind == Kind::kAny) {
      rules.push_back(row({Partial(ReduceOp::kMax)}, {in}));
    } else if (kind == Kind::kMin || kind == Kind::kAll) {
      rules.push_back(row({Partial(ReduceOp::kMin)}, {in}));
    }
  }
  switch (kind) {
    case Kind::kSum:
    case Kind::kMean:
      add_partial_passthrough(rules, 1, 1, {ReduceOp::kSum, ReduceOp::kAvg});
      break;
    case Kind::kMax: add_partial_passthrough(rules, 1, 1, {ReduceOp::kMax}); break;
    case Kind::kMin: add_partial_passthrough(rules, 1, 1, {ReduceOp::kMin}); break;
    case Kind::kAny:
    case Kind::kAll:
    case Kind::kWhole: break;
  }
  return rules;
}

}  // namespace

void register_reduction_rules(Registry& reg) {
  for (auto [name, kind] : {std::pair{"sum", Kind::kSum}, {"mean", Kind::kMean}, {"amax", Kind::kMax},
                            {"amin", Kind::kMin}, {"all", Kind::kAll}, {"any", Kind::kAny},
                            {"prod", Kind::kWhole}, {"var", Kind::kWhole},
                            {"std", Kind::kWhole}}) {
    Kind k = kind;
    reg.mutable_find(name).rules = [k](const OpCall& c, const OutMeta&) { return reduction_rules(c, k); };
  }
  // logsumexp over one sharded dim: max and sum-of-exp all-reduces, the result replicated there.
  OpDef& lse = reg.mutable_find("logsumexp");
  const uint8_t stats = ops::step_id(lse, "softmax_stats");
  lse.rules = [stats](const OpCall& c, const OutMeta&) {
    RuleList rules = reduction_rules(c, Kind::kWhole);
    std::vector<int64_t> dims = c.get_int_list("dim");
    if (dims.size() == 1) {
      const int64_t d = norm_dim(dims[0], static_cast<int64_t>(c.tensor(0).shape.size()));
      rules.push_back(row({Replicate()}, {Shard(static_cast<int32_t>(d))}, stats));
    }
    return rules;
  };
}

DTENSOR_FAMILY_PART("reduction", kRules, register_reduction_rules);

}  // namespace dtensor::strategies

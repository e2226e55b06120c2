#include "strategies/common.h"

#include <mutex>

#include "ops/family.h"

namespace dtensor::strategies {

void add_partial_passthrough(RuleList& rules, int n_out, int n_in,
                             std::initializer_list<ReduceOp> ops) {
  for (ReduceOp op : ops) rules.push_back(uniform(n_out, n_in, Partial(op)));
}

namespace {

// One row per op: output Partial(op), input `grad` Partial(op), the others Replicate.
void add_partial_in(RuleList& rules, int n_in, int grad, std::initializer_list<ReduceOp> ops) {
  for (ReduceOp op : ops) {
    Rule r;
    r.outputs.push_back(Partial(op));
    r.inputs.assign(n_in, Replicate());
    r.inputs[grad] = Partial(op);
    rules.push_back(r);
  }
}

}  // namespace

void add_linear_in(RuleList& rules, int n_in, int grad) {
  add_partial_in(rules, n_in, grad, {ReduceOp::kSum, ReduceOp::kAvg});
}

void add_pass_all(RuleList& rules, int n_in, int grad) {
  add_partial_in(rules, n_in, grad, {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin});
}

void add_alike(RuleList& rules, int n_in, const std::vector<int32_t>& dims) {
  for (int32_t d : dims) rules.push_back(uniform(1, n_in, Shard(d)));
}

int64_t broadcast_dim(const Shape& in, const Shape& out, int64_t d) {
  int64_t od = d + static_cast<int64_t>(out.size()) - static_cast<int64_t>(in.size());
  if (in[d] != out[od]) return -1;
  return od;
}

int64_t norm_dim(int64_t d, int64_t rank) { return wrap_dim(d, rank, "dim"); }

void register_all_rules() {
  static std::once_flag once;
  std::call_once(once, [] { ops::run_family_parts(ops::FamilyPart::kRules, Registry::get()); });
}

}  // namespace dtensor::strategies

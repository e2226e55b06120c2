#include "strategies/common.h"

#include <mutex>

namespace dtensor::strategies {

void add_partial_passthrough(RuleList& rules, int n_out, int n_in,
                             std::initializer_list<ReduceOp> ops) {
  for (ReduceOp op : ops) rules.push_back(uniform(n_out, n_in, Partial(op)));
}

int64_t broadcast_dim(const Shape& in, const Shape& out, int64_t d) {
  int64_t od = d + static_cast<int64_t>(out.size()) - static_cast<int64_t>(in.size());
  if (in[d] != out[od]) return -1;
  return od;
}

int64_t norm_dim(int64_t d, int64_t rank) { return wrap_dim(d, rank, "dim"); }

void register_all_rules() {
  static std::once_flag once;
  std::call_once(once, [] {
    Registry& r = Registry::get();
    register_pointwise_rules(r);
    register_matrix_rules(r);
    register_reduction_rules(r);
    register_norm_rules(r);
    register_embedding_rules(r);
    register_view_rules(r);
    register_loss_rules(r);
    register_scan_rules(r);
    register_selection_rules(r);
    register_pooling_rules(r);
    register_backward_rules(r);
    register_attention_rules(r);
  });
}

}  // namespace dtensor::strategies

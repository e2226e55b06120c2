// index.Tensor (tensor inputs: self, then the index tensors in dim order) and index_put (self, the
// index tensors, values). With L = self[indices]'s layout (kernels/cpu/advanced_index.h):
// index: a dim of self left alone shards through to its result dim (indices replicated); self
// sharded along an indexed dim gives Partial(sum) pieces (each block looks up the indices it holds;
// not for bool, whose sum is not an or); any Partial of self passes (a selection of elements); the
// index tensors sharded together along a dim of their broadcast shape B (a broadcast size-1 one
// replicated) shard the result there (self replicated).
// index_put: self sharded on a dim left alone with values sharded on the matching dim (replicated
// where values broadcast it); self sharded along an indexed dim with values replicated (a block
// writes what lands in it). With accumulate (x + the sum of values at the indices, linear in x and
// values together): Partial(sum/avg) self and values; Partial(sum) self with the index tensors
// sharded along a dim of B and values with them (each rank adds its indices' values). Without
// accumulate (each written element is values', the rest self's, the same positions on every rank):
// Partial(op) self and values for every op, and Partial(avg/max/min) self with values replicated
// (the ops that give v from v on every rank).
#include "kernels/cpu/advanced_index.h"
#include "ops/family.h"
#include "strategies/common.h"

namespace dtensor::strategies {
namespace {

kernels::AdvancedIndexLayout layout_of(const OpCall& c) {
  std::vector<std::optional<Shape>> shapes;
  for (int t : c.tensor_list("indices")) shapes.push_back(t < 0 ? std::nullopt : std::optional<Shape>(c.tensor(t).shape));
  return kernels::advanced_index_layout(c.name().c_str(), c.tensor(0).shape, shapes);
}

// The index tensors' placements for sharding B's dim j: Shard of the aligned dim where a tensor has
// B's size there, Replicate where it broadcasts (size 1 or no such dim); empty when none has it.
std::vector<Placement> index_shards(const OpCall& c, const kernels::AdvancedIndexLayout& l, size_t j) {
  std::vector<Placement> out;
  bool any = false;
  const int64_t nb = static_cast<int64_t>(l.broadcast.size());
  for (int t : c.tensor_list("indices")) {
    if (t < 0) continue;
    const Shape& s = c.tensor(t).shape;
    const int64_t a = static_cast<int64_t>(j) - (nb - static_cast<int64_t>(s.size()));
    if (a >= 0 && s[a] == l.broadcast[j] && s[a] > 1) {
      out.push_back(Shard(static_cast<int32_t>(a)));
      any = true;
    } else {
      out.push_back(Replicate());
    }
  }
  if (!any) out.clear();
  return out;
}

// A row: output, self, the index tensors (`index`, or all replicated when empty), then `more`.
Rule make_row(Placement out, Placement self, const std::vector<Placement>& index, int n_index,
              std::vector<Placement> more = {}) {
  Rule r;
  r.outputs.push_back(out);
  r.inputs.push_back(self);
  for (int k = 0; k < n_index; ++k) r.inputs.push_back(index.empty() ? Placement(Replicate()) : index[k]);
  r.inputs.insert(r.inputs.end(), more.begin(), more.end());
  return r;
}

int count_indices(const OpCall& c) {
  int n = 0;
  for (int t : c.tensor_list("indices")) n += t >= 0;
  return n;
}

RuleList index_rules(const OpCall& c) {
  RuleList rules;
  const kernels::AdvancedIndexLayout l = layout_of(c);
  const int k = count_indices(c);
  const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
  const bool boolean = c.tensor(0).dtype == DType::kBool;
  for (int64_t d = 0; d < rank; ++d) {
    const auto sd = static_cast<int32_t>(d);
    if (l.result_dim[d] >= 0) rules.push_back(make_row(Shard(static_cast<int32_t>(l.result_dim[d])), Shard(sd), {}, k));
    else if (!boolean) rules.push_back(make_row(Partial(), Shard(sd), {}, k));
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin})
    rules.push_back(make_row(Partial(op), Partial(op), {}, k));
  for (size_t j = 0; j < l.broadcast.size(); ++j) {
    const std::vector<Placement> idx = index_shards(c, l, j);
    if (!idx.empty()) rules.push_back(make_row(Shard(static_cast<int32_t>(l.first + j)), Replicate(), idx, k));
  }
  return rules;
}

RuleList index_put_rules(const OpCall& c) {
  RuleList rules;
  const kernels::AdvancedIndexLayout l = layout_of(c);
  const int k = count_indices(c);
  const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
  const Shape& values = c.tensor(c.num_tensors() - 1).shape;
  const bool accumulate = c.get_bool("accumulate");
  // values' placement for result dim q sharded: Shard of values' aligned dim where it has the size.
  const auto values_at = [&](int64_t q) -> Placement {
    const int64_t v = q - static_cast<int64_t>(l.result.size() - values.size());
    if (v >= 0 && values[v] == l.result[q]) return Shard(static_cast<int32_t>(v));
    return Replicate();
  };
  for (int64_t d = 0; d < rank; ++d) {
    const auto sd = static_cast<int32_t>(d);
    rules.push_back(make_row(Shard(sd), Shard(sd), {}, k, {l.result_dim[d] >= 0 ? values_at(l.result_dim[d]) : Replicate()}));
  }
  if (accumulate) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg})
      rules.push_back(make_row(Partial(op), Partial(op), {}, k, {Partial(op)}));
    for (size_t j = 0; j < l.broadcast.size(); ++j) {
      const std::vector<Placement> idx = index_shards(c, l, j);
      if (!idx.empty()) rules.push_back(make_row(Partial(), Partial(), idx, k, {values_at(l.first + static_cast<int64_t>(j))}));
    }
  } else {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      rules.push_back(make_row(Partial(op), Partial(op), {}, k, {Partial(op)}));
      if (op != ReduceOp::kSum) rules.push_back(make_row(Partial(op), Partial(op), {}, k, {Replicate()}));
    }
  }
  return rules;
}

void register_advanced_indexing_rules(Registry& reg) {
  reg.mutable_find("index.Tensor").rules = [](const OpCall& c, const OutMeta&) { return index_rules(c); };
  reg.mutable_find("index_put").rules = [](const OpCall& c, const OutMeta&) { return index_put_rules(c); };
}

}  // namespace

DTENSOR_FAMILY_PART("indexing", kRules, register_advanced_indexing_rules);

}  // namespace dtensor::strategies

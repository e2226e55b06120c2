// nonzero's distributed step (DESIGN §6) for self sharded on any dims over any mesh dims: each rank
// finds its block's nonzeros with their global indices (the block's offset added), then, over each
// mesh dim that shards self (the last first), an all_gather of the ranks' row counts and one of their
// rows (all_gatherv). Every rank ends with all n rows, so the output is replicated and its row count
// (OpDef::data_dependent) agrees on every rank. The gathered order is the blocks' order; it is the
// global row-major order only when every sharded mesh dim splits the same tensor dim d and the dims
// before d have size 1 (then blocks are consecutive row-major ranges, gathered inner mesh dim
// first); otherwise the rows are sorted lexicographically, which is row-major order. On the host
// (the rows are data-sized and the sort is a host loop): a device self runs on a host copy.
#include <algorithm>
#include <numeric>

#include "kernels/cpu/nonzero.h"
#include "ops/common/steps.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

// True when the gathered blocks are already in row-major order (see above).
bool gathered_in_order(const Shape& global, const Placements& in, const std::vector<int>& mesh_dims) {
  int32_t d = -1;
  for (int md : mesh_dims) {
    if (d >= 0 && in[md].dim != d) return false;
    d = in[md].dim;
  }
  for (int32_t i = 0; i < d; ++i)
    if (global[i] != 1) return false;
  return true;
}

// rows [n, r] int64 sorted lexicographically.
Tensor sort_rows(const Tensor& rows) {
  const int64_t n = rows.size(0), r = rows.size(1);
  const int64_t* p = rows.data<int64_t>();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return std::lexicographical_compare(p + a * r, p + a * r + r, p + b * r, p + b * r + r);
  });
  Tensor out = Tensor::empty({n, r}, DType::kInt64);
  int64_t* q = out.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) std::copy(p + order[i] * r, p + order[i] * r + r, q + i * r);
  return out;
}

StepDef nonzero_gather_step() {
  StepDef step;
  step.name = "nonzero_gather";
  // Bytes: an upper bound, every element of self nonzero (its rows are n x r int64), plus the counts.
  step.traffic = [](const OpCall& c, const Strategy&, const std::vector<int>& dims) {
    const Shape& s = c.tensor(0).shape;
    const int64_t rows_bytes = numel(s) * static_cast<int64_t>(s.size()) * 8;
    int64_t bytes = 0;
    for (int md : dims) {
      const int64_t k = c.mesh_shape()[md];
      bytes += comm_bytes_sent(CommKind::kAllGather, k * 8, k) + comm_bytes_sent(CommKind::kAllGather, rows_bytes, k);
    }
    return StepTraffic{CommKind::kAllGather, bytes, 2 * static_cast<int>(dims.size())};
  };
  step.run = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx,
                const std::vector<int>& dims, const DeviceMesh& mesh, Timeout timeout) {
    const int64_t r = static_cast<int64_t>(c.tensor(0).shape.size());
    Tensor rows = kernels::nonzero(in[0], ctx.in_block(c, 0).second);  // global indices
    for (auto md = dims.rbegin(); md != dims.rend(); ++md) {
      ProcessGroup& g = mesh.group(*md);
      const int k = g.size();
      Tensor mine = Tensor::full({1}, static_cast<double>(rows.size(0)), DType::kInt64);
      Tensor all = Tensor::empty({k}, DType::kInt64);
      g.all_gather(mine, all, std::vector<int64_t>(k, 1), timeout);
      std::vector<int64_t> counts = all.to_vector<int64_t>();
      const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
      for (int64_t& n : counts) n *= r;
      Tensor gathered = Tensor::empty({total * r}, DType::kInt64);
      g.all_gather(rows.contiguous().reshape({-1}), gathered, counts, timeout);
      rows = gathered.view({total, r});
    }
    if (!gathered_in_order(c.tensor(0).shape, ctx.strategy->inputs[0], dims)) rows = sort_rows(rows);
    return std::vector<Tensor>{rows};
  };
  return step;
}

void add_nonzero_steps(Registry& reg) { reg.mutable_find("nonzero").steps.push_back(nonzero_gather_step()); }

}  // namespace

DTENSOR_FAMILY_PART("indexing", kSteps, add_nonzero_steps);

}  // namespace dtensor::ops

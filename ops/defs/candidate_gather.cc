// The candidate gather of max.dim / min.dim / argmax / argmin over a sharded reduced dim: each rank
// reduces its block to (value, global index) candidates, the candidates are all_gathered over each
// mesh dim's group in turn, and every rank picks the winner by the single-device rule (NaN wins and
// the first NaN; among equal values the lowest index). The rule is associative, so gathering over
// several mesh dims one after another (argmax of a whole tensor sharded on two mesh dims) is exact.
#include <cmath>

#include "ops/defs/steps.h"

namespace dtensor::ops {
namespace {

// Does candidate (a, ia) beat (b, ib) for a max (is_max) or min reduction?
bool beats(double a, int64_t ia, double b, int64_t ib, bool is_max) {
  if (ia < 0) return false;  // empty block: no candidate
  if (ib < 0) return true;
  bool na = std::isnan(a), nb = std::isnan(b);
  if (na || nb) return na && (!nb || ia < ib);
  if (a != b) return is_max ? a > b : a < b;
  return ia < ib;
}

}  // namespace

// values, indices: this rank's candidates (same shape on every rank of each group; index -1 = none).
// Returns the winners after gathering over `mesh_dims` in turn.
std::pair<Tensor, Tensor> gather_candidates(Tensor values, Tensor indices, bool is_max,
                                            const std::vector<int>& mesh_dims, const DeviceMesh& mesh,
                                            Timeout timeout) {
  const DType dt = values.dtype();
  Tensor v = values.to(DType::kFloat64).contiguous().clone();
  Tensor ix = indices.contiguous().clone();
  const int64_t n = v.numel();
  for (int md : mesh_dims) {
    ProcessGroup& g = mesh.group(md);
    const int k = g.size();
    Tensor all_v = Tensor::empty({k * n}, DType::kFloat64), all_i = Tensor::empty({k * n}, DType::kInt64);
    g.all_gather(v.reshape({n}), all_v, std::vector<int64_t>(k, n), timeout);
    g.all_gather(ix.reshape({n}), all_i, std::vector<int64_t>(k, n), timeout);
    const double* pv = all_v.data<double>();
    const int64_t* pi = all_i.data<int64_t>();
    double* bv = v.data<double>();
    int64_t* bi = ix.data<int64_t>();
    for (int64_t e = 0; e < n; ++e) {
      bv[e] = pv[e];
      bi[e] = pi[e];
      for (int r = 1; r < k; ++r)
        if (beats(pv[r * n + e], pi[r * n + e], bv[e], bi[e], is_max)) {
          bv[e] = pv[r * n + e];
          bi[e] = pi[r * n + e];
        }
    }
  }
  return {v.view(values.sizes()).to(dt), ix.view(indices.sizes())};
}

}  // namespace dtensor::ops

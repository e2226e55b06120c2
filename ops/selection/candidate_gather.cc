// The candidate gather of max.dim / min.dim / argmax / argmin over a sharded reduced dim: each rank
// reduces its block to (value, global index) candidates, the candidates are all_gathered over each
// mesh dim's group in turn, and every rank picks the winner by the single-device rule (NaN wins and
// the first NaN; among equal values the lowest index). The rule is associative, so gathering over
// several mesh dims one after another (argmax of a whole tensor sharded on two mesh dims) is exact.
#include <limits>
#include <tuple>

#include "ops/common/steps.h"

namespace dtensor::ops {
namespace {

Tensor as_f64(const Tensor& mask) { return mask.to(DType::kFloat64); }  // bool -> 0 / 1

// The winner of each column of k candidates (values [k, n] float64, indices [k, n] int64, -1: no
// candidate) by the rule above, as ([n] values, [n] indices). Kernels only (masks as 0/1 float64
// products), so it runs where the candidates are: no host copy on a device.
std::pair<Tensor, Tensor> pick_winners(const Tensor& v, const Tensor& i, bool is_max) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const Device dev = v.device();
  const Tensor valid = as_f64(kernels::ge(i, Scalar(0)));
  const Tensor nan = kernels::mul(as_f64(kernels::ne(v, v)), valid);  // NaN candidates
  const Tensor plain = kernels::sub(valid, nan, Scalar(1));           // the others
  const Tensor worst = Tensor::full({1}, is_max ? -kInf : kInf, DType::kFloat64, dev);
  const Tensor score = kernels::where(kernels::gt(plain, Scalar(0.5)), v, worst);
  const Tensor best = is_max ? kernels::amax(score, {0}, true) : kernels::amin(score, {0}, true);
  const Tensor at_best = kernels::mul(plain, as_f64(kernels::eq(v, best)));
  // NaN candidates win where there is one; among the winners, the lowest index.
  const Tensor any_nan = kernels::amax(nan, {0}, true);
  const Tensor win = kernels::gt(kernels::where(kernels::gt(any_nan, Scalar(0.5)), nan, at_best), Scalar(0.5));
  const Tensor above = Tensor::full({1}, 4.0e18, DType::kInt64, dev);  // above every index
  const Tensor lowest = kernels::amin(kernels::where(win, i, above), {0}, true);
  // A column without candidates (every block of the group empty) stays without: index -1.
  const Tensor idx = kernels::where(kernels::eq(lowest, above), Tensor::full({1}, -1, DType::kInt64, dev), lowest);
  // The winner's own value (its sign of zero, its NaN): the max of it and -inf fillers.
  const Tensor mine = kernels::mul(as_f64(win), as_f64(kernels::eq(i, idx)));
  const Tensor minus_inf = Tensor::full({1}, -kInf, DType::kFloat64, dev);
  const Tensor val = kernels::amax(kernels::where(kernels::gt(mine, Scalar(0.5)), v, minus_inf), {0}, false);
  return {val, idx.reshape({-1})};
}

}  // namespace

// values, indices: this rank's candidates (same shape on every rank of each group; index -1 = none).
// Returns the winners after gathering over `mesh_dims` in turn.
std::pair<Tensor, Tensor> gather_candidates(Tensor values, Tensor indices, bool is_max,
                                            const std::vector<int>& mesh_dims, const DeviceMesh& mesh,
                                            Timeout timeout) {
  const DType dt = values.dtype();
  const Device dev = values.device();
  Tensor v = values.to(DType::kFloat64).contiguous().reshape({-1});
  Tensor ix = indices.contiguous().reshape({-1});
  const int64_t n = v.numel();
  for (int md : mesh_dims) {
    ProcessGroup& g = mesh.group(md);
    const int k = g.size();
    Tensor all_v = Tensor::empty({k * n}, DType::kFloat64, dev), all_i = Tensor::empty({k * n}, DType::kInt64, dev);
    g.all_gather(v, all_v, std::vector<int64_t>(k, n), timeout);
    g.all_gather(ix, all_i, std::vector<int64_t>(k, n), timeout);
    std::tie(v, ix) = pick_winners(all_v.view({k, n}), all_i.view({k, n}), is_max);
  }
  return {v.contiguous().view(values.sizes()).to(dt), ix.contiguous().view(indices.sizes())};
}

}  // namespace dtensor::ops

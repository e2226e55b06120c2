// Pairwise p-norm distances with ATen's semantics: _cdist_forward(x1 [*, P, M], x2 [*, R, M], p,
// compute_mode) -> [*, P, R] (batch dims broadcast) and its gradient _cdist_backward(grad, x1, x2,
// p, cdist) -> x1's gradient [*, P, M] over the broadcast batch (torch's autograd calls it for x1,
// and for x2 with the operands and grad.mT swapped). The kernels compose element-wise kernels and
// reductions over the [*, P, R, M] differences, as ATen's CPU kernel's formulas per p:
//   p = 0: count of non-zero differences; 1: sum |d|; 2: sqrt(sum d^2); inf: max |d| (cdist skips
//   NaNs there, pdist propagates them, as ATen's two kernels do);
//   other: (sum |d|^p)^(1/p); p = 2 with compute_mode 1, or None/0 when P or R exceeds 25, takes
//   ATen's matrix-product form (_euclidean_dist: sqrt(clamp_min(|x|^2 + |y|^2 - 2 x.y, 1e-30))).
// The backward per p: 0 -> 0; 1 -> sign(d); p < 2 -> sign(d) |d|^(p-1) / dist^(p-1) (0 where dist
// is 0, or d is 0 and p < 1); 2 -> d / dist (0 where dist is 0); inf -> sign(d) where |d| = dist;
// other -> d |d|^(p-2) / dist^(p-1) (0 where dist is 0); times grad, summed over R.
// _pdist_forward(self [N, M], p) -> [N (N - 1) / 2]: the distances of rows i < j in row-major order
// (the upper triangle of cdist(self, self)), and _pdist_backward(grad, self, p, pdist): cdist's
// backward with the triangle mirrored (each distance moves both of its rows).
// Rules: ops/matrix/distance_rules.cc; autograd: ops/matrix/distance_backward.cc.
#include <cmath>
#include <limits>

#include "kernels/cpu/backward.h"

#include "dtensor/partial_split.h"
#include "ops/common/backward_defs.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

namespace K = kernels;

// x1 [*, P, M] and x2 [*, R, M] as [*, P, 1, M] - [*, 1, R, M].
Tensor differences(const Tensor& x1, const Tensor& x2) {
  return K::sub(x1.unsqueeze(-2), x2.unsqueeze(-3));
}

// 16-bit floats compute in float32 (ATen's opmath), rounding once at the end: the gradient stays
// linear in grad, as a Partial(sum) grad needs.
Tensor opmath(const Tensor& t) {
  return t.dtype() == DType::kBFloat16 || t.dtype() == DType::kFloat16 ? t.to(DType::kFloat32) : t;
}

Tensor sign(const Tensor& d) { return K::sub(K::gt(d, 0.0).to(d.dtype()), K::lt(d, 0.0).to(d.dtype())); }

// ATen's choice of the matrix-product form (cdist_impl), on the global row counts.
bool use_mm(double p, std::optional<int64_t> mode, int64_t r1, int64_t r2) {
  return p == 2 && (mode == 1 || ((!mode || *mode == 0) && (r1 > 25 || r2 > 25)));
}

Tensor euclidean_mm(const Tensor& x1, const Tensor& x2) {
  const Tensor n1 = K::sum(K::mul(x1, x1), {-1}, true), n2 = K::sum(K::mul(x2, x2), {-1}, true);
  const Tensor one1 = Tensor::full(n1.sizes(), 1.0, x1.dtype(), x1.device());
  const Tensor one2 = Tensor::full(n2.sizes(), 1.0, x2.dtype(), x2.device());
  const Tensor a = K::cat({K::mul(x1, -2.0), n1, one1}, x1.dim() - 1);
  const Tensor b = K::cat({x2, one2, n2}, x2.dim() - 1);
  const Tensor prod = K::matmul(a, b.transpose(-2, -1).contiguous());
  return K::sqrt(K::maximum(prod, Tensor::full({}, 1e-30, prod.dtype(), prod.device())));
}

// skip_nan: the inf-norm skips NaN differences (ATen's cdist kernel: std::max(agg, nan) keeps agg);
// its pdist kernel propagates them.
Tensor cdist(const Tensor& x1, const Tensor& x2, double p, bool mm, bool skip_nan = true) {
  if (mm) return euclidean_mm(x1, x2);
  const Tensor d = differences(x1, x2);
  if (p == 0) return K::sum(K::ne(d, 0.0).to(d.dtype()), {-1});
  const Tensor a = K::abs(d);
  if (p == 1) return K::sum(a, {-1});
  if (p == 2) return K::sqrt(K::sum(K::mul(d, d), {-1}));
  if (std::isinf(p))
    return K::amax(skip_nan ? K::where(K::ne(a, a), Tensor::zeros({}, a.dtype(), a.device()), a) : a, {-1});
  return K::pow(K::sum(K::pow(a, p), {-1}), 1.0 / p);
}

Tensor cdist_backward(const Tensor& grad, const Tensor& x1, const Tensor& x2, double p, const Tensor& dist) {
  const Tensor d = differences(x1, x2);
  const Tensor r = dist.unsqueeze(-1);  // [*, P, R, 1]
  const Tensor zero = Tensor::zeros({}, d.dtype(), d.device());
  const Tensor at_zero = K::eq(r, 0.0);
  Tensor f;
  if (p == 1) f = sign(d);
  else if (std::isinf(p)) f = K::mul(sign(d), K::eq(K::abs(d), r).to(d.dtype()));
  else if (p == 2) f = K::where(at_zero, zero, K::div(d, r));
  else if (p < 2) {
    const Tensor v = K::div(K::mul(sign(d), K::pow(K::abs(d), p - 1)), K::pow(r, p - 1));
    f = K::where(at_zero, zero, p < 1 ? K::where(K::eq(d, 0.0), zero, v) : v);
  } else {
    f = K::where(at_zero, zero, K::div(K::mul(d, K::pow(K::abs(d), p - 2)), K::pow(r, p - 1)));
  }
  return K::sum(K::mul(grad.unsqueeze(-1), f), {-2});
}

// ATen's checks (cdist_impl), then the output's batch dims (broadcast) and [P, R].
Shape cdist_shape(const OpCall& c, int t1, int t2, const char* n1, const char* n2) {
  const Shape &a = c.tensor(t1).shape, &b = c.tensor(t2).shape;
  if (a.size() < 2 || b.size() < 2)
    fail(c, absl::StrCat(n1, " ", shape_str(a), " and ", n2, " ", shape_str(b),
                         ": accepted: at least 2-d tensors [..., rows, columns]"));
  if (a.back() != b.back())
    fail(c, absl::StrCat(n1, " ", shape_str(a), " and ", n2, " ", shape_str(b),
                         " must have the same number of columns"));
  for (int t : {t1, t2})
    if (!is_floating(c.tensor(t).dtype))
      fail(c, absl::StrCat("dtype ", dtype_name(c.tensor(t).dtype), "; accepted: floating dtypes"));
  if (c.tensor(t1).dtype != c.tensor(t2).dtype)
    fail(c, absl::StrCat(n1, " and ", n2, " have dtypes ", dtype_name(c.tensor(t1).dtype), " and ",
                         dtype_name(c.tensor(t2).dtype), "; accepted: the same dtype"));
  const double p = c.get_double("p");
  if (!(p >= 0)) fail(c, absl::StrCat("p = ", p, "; accepted: a non-negative p (inf included)"));
  Shape batch = guard(c, [&] {
    return K::broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  });
  batch.push_back(a[a.size() - 2]);
  batch.push_back(b[b.size() - 2]);
  guard(c, [&] { return numel(batch); });  // the element count must fit int64
  return batch;
}

// Contraction-class cost: `per` FLOPs per output element and element of the reduced dim (input t's
// dim `at`): the difference, its power and the sum.
OpCost distance_cost(Keeps keeps, double per, int t, int at) {
  OpCost k = cost(CostClass::kContraction, keeps);
  k.flops = [per, t, at](const OpCall& c, const std::vector<TensorMeta>& out) {
    const Shape& s = c.tensor(t).shape;
    return per * static_cast<double>(numel(out[0].shape)) * static_cast<double>(s[s.size() + at]);
  };
  return k;
}

void define_cdist(Registry& reg) {
  OpDef& op = reg.define("_cdist_forward(Tensor x1, Tensor x2, float p, int? compute_mode) -> Tensor", "matrix");
  op.cost = distance_cost(Keeps::kInputsAndOutput, 3, 0, -1);  // over the columns M
  op.meta = [](const OpCall& c) {
    const std::optional<int64_t> mode = c.get_opt_int("compute_mode");
    if (mode && (*mode < 0 || *mode > 2))
      fail(c, absl::StrCat("compute_mode ", *mode, "; accepted: None, 0, 1 or 2"));
    return std::vector<TensorMeta>{{cdist_shape(c, 0, 1, "x1", "x2"), c.tensor(0).dtype}};
  };
  // Rows [P, R] of the block from x1's and x2's blocks; the matrix-product form is chosen on the
  // global row counts, as on one device.
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const Shape &a = c.tensor(0).shape, &b = c.tensor(1).shape;
    const Shape out = ctx.out_block(0).first;
    if (in[0].size(-1) == 0) return one(Tensor::zeros(out, in[0].dtype(), in[0].device()));
    const bool mm = use_mm(c.get_double("p"), c.get_opt_int("compute_mode"), a[a.size() - 2], b[b.size() - 2]);
    return one(cdist(opmath(in[0]), opmath(in[1]), c.get_double("p"), mm).to(in[0].dtype()).contiguous());
  });
  op.samples = [] {
    std::vector<Sample> s;
    for (double p : {0.0, 1.0, 2.0, 1.5, 3.0, std::numeric_limits<double>::infinity()})
      s.push_back(sample({{2, 5, 4}, {2, 6, 4}}, {T(0), T(1), V(p), V(IValue())}));
    s.push_back(sample({{3, 5, 4}, {1, 6, 4}}, {T(0), T(1), V(2.0), V(IValue())}));           // broadcast batch
    s.push_back(sample({{27, 3}, {5, 3}}, {T(0), T(1), V(2.0), V(IValue())}, {}, {DType::kFloat64, DType::kFloat64}));
    s.push_back(sample({{4, 3}, {5, 3}}, {T(0), T(1), V(2.0), I(1)}));                        // mm form asked
    return s;
  };

  OpDef& bwd =
      reg.define("_cdist_backward(Tensor grad, Tensor x1, Tensor x2, float p, Tensor cdist) -> Tensor", "matrix");
  bwd.cost = distance_cost(Keeps::kNothing, 5, 2, -2);  // over x2's rows R
  bwd.no_backward = kNoDoubleBackward;
  bwd.meta = [](const OpCall& c) {
    Shape out = cdist_shape(c, 1, 2, "x1", "x2");
    check_floating(c, 0, "grad");
    check_shape(c, 0, "grad (the forward output's shape)", out);
    check_shape(c, 3, "cdist (the forward output)", out);
    out.back() = c.tensor(1).shape.back();  // [*, P, M]
    return std::vector<TensorMeta>{{out, c.tensor(1).dtype}};
  };
  bwd.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const double p = c.get_double("p");
    const Shape out = ctx.out_block(0).first;
    if (p == 0 || in[1].size(-1) == 0 || in[2].size(-2) == 0)
      return one(Tensor::zeros(out, in[1].dtype(), in[1].device()));
    const Tensor g = cdist_backward(opmath(in[0]), opmath(in[1]), opmath(in[2]), p, opmath(in[3]));
    return one(g.to(in[1].dtype()).contiguous());
  });
  bwd.samples = [] {
    std::vector<Sample> s;
    for (double p : {1.0, 2.0, 0.5, 1.5, 3.0, std::numeric_limits<double>::infinity()})
      s.push_back(sample({{2, 5, 6}, {2, 5, 4}, {2, 6, 4}, {2, 5, 6}}, {T(0), T(1), T(2), V(p), T(3)}));
    return s;
  };
  // cdist must be the forward of x1 and x2 (the formulas divide by it).
  bwd.make_input = [](int i, const OpCall& c, uint64_t seed) {
    auto x = [&](int t) { return random_tensor(c.tensor(t).shape, c.tensor(t).dtype, kBackwardFixedSeed + t); };
    if (i == 1 || i == 2) return x(i);
    if (i == 3) return cdist(x(1), x(2), c.get_double("p"), false).contiguous();
    return random_tensor(c.tensor(i).shape, c.tensor(i).dtype, seed);
  };
}

// Flat positions i * n + j of the pairs i < j of an n x n matrix, row-major (pdist's order).
Tensor upper_pairs(int64_t n, Device device) {
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) idx.push_back(i * n + j);
  const int64_t k = static_cast<int64_t>(idx.size());
  return Tensor::from_vector(idx, {k}).to(device);
}

Tensor pdist(const Tensor& x, double p) {
  const int64_t n = x.size(0);
  return K::index_select(cdist(x, x, p, false, false).reshape({n * n}), 0, upper_pairs(n, x.device()));
}

// The pairs' gradient g [K] spread over the n x n matrix, mirrored: row i's distance to j moves
// both rows, so cdist's backward over the symmetric matrix gives self's gradient.
Tensor pdist_backward(const Tensor& grad, const Tensor& x, double p, const Tensor& dist) {
  const int64_t n = x.size(0);
  const Tensor pairs = upper_pairs(n, x.device());
  auto spread = [&](const Tensor& v) {  // [K] -> [n, n], upper triangle, zeros elsewhere
    return K::embedding_dense_backward(v.reshape({v.numel(), 1}), pairs, n * n).reshape({n, n});
  };
  const Tensor g = spread(grad), d = spread(dist);
  const Tensor sym = K::add(g, g.transpose(0, 1).contiguous());
  return cdist_backward(sym, x, x, p, K::add(d, d.transpose(0, 1).contiguous()));
}

void define_pdist(Registry& reg) {
  auto check = [](const OpCall& c, int t, const char* name) {
    const Shape& s = c.tensor(t).shape;
    if (s.size() != 2)
      fail(c, absl::StrCat(name, " ", shape_str(s), ": accepted: a 2-d tensor [rows, columns]"));
    if (!is_floating(c.tensor(t).dtype))
      fail(c, absl::StrCat("dtype ", dtype_name(c.tensor(t).dtype), "; accepted: floating dtypes"));
    const double p = c.get_double("p");
    if (!(p >= 0)) fail(c, absl::StrCat("p = ", p, "; accepted: a non-negative p (inf included)"));
    const int64_t n = s[0];
    return Shape{n > 1 ? n * (n - 1) / 2 : 0};
  };
  OpDef& op = reg.define("_pdist_forward(Tensor self, float p=2) -> Tensor", "matrix");
  op.cost = distance_cost(Keeps::kInputsAndOutput, 1.5, 0, -1);  // half of cdist(self, self)
  op.meta = [check](const OpCall& c) { return std::vector<TensorMeta>{{check(c, 0, "self"), c.tensor(0).dtype}}; };
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    if (in[0].size(1) == 0 || in[0].size(0) < 2)
      return one(Tensor::zeros(ctx.out_block(0).first, in[0].dtype(), in[0].device()));
    return one(pdist(opmath(in[0]), c.get_double("p")).to(in[0].dtype()).contiguous());
  });
  op.samples = [] {
    std::vector<Sample> s;
    for (double p : {0.0, 1.0, 2.0, 1.5, std::numeric_limits<double>::infinity()})
      s.push_back(sample({{6, 4}}, {T(0), V(p)}));
    return s;
  };
  OpDef& bwd = reg.define("_pdist_backward(Tensor grad, Tensor self, float p, Tensor pdist) -> Tensor", "matrix");
  bwd.cost = distance_cost(Keeps::kNothing, 2.5, 1, -2);
  bwd.no_backward = kNoDoubleBackward;
  bwd.meta = [check](const OpCall& c) {
    const Shape out = check(c, 1, "self");
    check_floating(c, 0, "grad");
    check_shape(c, 0, "grad (the forward output's shape)", out);
    check_shape(c, 2, "pdist (the forward output)", out);
    return std::vector<TensorMeta>{{c.tensor(1).shape, c.tensor(1).dtype}};
  };
  bwd.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const double p = c.get_double("p");
    if (p == 0 || in[1].size(1) == 0 || in[1].size(0) < 2)
      return one(Tensor::zeros(ctx.out_block(0).first, in[1].dtype(), in[1].device()));
    return one(pdist_backward(opmath(in[0]), opmath(in[1]), p, opmath(in[2])).to(in[1].dtype()).contiguous());
  });
  bwd.samples = [] {
    std::vector<Sample> s;
    for (double p : {1.0, 2.0, 0.5, 3.0, std::numeric_limits<double>::infinity()})
      s.push_back(sample({{15}, {6, 4}, {15}}, {T(0), T(1), V(p), T(2)}));
    return s;
  };
  bwd.make_input = [](int i, const OpCall& c, uint64_t seed) {
    const Tensor x = random_tensor(c.tensor(1).shape, c.tensor(1).dtype, kBackwardFixedSeed + 1);
    if (i == 1) return x;
    if (i == 2) return pdist(x, c.get_double("p")).contiguous();
    return random_tensor(c.tensor(i).shape, c.tensor(i).dtype, seed);
  };
}

void define_distance_ops(Registry& reg) {
  define_cdist(reg);
  define_pdist(reg);
}

}  // namespace

DTENSOR_FAMILY_PART("matrix", kDefinitions, define_distance_ops);

}  // namespace dtensor::ops

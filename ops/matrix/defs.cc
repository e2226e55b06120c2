// Matrix products through OpenBLAS (kernels/cpu/matrix.h).
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }

void check_float(const OpCall& c) {
  for (int t = 0; t < c.num_tensors(); ++t)
    if (!is_floating(c.tensor(t).dtype))
      fail(c, absl::StrCat("tensor ", t, " has dtype ", dtype_name(c.tensor(t).dtype),
                           "; accepted: float32, float64, bfloat16, float16"));
}

// mm and bmm (OpDef::complex): floating, or both operands of one complex dtype (torch's mm takes
// no mixed dtypes).
void check_float_or_complex(const OpCall& c) {
  const DType a = c.tensor(0).dtype, b = c.tensor(1).dtype;
  if (is_complex(a) || is_complex(b)) {
    if (a != b)
      fail(c, absl::StrCat("operands ", dtype_name(a), " and ", dtype_name(b),
                           "; accepted: two tensors of one complex dtype, or floating ones"));
    return;
  }
  check_float(c);
}

DType promoted(const OpCall& c) {
  DType d = c.tensor(0).dtype;
  for (int t = 1; t < c.num_tensors(); ++t) d = kernels::promote_types(d, c.tensor(t).dtype);
  return d;
}

// Output shape of torch.matmul, or an error naming both shapes.
Shape matmul_shape(const OpCall& c, const Shape& a, const Shape& b) {
  if (a.empty() || b.empty()) fail(c, "matmul needs tensors of at least 1 dim");
  Shape aa = a, bb = b;
  bool a1 = aa.size() == 1, b1 = bb.size() == 1;
  if (a1) aa.insert(aa.begin(), 1);
  if (b1) bb.push_back(1);
  if (aa.back() != bb[bb.size() - 2])
    fail(c, absl::StrCat("contraction dims differ: ", shape_str(a), " @ ", shape_str(b),
                         "; accepted: self[..., n, k] @ other[..., k, m]"));
  Shape ba(aa.begin(), aa.end() - 2), bbat(bb.begin(), bb.end() - 2);
  Shape batch = kernels::broadcast_shapes(ba, bbat);
  Shape out = batch;
  if (!a1) out.push_back(aa[aa.size() - 2]);
  if (!b1) out.push_back(bb.back());
  return out;
}

}  // namespace

void define_matrix_ops(Registry& reg) {
  {
    OpDef& op = reg.define("mm(Tensor self, Tensor mat2) -> Tensor", "matrix");
    op.cost = contraction_cost(0);
    op.meta = [](const OpCall& c) {
      check_float_or_complex(c);
      const Shape &a = c.tensor(0).shape, &b = c.tensor(1).shape;
      if (a.size() != 2 || b.size() != 2 || a[1] != b[0])
        fail(c, "accepted: self[n, k] @ mat2[k, m] (2-d, equal contraction dims)");
      return std::vector<TensorMeta>{{{a[0], b[1]}, promoted(c)}};
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) {
      return one(kernels::mm(in[0], in[1]));
    };
    op.samples = [] {
      return std::vector<Sample>{sample({{6, 5}, {5, 7}}, {T(0), T(1)}),
                                 sample({{3, 9}, {9, 4}}, {T(0), T(1)}, {}, {DType::kFloat64, DType::kFloat64}),
                                 sample({{4, 6}, {6, 3}}, {T(0), T(1)}, {}, {DType::kComplex64, DType::kComplex64})};
    };
    op.complex = true;  // cgemm/zgemm (kernels/cpu/matrix.cc); the rules are linear in each operand
  }
  {
    OpDef& op = reg.define("bmm(Tensor self, Tensor mat2) -> Tensor", "matrix");
    op.cost = contraction_cost(0);
    op.meta = [](const OpCall& c) {
      check_float_or_complex(c);
      const Shape &a = c.tensor(0).shape, &b = c.tensor(1).shape;
      if (a.size() != 3 || b.size() != 3 || a[0] != b[0] || a[2] != b[1])
        fail(c, "accepted: self[b, n, k] @ mat2[b, k, m]");
      return std::vector<TensorMeta>{{{a[0], a[1], b[2]}, promoted(c)}};
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) {
      return one(kernels::bmm(in[0], in[1]));
    };
    op.samples = [] {
      return std::vector<Sample>{sample({{5, 3, 4}, {5, 4, 6}}, {T(0), T(1)}),
                                 sample({{4, 3, 2}, {4, 2, 5}}, {T(0), T(1)}, {}, {DType::kComplex128, DType::kComplex128})};
    };
    op.complex = true;  // as mm's
  }
  {
    OpDef& op = reg.define(
        "addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor", "matrix");
    op.cost = contraction_cost(1, "self");
    op.meta = [](const OpCall& c) {
      check_float(c);
      const Shape &a = c.tensor(1).shape, &b = c.tensor(2).shape;
      if (a.size() != 2 || b.size() != 2 || a[1] != b[0])
        fail(c, "accepted: mat1[n, k] @ mat2[k, m] and self broadcastable to [n, m]");
      Shape out{a[0], b[1]};
      if (guard(c, [&] { return kernels::broadcast_shapes(c.tensor(0).shape, out); }) != out)
        fail(c, absl::StrCat("self ", shape_str(c.tensor(0).shape), " does not broadcast to ", shape_str(out)));
      return std::vector<TensorMeta>{{out, promoted(c)}};
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      return one(kernels::addmm(in[0], in[1], in[2], c.get_double("beta"), c.get_double("alpha")));
    };
    op.samples = [] {
      return std::vector<Sample>{sample({{7}, {6, 5}, {5, 7}}, {T(0), T(1), T(2)}),
                                 sample({{6, 7}, {6, 5}, {5, 7}}, {T(0), T(1), T(2)}, {{"beta", V(0.5)}, {"alpha", V(2.0)}})};
    };
  }
  {
    OpDef& op = reg.define("linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor", "matrix");
    op.cost = contraction_cost(0, "bias");
    op.meta = [](const OpCall& c) {
      check_float(c);
      const Shape &x = c.tensor(0).shape, &w = c.tensor(1).shape;
      if (x.empty() || w.size() != 2 || x.back() != w[1])
        fail(c, "accepted: input[..., in] with weight[out, in] and bias[out]");
      int b = c.tensor_index("bias");
      if (b >= 0 && c.tensor(b).shape != Shape{w[0]})
        fail(c, absl::StrCat("bias must have shape [", w[0], "]"));
      Shape out = x;
      out.back() = w[0];
      return std::vector<TensorMeta>{{out, promoted(c)}};
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      std::optional<Tensor> bias;
      if (c.tensor_index("bias") >= 0) bias = in[c.tensor_index("bias")];
      return one(kernels::linear(in[0], in[1], bias));
    };
    op.samples = [] {
      return std::vector<Sample>{sample({{4, 3, 6}, {5, 6}, {5}}, {T(0), T(1), T(2)}),
                                 sample({{7, 6}, {4, 6}}, {T(0), T(1)})};
    };
  }
  {
    OpDef& op = reg.define("matmul(Tensor self, Tensor other) -> Tensor", "matrix");
    op.cost = contraction_cost(0);
    op.meta = [](const OpCall& c) {
      check_float(c);
      return std::vector<TensorMeta>{
          {guard(c, [&] { return matmul_shape(c, c.tensor(0).shape, c.tensor(1).shape); }), promoted(c)}};
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall&, const LocalContext&) {
      return one(kernels::matmul(in[0], in[1]));
    };
    op.samples = [] {
      return std::vector<Sample>{sample({{2, 5, 6}, {6, 3}}, {T(0), T(1)}),
                                 sample({{3, 4, 5}, {3, 5, 2}}, {T(0), T(1)}),
                                 sample({{5, 4}, {4}}, {T(0), T(1)})};
    };
  }
}

DTENSOR_FAMILY_PART("matrix", kDefinitions, define_matrix_ops);

}  // namespace dtensor::ops

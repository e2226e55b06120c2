// Backward formulas of the matrix products: d(A B) = dC B^T, A^T dC.
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {
DTensor t(const DTensor& x) { return F::transpose(x, -1, -2); }
// The adjoint for complex x (torch's mm derivative: grad @ other^H), the transpose for real.
DTensor h(const DTensor& x) { return is_complex(x.dtype()) ? call_op1("conj_physical", {t(x)}) : t(x); }
}  // namespace

void register_matrix_backward(Registry&) {
  def("mm", [](const BackwardCtx& c) {
    DTensor g = c.grad(0);
    return Grads{F::mm(g, h(c.inputs[1])), F::mm(h(c.inputs[0]), g)};
  });
  def("bmm", [](const BackwardCtx& c) {
    DTensor g = c.grad(0);
    return Grads{F::bmm(g, h(c.inputs[1])), F::bmm(h(c.inputs[0]), g)};
  });
  def("addmm", [](const BackwardCtx& c) {
    DTensor g = c.grad(0);
    double beta = c.call.get_double("beta"), alpha = c.call.get_double("alpha");
    DTensor g1 = F::mm(g, t(c.inputs[2])), g2 = F::mm(t(c.inputs[1]), g);
    if (alpha != 1.0) {
      g1 = F::mul(g1, alpha);
      g2 = F::mul(g2, alpha);
    }
    return Grads{sum_to(beta == 1.0 ? g : F::mul(g, beta), c.inputs[0].shape()), g1, g2};
  });
  def("linear", [](const BackwardCtx& c) {
    DTensor g = c.grad(0);
    const DTensor &x = c.inputs[0], &w = c.inputs[1];
    const int64_t out = w.shape()[0], in = w.shape()[1];
    DTensor g2 = F::reshape(g, {-1, out}), x2 = F::reshape(x, {-1, in});
    Grads r{F::matmul(g, w), F::mm(t(g2), x2)};
    if (c.inputs.size() > 2) r.push_back(F::sum(g2, {0}));
    return r;
  });
  def("matmul", [](const BackwardCtx& c) {
    DTensor g = c.grad(0);
    const DTensor &a = c.inputs[0], &b = c.inputs[1];
    if (a.dim() >= 2 && b.dim() == 2) {
      const int64_t k = a.shape().back(), m = b.shape().back();
      return Grads{F::matmul(g, t(b)), F::mm(t(F::reshape(a, {-1, k})), F::reshape(g, {-1, m}))};
    }
    // 1-d operands: treat as [1, k] / [k, 1] matrices (the output lacks that dim), then drop it.
    DTensor a2 = a.dim() == 1 ? F::unsqueeze(a, 0) : a;
    DTensor b2 = b.dim() == 1 ? F::unsqueeze(b, 1) : b;
    DTensor g2 = g;
    if (a.dim() == 1) g2 = F::unsqueeze(g2, g2.dim() - (b.dim() == 1 ? 0 : 1));
    if (b.dim() == 1) g2 = F::unsqueeze(g2, g2.dim());
    DTensor ga = sum_to(F::matmul(g2, t(b2)), a2.shape()), gb = sum_to(F::matmul(t(a2), g2), b2.shape());
    auto shape = [](const DTensor& x) { return std::vector<int64_t>(x.shape().begin(), x.shape().end()); };
    return Grads{F::reshape(ga, shape(a)), F::reshape(gb, shape(b))};
  });
}

DTENSOR_FAMILY_PART("matrix", kBackward, register_matrix_backward);

}  // namespace dtensor::bw

// Backward formulas of the reductions: the gradient is broadcast back over the reduced dims; amax and
// amin split it evenly among ties (torch's evenly_distribute convention).
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {

int64_t count(const Shape& s, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= s[d];
  return n;
}

bool keep(const OpCall& c) { return c.has("keepdim") && c.get_bool("keepdim"); }

}  // namespace

void register_reduction_backward(Registry&) {
  def("sum", [](const BackwardCtx& c) {
    const DTensor& x = c.inputs[0];
    return Grads{unreduce(c.grad(0), x.shape(), reduced_dims(c.call, x.dim()), keep(c.call))};
  });
  def("mean", [](const BackwardCtx& c) {
    const DTensor& x = c.inputs[0];
    auto dims = reduced_dims(c.call, x.dim());
    return Grads{F::div(unreduce(c.grad(0), x.shape(), dims, keep(c.call)), static_cast<double>(count(x.shape(), dims)))};
  });
  for (const char* name : {"amax", "amin"}) {
    def(name, [](const BackwardCtx& c) {
      const DTensor& x = c.inputs[0];
      auto dims = reduced_dims(c.call, x.dim());
      DTensor out = unreduce(c.outputs[0], x.shape(), dims, keep(c.call));
      DTensor mask = as_float(call_op1("eq", {x, out}), x.dtype());
      DTensor n = unreduce(F::sum(mask, dims, keep(c.call)), x.shape(), dims, keep(c.call));
      return Grads{F::div(F::mul(unreduce(c.grad(0), x.shape(), dims, keep(c.call)), mask), n)};
    });
  }
  def("prod", [](const BackwardCtx& c) {
    // g * prod / x: exact for inputs without zeros (documented limitation).
    const DTensor& x = c.inputs[0];
    auto dims = reduced_dims(c.call, x.dim());
    DTensor go = unreduce(F::mul(c.grad(0), c.outputs[0]), x.shape(), dims, keep(c.call));
    return Grads{F::div(go, x)};
  });
  for (const char* name : {"var", "std"}) {
    bool is_var = std::string(name) == "var";
    def(name, [is_var](const BackwardCtx& c) {
      const DTensor& x = c.inputs[0];
      auto dims = reduced_dims(c.call, x.dim());
      double corr = c.call.has("correction") ? c.call.get_double("correction") : 1.0;
      double denom = static_cast<double>(count(x.shape(), dims)) - corr;
      DTensor xc = F::sub(x, F::mean(x, dims, true));
      DTensor g = unreduce(c.grad(0), x.shape(), dims, keep(c.call));
      if (is_var) return Grads{F::mul(F::mul(g, xc), 2.0 / denom)};
      DTensor s = unreduce(c.outputs[0], x.shape(), dims, keep(c.call));
      return Grads{F::div(F::mul(g, xc), F::mul(s, denom))};
    });
  }
  def("logsumexp", [](const BackwardCtx& c) {
    const DTensor& x = c.inputs[0];
    auto dims = reduced_dims(c.call, x.dim());
    DTensor out = unreduce(c.outputs[0], x.shape(), dims, keep(c.call));
    return Grads{F::mul(unreduce(c.grad(0), x.shape(), dims, keep(c.call)), F::exp(F::sub(x, out)))};
  });
}

DTENSOR_FAMILY_PART("reduction", kBackward, register_reduction_backward);

}  // namespace dtensor::bw

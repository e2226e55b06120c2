// Backward formulas of the scans (cumsum directly; the others through their *_backward ops, which
// carry their own sharding rules).
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {

void register_scan_backward(Registry&) {
  // cumsum: the suffix sum of the gradient = total - inclusive prefix + g (all shard-aware ops).
  def("cumsum", [](const BackwardCtx& c) {
    int64_t d = c.call.get_int("dim");
    DTensor g = c.grad(0);
    DTensor total = F::expand(F::sum(g, {d}, true), {g.shape().begin(), g.shape().end()});
    return Grads{F::add(F::sub(total, call_op1("cumsum", {g, iv(d)})), g)};
  });
  def("cumprod", [](const BackwardCtx& c) {
    return Grads{call_op1("cumprod_backward", {c.grad(0), c.inputs[0], iv(c.call.get_int("dim")), c.outputs[0]})};
  });
  def("logcumsumexp", [](const BackwardCtx& c) {
    return Grads{call_op1("logcumsumexp_backward", {c.grad(0), c.inputs[0], c.outputs[0], iv(c.call.get_int("dim"))})};
  });
  for (const char* name : {"cummax", "cummin"})
    def(name, [](const BackwardCtx& c) {
      return Grads{call_op1("cummaxmin_backward", {c.grad(0), c.inputs[0], c.outputs[1], iv(c.call.get_int("dim"))})};
    });
}

DTENSOR_FAMILY_PART("scan", kBackward, register_scan_backward);

}  // namespace dtensor::bw

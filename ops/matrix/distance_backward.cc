// Backward of _cdist_forward and _pdist_forward (ops/matrix/distance_defs.cc), as torch's
// derivatives.yaml writes them:
// x1's gradient is _cdist_backward(grad, x1, x2, p, cdist); x2's the same with the operands, grad
// and cdist transposed, summed over the batch dims x2 was broadcast along; self's of pdist is
// _pdist_backward(grad, self, p, pdist).
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {

void register_distance_backward(Registry&) {
  def("_cdist_forward", [](const BackwardCtx& c) {
    const DTensor& out = c.outputs[0];
    const IValue p = iv(c.call.get_double("p"));
    const DTensor g1 = call_op1("_cdist_backward", {c.grad(0), c.inputs[0], c.inputs[1], p, out});
    const DTensor gt = F::transpose(c.grad(0), -2, -1), ot = F::transpose(out, -2, -1);
    const DTensor g2 = call_op1("_cdist_backward", {gt, c.inputs[1], c.inputs[0], p, ot});
    return Grads{g1.shape() == c.inputs[0].shape() ? g1 : sum_to(g1, c.inputs[0].shape()),
                 g2.shape() == c.inputs[1].shape() ? g2 : sum_to(g2, c.inputs[1].shape())};
  });
  def("_pdist_forward", [](const BackwardCtx& c) {
    return Grads{call_op1("_pdist_backward", {c.grad(0), c.inputs[0], iv(c.call.get_double("p")), c.outputs[0]})};
  });
}

DTENSOR_FAMILY_PART("matrix", kBackward, register_distance_backward);

}  // namespace dtensor::bw

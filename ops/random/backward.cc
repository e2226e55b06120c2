// d philox_dropout(input, p, seed, offset) / d input = native_dropout_backward(grad, mask, 1 / (1 - p))
// (0 when p = 1), the mask being the forward's second output; the mask has no gradient.
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {

void register_random_backward(Registry&) {
  def("philox_dropout", [](const BackwardCtx& c) {
    const double p = c.call.get_double("p");
    const double scale = p == 1 ? 0.0 : 1.0 / (1.0 - p);
    return Grads{call_op1("native_dropout_backward", {c.grad(0), c.outputs[1], iv(scale)})};
  });
}

}  // namespace

DTENSOR_FAMILY_PART("random", kBackward, register_random_backward);

}  // namespace dtensor::bw

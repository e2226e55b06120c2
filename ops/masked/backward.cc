// Backward of masked_scatter: self's gradient is grad where the mask is false (summed back over
// the dims self was broadcast along), source's is masked_scatter_backward (grad at the true
// positions, in their order; zero past the count). The mask gets none (bool).
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {

void register_masked_backward(Registry&) {
  def("masked_scatter", [](const BackwardCtx& c) {
    const DTensor g = c.grad(0);
    Grads out(3);
    if (c.needs[0]) out[0] = sum_to(F::masked_fill(g, c.inputs[1], 0.0), c.inputs[0].shape());
    if (c.needs[2]) {
      const Shape& s = c.inputs[2].shape();
      out[2] = call_op1("masked_scatter_backward", {g, c.inputs[1], iv(std::vector<int64_t>(s.begin(), s.end()))});
    }
    return out;
  });
}

}  // namespace

DTENSOR_FAMILY_PART("masked", kBackward, register_masked_backward);

}  // namespace dtensor::bw

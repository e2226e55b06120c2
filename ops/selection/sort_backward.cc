// Backward of sort, sort.stable and topk: each output gradient goes back to the position its index
// names (scatter_add into zeros; the indices of one row are distinct, so adding is placing).
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {

void register_sort_backward(Registry&) {
  for (const char* name : {"sort", "sort.stable", "topk"})
    def(name, [](const BackwardCtx& c) {
      const DTensor& x = c.inputs[0];
      if (x.dim() == 0) return Grads{c.grad(0)};
      return Grads{call_op1("scatter_add", {full_like(x, 0.0), iv(c.call.get_int("dim")), c.outputs[1], c.grad(0)})};
    });
}

DTENSOR_FAMILY_PART("selection", kBackward, register_sort_backward);

}  // namespace dtensor::bw

// Backward formulas of the value-selecting reductions (max.dim, min.dim, median, nanmedian,
// kthvalue; argmax/argmin have no gradient).
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {

void register_selection_backward(Registry&) {
  for (const char* name : {"max.dim", "min.dim", "median.dim", "nanmedian.dim", "kthvalue"})
    def(name, [](const BackwardCtx& c) {
      const DTensor& x = c.inputs[0];
      return Grads{call_op1("value_selecting_reduction_backward",
                            {c.grad(0), iv(c.call.get_int("dim")), c.outputs[1],
                             iv(std::vector<int64_t>(x.shape().begin(), x.shape().end())), iv(c.call.get_bool("keepdim"))})};
    });
  // Whole-tensor median: the gradient is split evenly among the elements equal to the result (among
  // the NaNs when the result is NaN).
  for (const char* name : {"median", "nanmedian"})
    def(name, [](const BackwardCtx& c) {
      const DTensor& x = c.inputs[0];
      std::vector<int64_t> shape(x.shape().begin(), x.shape().end());
      DTensor out = F::expand(F::reshape(c.outputs[0], std::vector<int64_t>(shape.size(), 1)), shape);
      DTensor out_nan = call_op1("ne", {out, out});
      DTensor mask = F::where(out_nan, call_op1("ne", {x, x}), call_op1("eq", {x, out}));
      DTensor m = as_float(mask, x.dtype());
      DTensor g = F::expand(F::reshape(c.grad(0), std::vector<int64_t>(shape.size(), 1)), shape);
      return Grads{F::div(F::mul(g, m), F::expand(F::sum(m, {}, true), shape))};
    });
  for (const char* name : {"argmax", "argmin"}) def(name, [](const BackwardCtx& c) { return Grads(c.inputs.size()); });
}

DTENSOR_FAMILY_PART("selection", kBackward, register_selection_backward);

}  // namespace dtensor::bw

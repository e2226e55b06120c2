// Backward formulas of the complex family, as torch 2.15's derivatives.yaml
// (torchgen/packaged/autograd/derivatives.yaml) gives them: view_as_real -> view_as_complex(grad),
// view_as_complex -> view_as_real(grad), _conj and conj_physical -> the conjugate of grad,
// complex(real, imag) -> (real(grad), imag(grad)). real and imag are composite in torch (a select of
// view_as_real): their gradients are grad as the real part, and grad times i (imaginary part).
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {

void register_complex_backward(Registry&) {
  def("view_as_real", [](const BackwardCtx& c) { return Grads{call_op1("view_as_complex", {c.grad(0)})}; });
  def("view_as_complex", [](const BackwardCtx& c) { return Grads{call_op1("view_as_real", {c.grad(0)})}; });
  for (const char* name : {"conj_physical", "_conj"})
    def(name, [](const BackwardCtx& c) { return Grads{call_op1("conj_physical", {c.grad(0)})}; });
  def("complex", [](const BackwardCtx& c) {  // broadcast inputs: summed back to their shapes
    return Grads{sum_to(call_op1("real", {c.grad(0)}), c.inputs[0].shape()),
                 sum_to(call_op1("imag", {c.grad(0)}), c.inputs[1].shape())};
  });
  def("real", [](const BackwardCtx& c) {
    if (!is_complex(c.inputs[0].dtype())) return Grads{c.grad(0)};
    return Grads{call_op1("complex", {c.grad(0), F::mul(c.grad(0), 0.0)})};
  });
  def("imag", [](const BackwardCtx& c) {
    return Grads{call_op1("complex", {F::mul(c.grad(0), 0.0), c.grad(0)})};
  });
}

DTENSOR_FAMILY_PART("complex", kBackward, register_complex_backward);

}  // namespace dtensor::bw

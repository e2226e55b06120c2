// Backward of im2col and col2im: each is the other's adjoint (the same index relation, read one way
// and summed the other).
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {

void register_fold_backward(Registry&) {
  def("im2col", [](const BackwardCtx& c) {
    const Shape& x = c.inputs[0].shape();
    const std::vector<int64_t> hw{x[x.size() - 2], x[x.size() - 1]};
    return Grads{call_op1("col2im", {c.grad(0), iv(hw), c.call.value("kernel_size"), c.call.value("dilation"),
                                     c.call.value("padding"), c.call.value("stride")})};
  });
  def("col2im", [](const BackwardCtx& c) {
    return Grads{call_op1("im2col", {c.grad(0), c.call.value("kernel_size"), c.call.value("dilation"),
                                     c.call.value("padding"), c.call.value("stride")})};
  });
}

}  // namespace

DTENSOR_FAMILY_PART("conv", kBackward, register_fold_backward);

}  // namespace dtensor::bw

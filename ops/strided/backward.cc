// Backward of as_strided: each output element's gradient added into the flat position it read
// (several where the windows overlap): scatter_add into zeros of self's element count, at the
// positions kernels::as_strided_positions gives (the same on every rank: a replicated index).
#include "autograd/backward_util.h"
#include "kernels/cpu/strided.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {

void register_strided_backward(Registry&) {
  def("as_strided", [](const BackwardCtx& c) {
    const DTensor& x = c.inputs[0];
    const std::vector<int64_t> size = c.call.get_int_list("size"), stride = c.call.get_int_list("stride");
    const int64_t n = numel(x.shape());
    const Tensor pos = kernels::as_strided_positions(Shape(size.begin(), size.end()), Shape(stride.begin(), stride.end()),
                                                     c.call.get_opt_int("storage_offset").value_or(0), n);
    const DTensor index = distribute_tensor(pos.reshape({numel(pos.sizes())}), x.mesh(),
                                            Placements(x.placements().size(), Replicate()));
    const DTensor zeros = F::reshape(full_like(x, 0.0), {n});
    const DTensor g = F::reshape(c.grad(0), {numel(pos.sizes())});
    const Shape& shape = x.shape();
    return Grads{F::reshape(call_op1("scatter_add", {zeros, iv(int64_t{0}), index, g}),
                            std::vector<int64_t>(shape.begin(), shape.end()))};
  });
}

}  // namespace

DTENSOR_FAMILY_PART("strided", kBackward, register_strided_backward);

}  // namespace dtensor::bw

// convolution's backward: convolution_backward with the mask of the gradients asked for.
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {

void register_conv_backward(Registry&) {
  def("convolution", [](const BackwardCtx& c) {
    const OpCall& k = c.call;
    const int b = k.tensor_index("bias");
    const bool want_bias = b >= 0 && c.needs[b];
    const std::vector<int64_t> mask{c.needs[0] ? 1 : 0, c.needs[1] ? 1 : 0, want_bias ? 1 : 0};
    auto g = call_op("convolution_backward",
                     {c.grad(0), c.inputs[0], c.inputs[1], iv(std::vector<int64_t>{c.inputs[1].shape()[0]}),
                      k.value("stride"), k.value("padding"), k.value("dilation"), k.value("transposed"),
                      k.value("output_padding"), k.value("groups"), iv(mask)});
    Grads out{g[0], g[1]};
    if (b >= 0) out.push_back(g[2]);
    return out;
  });
}

}  // namespace

DTENSOR_FAMILY_PART("conv", kBackward, register_conv_backward);

}  // namespace dtensor::bw

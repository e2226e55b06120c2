// Backward formula of embedding: the dense gradient of the table (embedding_dense_backward).

#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {

void register_embedding_backward(Registry&) {
  def("embedding", [](const BackwardCtx& c) {
    const DTensor& w = c.inputs[0];
    return Grads{call_op1("embedding_dense_backward", {c.grad(0), c.inputs[1], iv(w.shape()[0])},
                          {{"padding_idx", iv(c.call.get_int("padding_idx"))}}),
                 std::nullopt};
  });
}

DTENSOR_FAMILY_PART("embedding", kBackward, register_embedding_backward);

}  // namespace dtensor::bw

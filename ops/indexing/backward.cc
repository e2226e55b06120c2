// d index_select(self, dim, index) / d self = index_select_backward(grad, self.shape, dim, index):
// the gradient rows scatter-added back to the indices they came from; index has none.
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {

void register_indexing_backward(Registry&) {
  def("index_select", [](const BackwardCtx& c) {
    const Shape& s = c.inputs[0].shape();
    return Grads{call_op1("index_select_backward",
                          {c.grad(0), iv(std::vector<int64_t>(s.begin(), s.end())), iv(c.call.get_int("dim")),
                           c.inputs[1]}),
                 std::nullopt};
  });
}

}  // namespace

DTENSOR_FAMILY_PART("indexing", kBackward, register_indexing_backward);

}  // namespace dtensor::bw

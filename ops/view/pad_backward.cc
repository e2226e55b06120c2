// Backward of reflection_pad{1,2,3}d and replication_pad{1,2,3}d (ops/view/pad_defs.cc): their
// ATen _backward ops, which scatter-add the gradient back through the padding's index map.
#include "autograd/backward_util.h"
#include "absl/strings/str_cat.h"
#include "ops/family.h"

namespace dtensor::bw {

void register_pad_backward(Registry&) {
  for (const char* mode : {"reflection", "replication"})
    for (int k = 1; k <= 3; ++k) {
      const std::string name = absl::StrCat(mode, "_pad", k, "d");
      def(name, [name](const BackwardCtx& c) {
        return Grads{call_op1(name + "_backward", {c.grad(0), c.inputs[0], iv(c.call.get_int_list("padding"))})};
      });
    }
}

DTENSOR_FAMILY_PART("view", kBackward, register_pad_backward);

}  // namespace dtensor::bw

// Backward of the index-map ops (ops/view/index_map_defs.cc): their ATen _backward ops, which
// scatter-add the gradient back through the op's index map.
#include "absl/strings/str_cat.h"
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {

void register_index_map_backward(Registry&) {
  for (const char* mode : {"reflection", "replication"})
    for (int k = 1; k <= 3; ++k) {
      const std::string name = absl::StrCat(mode, "_pad", k, "d");
      def(name, [name](const BackwardCtx& c) {
        return Grads{call_op1(name + "_backward", {c.grad(0), c.inputs[0], iv(c.call.get_int_list("padding"))})};
      });
    }
  for (const char* op : {"upsample_nearest2d", "upsample_bilinear2d"}) {
    const std::string name = op;
    def(name, [name](const BackwardCtx& c) {
      const Shape& s = c.inputs[0].shape();
      std::vector<OpArg> args = {c.grad(0), iv(c.call.get_int_list("output_size")),
                                 iv(std::vector<int64_t>(s.begin(), s.end()))};
      if (name == "upsample_bilinear2d") args.push_back(iv(c.call.get_bool("align_corners")));
      for (const char* scale : {"scales_h", "scales_w"})
        args.push_back(c.call.has(scale) ? iv(c.call.get_double(scale)) : IValue());  // None
      return Grads{call_op1(name + "_backward", args)};
    });
  }
}

DTENSOR_FAMILY_PART("view", kBackward, register_index_map_backward);

}  // namespace dtensor::bw

// Backward formulas of pooling, through the pooling *_backward ops (which carry their own sharding
// rules, the halo exchange included).
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {

IValue list_arg(const OpCall& c, const char* name) { return c.value(name); }

}  // namespace

void register_pooling_backward(Registry&) {
  for (int dims : {1, 2, 3}) {
    std::string d = std::to_string(dims);
    def("avg_pool" + d + "d", [d](const BackwardCtx& c) {
      const OpCall& k = c.call;
      return Grads{call_op1("avg_pool" + d + "d_backward",
                            {c.grad(0), c.inputs[0], list_arg(k, "kernel_size"), list_arg(k, "stride"),
                             list_arg(k, "padding"), k.value("ceil_mode"), k.value("count_include_pad"),
                             k.value("divisor_override")})};
    });
    def("max_pool" + d + "d_with_indices", [d](const BackwardCtx& c) {
      const OpCall& k = c.call;
      return Grads{call_op1("max_pool" + d + "d_with_indices_backward",
                            {c.grad(0), c.inputs[0], list_arg(k, "kernel_size"), list_arg(k, "stride"),
                             list_arg(k, "padding"), list_arg(k, "dilation"), k.value("ceil_mode"), c.outputs[1]})};
    });
  }
  for (const std::string d : {"1", "2", "3"})
    def("adaptive_avg_pool" + d + "d", [d](const BackwardCtx& c) {
      return Grads{call_op1("adaptive_avg_pool" + d + "d_backward", {c.grad(0), c.inputs[0]})};
    });
}

DTENSOR_FAMILY_PART("pooling", kBackward, register_pooling_backward);

}  // namespace dtensor::bw

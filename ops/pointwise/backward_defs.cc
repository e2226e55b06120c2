// Backward ops of the pointwise family that autograd/ calls by their ATen names: gelu_backward.
// Rules: ops/pointwise/rules.cc; shared helpers: ops/common/backward_defs.h.
#include "kernels/cpu/backward.h"

#include "ops/common/backward_defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

void define_gelu_backward(Registry& reg) {
  OpDef& op = reg.define("gelu_backward(Tensor grad_output, Tensor self, *, str approximate='none') -> Tensor",
                         "pointwise");
  op.cost = cost(CostClass::kTranscendental, Keeps::kNothing);
  op.no_backward = kNoDoubleBackward;
  // ATen's pointwise backward ops linear in the gradient and not in the other input have these
  // rules: (grad_output, input or output[, scalars]) run by ATen on the blocks.
  op.aten.aliases = {{"threshold_backward", "keep:2"}, {"sigmoid_backward", "keep:2"},
                     {"tanh_backward", "keep:2"}, {"silu_backward", "keep:2"}};
  op.meta = [](const OpCall& c) {
    check_floating(c, 0, "grad_output");
    check_floating(c, 1, "self");
    const std::string a = c.get_str("approximate");
    if (a != "none" && a != "tanh") fail(c, "approximate must be 'none' or 'tanh', got '" + a + "'");
    Shape s = guard(c, [&] { return kernels::broadcast_shapes(c.tensor(0).shape, c.tensor(1).shape); });
    return std::vector<TensorMeta>{{s, kernels::promote_types(c.tensor(0).dtype, c.tensor(1).dtype)}};
  };
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
    return one(kernels::gelu_backward(in[0], in[1], c.get_str("approximate")));
  });
  op.samples = [] {
    return std::vector<Sample>{
        sample({{6, 5}, {6, 5}}, {T(0), T(1)}),
        sample({{3, 7}, {3, 7}}, {T(0), T(1)}, {{"approximate", V(std::string("tanh"))}}),
        sample({{4, 7, 3}, {7, 1}}, {T(0), T(1)})};
  };
}

}  // namespace

void define_pointwise_backward_ops(Registry& reg) {
  define_gelu_backward(reg);
}

DTENSOR_FAMILY_PART("pointwise", kDefinitions, define_pointwise_backward_ops);

}  // namespace dtensor::ops

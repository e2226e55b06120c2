// Backward ops of the norm family that autograd/ calls: layer_norm_backward, the fused gradient of
// layer_norm (kernels/cpu/norm.h). dtensor's own schema: mean and rstd are recomputed from the input
// (the forward saves none), so it takes layer_norm's arguments rather than ATen's
// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask).
// Rules: ops/norm/rules.cc.
#include "kernels/cpu/norm.h"

#include "ops/common/backward_defs.h"
#include "ops/family.h"

namespace dtensor::ops {

void define_norm_backward_ops(Registry& reg) {
  OpDef& op = reg.define(
      "layer_norm_backward(Tensor grad_out, Tensor input, int[] normalized_shape, Tensor? weight=None, float eps=1e-05) -> (Tensor grad_input, Tensor grad_weight, Tensor grad_bias)",
      "norm");
  op.cost = cost(CostClass::kNormalization, Keeps::kNothing);
  op.aten.not_aten = "dtensor's layer_norm backward; ATen's native_layer_norm_backward runs as torch's decomposition";
  op.no_backward = kNoDoubleBackward;
  op.meta = [](const OpCall& c) {
    check_floating(c, 0, "grad_out");
    check_floating(c, 1, "input");
    const Shape& x = c.tensor(1).shape;
    check_shape(c, 0, "grad_out", x);
    const Shape norm = normalized_shape_arg(c, 1);
    const int wi = c.tensor_index("weight");
    if (wi >= 0) {
      check_floating(c, wi, "weight");
      check_shape(c, wi, "weight", norm);
    }
    const DType wt = wi >= 0 ? c.tensor(wi).dtype : c.tensor(1).dtype;
    return std::vector<TensorMeta>{{x, c.tensor(1).dtype}, {norm, wt}, {norm, wt}};
  };
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
    const std::vector<int64_t> ns = c.get_int_list("normalized_shape");
    std::optional<Tensor> w;
    if (c.has("weight")) w = in[c.tensor_index("weight")];
    return kernels::layer_norm_backward(in[0], in[1], Shape(ns.begin(), ns.end()), w, c.get_double("eps"));
  });
  op.samples = [] {
    return std::vector<Sample>{sample({{6, 5, 4}, {6, 5, 4}, {4}}, {T(0), T(1), L({4}), T(2)}),
                               sample({{7, 3, 4}, {7, 3, 4}}, {T(0), T(1), L({3, 4})})};
  };
}

DTENSOR_FAMILY_PART("norm", kDefinitions, define_norm_backward_ops);

}  // namespace dtensor::ops

// native_dropout_backward(grad_output, mask, scale) = grad_output * mask * scale (ATen's), the
// gradient of philox_dropout (and of ATen's native_dropout through the bridge).
#include "ops/common/backward_defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

void define_random_backward_ops(Registry& reg) {
  OpDef& op = reg.define("native_dropout_backward(Tensor grad_output, Tensor mask, float scale) -> Tensor", "random");
  op.cost = cost(CostClass::kElementwise, Keeps::kNothing);
  op.no_backward = kNoDoubleBackward;
  op.meta = [](const OpCall& c) {
    const TensorMeta& g = c.tensor(0);
    if (!is_floating(g.dtype))
      fail(c, absl::StrCat("grad_output dtype ", dtype_name(g.dtype), "; accepted: float32, float64, bfloat16, float16"));
    if (c.tensor(1).shape != g.shape)
      fail(c, absl::StrCat("mask ", shape_str(c.tensor(1).shape), " for grad_output ", shape_str(g.shape),
                           "; accepted: the same shape"));
    return std::vector<TensorMeta>{g};
  };
  op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
    return one(kernels::mul(kernels::mul(in[0], in[1].to(in[0].dtype())), Scalar(c.get_double("scale"))));
  };
  op.samples = [] {
    return std::vector<Sample>{sample({{8, 6}, {8, 6}}, {T(0), T(1), V(1.25)}, {}, {DType::kFloat32, DType::kBool}),
                               sample({{4, 3, 5}, {4, 3, 5}}, {T(0), T(1), V(2.0)}, {}, {DType::kFloat64, DType::kBool})};
  };
}

}  // namespace

DTENSOR_FAMILY_PART("random", kDefinitions, define_random_backward_ops);

}  // namespace dtensor::ops

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
    check_floating(c, 0, "grad_output");
    check_shape(c, 1, "mask", c.tensor(0).shape);
    return std::vector<TensorMeta>{c.tensor(0)};
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

// masked_scatter_backward(grad_output, mask, sizes) -> Tensor, ATen's schema: source's gradient
// of masked_scatter, shaped `sizes` (source's shape): grad_output's element at the k-th true
// element of the mask (row-major over grad_output's shape, the mask broadcast to it) at flat
// position k, zero past the count (kernels/cpu/masked.h). Rules: rules.cc.
#include "kernels/cpu/masked.h"

#include "ops/common/backward_defs.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

void define_masked_scatter_backward(Registry& reg) {
  OpDef& op = reg.define("masked_scatter_backward(Tensor grad_output, Tensor mask, SymInt[] sizes) -> Tensor", "masked");
  op.cost = cost(CostClass::kCopy, Keeps::kNothing);
  op.no_backward = kNoDoubleBackward;
  op.meta = [](const OpCall& c) {
    if (c.tensor(1).dtype != DType::kBool)
      fail(c, absl::StrCat("mask is ", dtype_name(c.tensor(1).dtype), "; accepted: bool"));
    const Shape& g = c.tensor(0).shape;
    if (guard(c, [&] { return kernels::broadcast_shapes(g, c.tensor(1).shape); }) != g)
      fail(c, "accepted: a mask that broadcasts to grad_output's shape");
    const std::vector<int64_t> sizes = c.get_int_list("sizes");
    for (int64_t s : sizes)
      if (s < 0) fail(c, "sizes must be >= 0");
    return std::vector<TensorMeta>{{Shape(sizes.begin(), sizes.end()), c.tensor(0).dtype}};
  };
  // A block of grad_output places its elements at their global ranks among the true ones.
  op.aten.layout_dependent = true;
  op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const auto [local, offset] = ctx.in_block(c, 0);
    const Shape& out = ctx.out_meta[0].shape;
    return one(guard(c, [&] {
      return kernels::masked_scatter_source_grad(in[0], in[1], numel(out), c.tensor(0).shape, offset).reshape(out);
    }));
  };
  op.samples = [] {
    return std::vector<Sample>{
        sample({{6, 5}, {6, 5}}, {T(0), T(1), L({30})}, {}, {DType::kFloat32, DType::kBool}),
        sample({{3, 4, 5}, {4, 5}}, {T(0), T(1), L({6, 11})}, {}, {DType::kFloat32, DType::kBool})};
  };
}

}  // namespace

DTENSOR_FAMILY_PART("masked", kDefinitions, define_masked_scatter_backward);

}  // namespace dtensor::ops

// masked_scatter(self, mask, source) -> Tensor, ATen's schema, over kernels/cpu/masked.h: self and
// the bool mask broadcast to the output shape; the k-th true element of the mask (row-major) takes
// source's k-th element (source read flat; it must have at least as many elements as the mask has
// true ones: a data-dependent check, made by the kernel on every rank alike since every rank holds
// the whole mask). source has self's dtype (any dtype).
// Rules: rules.cc; backward: backward.cc (masked_scatter_backward: backward_defs.cc).
#include "kernels/cpu/masked.h"

#include "ops/common/backward_defs.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

void define_masked_scatter(Registry& reg) {
  OpDef& op = reg.define("masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor", "masked");
  op.cost = cost(CostClass::kCopy);  // its backward reads the mask
  op.meta = [](const OpCall& c) {
    if (c.tensor(1).dtype != DType::kBool)
      fail(c, absl::StrCat("mask is ", dtype_name(c.tensor(1).dtype), "; accepted: bool"));
    if (c.tensor(2).dtype != c.tensor(0).dtype)
      fail(c, absl::StrCat("source is ", dtype_name(c.tensor(2).dtype), ", self ", dtype_name(c.tensor(0).dtype),
                           "; accepted: source of self's dtype"));
    const Shape out = guard(c, [&] { return kernels::broadcast_shapes(c.tensor(0).shape, c.tensor(1).shape); });
    return std::vector<TensorMeta>{{out, c.tensor(0).dtype}};
  };
  // A block's source elements start at the count of true mask elements before it.
  op.aten.layout_dependent = true;
  op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const auto [local, offset] = ctx.out_block(0);
    return one(guard(c, [&] {
      return kernels::masked_scatter(in[0].expand(local), in[1], in[2], ctx.out_meta[0].shape, offset);
    }));
  };
  op.samples = [] {
    // source as large as the output, so any mask fits; a mask broadcast over self's leading dim.
    return std::vector<Sample>{
        sample({{6, 5}, {6, 5}, {30}}, {T(0), T(1), T(2)}, {}, {DType::kFloat32, DType::kBool, DType::kFloat32}),
        sample({{3, 4, 5}, {4, 5}, {6, 11}}, {T(0), T(1), T(2)}, {}, {DType::kFloat32, DType::kBool, DType::kFloat32}),
        sample({{7, 3}, {7, 1}, {21}}, {T(0), T(1), T(2)}, {}, {DType::kInt64, DType::kBool, DType::kInt64})};
  };
}

}  // namespace

DTENSOR_FAMILY_PART("masked", kDefinitions, define_masked_scatter);

}  // namespace dtensor::ops

// as_strided and resize_, ATen's schemas, over kernels/cpu/strided.h, on the tensor's contiguous
// row-major layout (a dtensor tensor is not a view into another's storage, so its storage is its
// elements):
//   as_strided(self, size, stride, storage_offset=None) -> [size]: element i of the output is
//     self's flat element storage_offset + sum_k i_k stride_k (torch's, for a contiguous self);
//     positions past self's elements, negative sizes or strides are refused naming the call.
//   resize_(self, size) -> [size]: self's first elements in row-major order, zeros where it grows
//     (torch leaves those uninitialized). Functional here: the bridge makes self the result
//     (python/dtensor/torch_bridge.py, _SPECIAL["resize_"]).
// Any dtype. Rules: rules.cc; as_strided's backward: backward.cc.
#include "kernels/cpu/strided.h"

#include "ops/common/backward_defs.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

Shape shape_arg(const OpCall& c, const char* name) {
  const std::vector<int64_t> v = c.get_int_list(name);
  return Shape(v.begin(), v.end());
}

int64_t offset_arg(const OpCall& c) { return c.get_opt_int("storage_offset").value_or(0); }

void define_strided_ops(Registry& reg) {
  {
    OpDef& op = reg.define(
        "as_strided(Tensor self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor", "strided");
    op.cost = cost(CostClass::kCopy, Keeps::kNothing);  // its backward needs self's shape only
    op.meta = [](const OpCall& c) {
      const Shape size = shape_arg(c, "size");
      guard(c, [&] {
        return kernels::as_strided_positions(size, shape_arg(c, "stride"), offset_arg(c), numel(c.tensor(0).shape));
      });
      return std::vector<TensorMeta>{{size, c.tensor(0).dtype}};
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      return one(guard(c, [&] { return kernels::as_strided(in[0], shape_arg(c, "size"), shape_arg(c, "stride"), offset_arg(c)); }));
    };
    op.samples = [] {
      // overlapping windows (stride 1 < size), a transpose-like read, an offset, a 0 stride
      return std::vector<Sample>{sample({{4, 5}}, {T(0), L({3, 4}), L({5, 1}), I(2)}),
                                 sample({{3, 3}}, {T(0), L({2, 2}), L({1, 2})}),
                                 sample({{16}}, {T(0), L({2, 3, 2}), L({4, 1, 0}), I(1)}),
                                 sample({{6, 2}}, {T(0), L({4, 3}), L({2, 1})}, {}, {DType::kInt64})};
    };
  }
  {
    OpDef& op = reg.define("resize_(Tensor self, SymInt[] size) -> Tensor", "strided");
    op.cost = cost(CostClass::kCopy, Keeps::kNothing);
    op.no_backward = "torch refuses resize_ of a tensor that requires grad";
    // The functional form the bridge's resize_ runs (python/dtensor/torch_bridge.py, _resize_), also
    // reached from torch's decompositions (resize_as): self and size; its memory_format is dropped
    // (a dtensor tensor is contiguous, which contiguous_format and preserve_format both give).
    op.aten.aliases = {{"resize", "keep:2"}};
    // Not for a block's sake: ATen's resize leaves grown elements uninitialized, which would differ
    // between the ranks of a replicated result, so the bridge runs this kernel (zeros there).
    op.aten.layout_dependent = true;
    op.meta = [](const OpCall& c) {
      const Shape size = shape_arg(c, "size");
      for (int64_t s : size)
        if (s < 0) fail(c, absl::StrCat("size ", shape_str(size), "; accepted: sizes >= 0"));
      return std::vector<TensorMeta>{{size, c.tensor(0).dtype}};
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      return one(guard(c, [&] { return kernels::resize(in[0], shape_arg(c, "size")); }));
    };
    op.samples = [] {
      return std::vector<Sample>{sample({{5, 4, 3}}, {T(0), L({12, 4})}), sample({{4, 3}}, {T(0), L({3, 5})}),
                                 sample({{2, 3}}, {T(0), L({1, 1, 4})}, {}, {DType::kInt64})};
    };
  }
}

}  // namespace

DTENSOR_FAMILY_PART("strided", kDefinitions, define_strided_ops);

}  // namespace dtensor::ops

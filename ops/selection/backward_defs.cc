// Backward ops of the selection family that autograd/ calls by their ATen names:
// value_selecting_reduction_backward.
// Rules: ops/selection/rules.cc; shared helpers: ops/common/backward_defs.h.
#include "kernels/cpu/selection.h"

#include "dtensor/partial_split.h"
#include "ops/common/backward_defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

// value_selecting_reduction_backward(grad, dim, indices, sizes, keepdim): tensors grad (0),
// indices (1).

void define_value_selecting_backward(Registry& reg) {
  OpDef& op = reg.define(
      "value_selecting_reduction_backward(Tensor grad, int dim, Tensor indices, int[] sizes, bool keepdim) -> Tensor",
      "selection");
  op.cost = cost(CostClass::kOnePass, Keeps::kNothing);
  op.aten.layout_dependent = true;  // sizes are global: a grad block fills the block of them
  op.no_backward = kNoDoubleBackward;
  op.meta = [](const OpCall& c) {
    check_floating(c, 0, "grad");
    check_index(c, 1, "indices");
    Shape sizes;
    for (int64_t s : c.get_int_list("sizes")) {
      if (s < 0) fail(c, absl::StrCat("sizes has a negative size ", s));
      sizes.push_back(s);
    }
    const int64_t d = dim_arg(c, static_cast<int64_t>(sizes.size()));
    Shape reduced = sizes;
    if (!sizes.empty()) {
      if (c.get_bool("keepdim")) reduced[d] = 1;
      else reduced.erase(reduced.begin() + d);
    }
    check_shape(c, 0, "grad (the reduced shape)", reduced);
    check_shape(c, 1, "indices (the reduced shape)", reduced);
    return std::vector<TensorMeta>{{sizes, c.tensor(0).dtype}};
  };
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    return one(kernels::value_index_backward(in[0], in[1], ctx.out_block(0).first, c.get_int("dim"),
                                             c.get_bool("keepdim")));
  });
  op.samples = [] {
    const std::vector<DType> dt{DType::kFloat32, DType::kInt64};
    return std::vector<Sample>{sample({{7}, {7}}, {T(0), I(1), T(1), L({7, 5}), V(false)}, {}, dt),
                               sample({{4, 1, 3}, {4, 1, 3}}, {T(0), I(1), T(1), L({4, 9, 3}), V(true)}, {}, dt),
                               sample({{5, 3}, {5, 3}}, {T(0), I(-3), T(1), L({7, 5, 3}), V(false)}, {}, dt)};
  };
  op.make_input = [](int i, const OpCall& c, uint64_t seed) {
    if (i == 0) return random_tensor(c.tensor(0).shape, c.tensor(0).dtype, seed);
    const auto sizes = c.get_int_list("sizes");
    const int64_t d = wrap_dim(c.get_int("dim"), static_cast<int64_t>(sizes.size()), "dim");
    return index_input(c.tensor(1), sizes[d], seed);
  };
}

}  // namespace

void define_selection_backward_ops(Registry& reg) {
  define_value_selecting_backward(reg);
}

DTENSOR_FAMILY_PART("selection", kDefinitions, define_selection_backward_ops);

}  // namespace dtensor::ops

// im2col (nn.Unfold) and col2im (nn.Fold), ATen's schemas, over kernels/cpu/fold.h:
//   im2col(self [N, C, H, W] or [C, H, W], kernel_size, dilation, padding, stride) -> [N, C k, L]
//   col2im(self [N, C k, L] or [C k, L], output_size [H, W], kernel_size, dilation, padding, stride)
//     -> [N, C, H, W]
// with k = k_h k_w and L the number of sliding blocks. Each is the other's backward (fold_backward.cc).
// Rules: fold_rules.cc.
#include "kernels/cpu/fold.h"

#include "ops/common/backward_defs.h"
#include "ops/common/defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

std::array<int64_t, 2> pair_arg(const OpCall& c, const char* name) {
  const std::vector<int64_t> v = c.get_int_list(name);
  if (v.size() != 2) fail(c, absl::StrCat(name, " has ", v.size(), " values; accepted: 2 (one per spatial dim)"));
  return {v[0], v[1]};
}

kernels::FoldParams fold_params(const OpCall& c) {
  return {pair_arg(c, "kernel_size"), pair_arg(c, "dilation"), pair_arg(c, "padding"), pair_arg(c, "stride")};
}

void check_floating_input(const OpCall& c) {
  if (!is_floating(c.tensor(0).dtype)) fail(c, "accepted dtypes: float32, float64, bfloat16, float16");
}

void define_fold_ops(Registry& reg) {
  {
    OpDef& op = reg.define(
        "im2col(Tensor self, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor", "conv");
    op.cost = cost(CostClass::kCopy, Keeps::kNothing);  // linear: its backward needs no input
    op.meta = [](const OpCall& c) {
      check_floating_input(c);
      const Shape& x = c.tensor(0).shape;
      if (x.size() != 3 && x.size() != 4)
        fail(c, absl::StrCat("input ", shape_str(x), "; accepted: [N, C, H, W] or [C, H, W]"));
      const kernels::FoldParams p = fold_params(c);
      const size_t r = x.size();
      const auto blocks = guard(c, [&] { return kernels::fold_blocks("im2col", x[r - 2], x[r - 1], p); });
      Shape out = r == 4 ? Shape{x[0], x[1] * p.kernel[0] * p.kernel[1], blocks[0] * blocks[1]}
                         : Shape{x[0] * p.kernel[0] * p.kernel[1], blocks[0] * blocks[1]};
      return std::vector<TensorMeta>{{out, c.tensor(0).dtype}};
    };
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
      return one(guard(c, [&] { return kernels::im2col(in[0], fold_params(c)); }));
    };
    op.samples = [] {
      return std::vector<Sample>{sample({{2, 4, 5, 4}}, {T(0), L({2, 3}), L({1, 1}), L({1, 0}), L({2, 1})}),
                                 sample({{3, 6, 5}}, {T(0), L({3, 2}), L({2, 1}), L({1, 1}), L({1, 2})})};
    };
  }
  {
    OpDef& op = reg.define(
        "col2im(Tensor self, SymInt[2] output_size, int[2] kernel_size, int[2] dilation, int[2] padding, "
        "int[2] stride) -> Tensor",
        "conv");
    op.cost = cost(CostClass::kCopy, Keeps::kNothing);
    op.meta = [](const OpCall& c) {
      check_floating_input(c);
      const Shape& x = c.tensor(0).shape;
      if (x.size() != 2 && x.size() != 3)
        fail(c, absl::StrCat("input ", shape_str(x), "; accepted: [N, C * kernel_h * kernel_w, L] or "
                             "[C * kernel_h * kernel_w, L]"));
      const kernels::FoldParams p = fold_params(c);
      const auto size = pair_arg(c, "output_size");
      if (size[0] < 1 || size[1] < 1) fail(c, "output_size must be positive");
      const auto blocks = guard(c, [&] { return kernels::fold_blocks("col2im", size[0], size[1], p); });
      const int64_t k = p.kernel[0] * p.kernel[1], rows = x[x.size() - 2], L = x.back();
      if (rows % k != 0)
        fail(c, absl::StrCat("input dim -2 is ", rows, "; accepted: a multiple of kernel_h * kernel_w = ", k));
      if (L != blocks[0] * blocks[1])
        fail(c, absl::StrCat("input has ", L, " blocks; output_size [", size[0], ", ", size[1],
                             "] with these parameters has ", blocks[0] * blocks[1]));
      Shape out = x.size() == 3 ? Shape{x[0], rows / k, size[0], size[1]} : Shape{rows / k, size[0], size[1]};
      return std::vector<TensorMeta>{{out, c.tensor(0).dtype}};
    };
    // A block holding a shard of L adds its blocks only: the kernel reads where they start.
    op.aten.layout_dependent = true;
    op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
      const int64_t first = ctx.single_device() ? -1 : ctx.in_block(c, 0).second.back();
      return one(guard(c, [&] { return kernels::col2im(in[0], pair_arg(c, "output_size"), fold_params(c), first); }));
    };
    op.samples = [] {
      // [2, 4 * 6, 9]: C = 4, kernel 2 x 3, output 4 x 5 with stride (1, 2), padding (0, 1): 3 x 3
      // overlapping blocks. [12, 15]: C = 3, kernel 2 x 2 dilated (2, 1), output 5 x 4: 5 x 3 blocks.
      return std::vector<Sample>{
          sample({{2, 24, 9}}, {T(0), L({4, 5}), L({2, 3}), L({1, 1}), L({0, 1}), L({1, 2})}),
          sample({{12, 15}}, {T(0), L({5, 4}), L({2, 2}), L({2, 1}), L({1, 0}), L({1, 1})})};
    };
  }
}

}  // namespace

DTENSOR_FAMILY_PART("conv", kDefinitions, define_fold_ops);

}  // namespace dtensor::ops

// Backward ops of the view family that autograd/ calls by their ATen names: slice_backward and
// select_backward.
// Rules: ops/view/rules.cc; shared helpers: ops/common/backward_defs.h.
#include <algorithm>

#include "kernels/cpu/backward.h"

#include "ops/common/backward_defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

// slice_backward / select_backward: the local result block comes from ctx.out_block(0), filled
// from the overlap with this rank's grad block.

struct SliceArgs {
  Shape sizes;
  int64_t dim = 0, start = 0, end = 0, step = 1;
  bool select = false;
};

SliceArgs slice_args(const OpCall& c, bool select) {
  SliceArgs a;
  a.select = select;
  for (int64_t s : c.get_int_list("input_sizes")) {
    if (s < 0) fail(c, absl::StrCat("input_sizes has a negative size ", s));
    a.sizes.push_back(s);
  }
  if (a.sizes.empty()) fail(c, "input_sizes must have at least one dim");
  a.dim = dim_arg(c, static_cast<int64_t>(a.sizes.size()));
  const int64_t n = a.sizes[a.dim];
  if (select) {
    int64_t idx = c.get_int("index");
    if (idx < -n || idx >= n)
      fail(c, absl::StrCat("index ", idx, " out of range for dim ", a.dim, " of size ", n, " (accepted: ", -n,
                           " <= index < ", n, ")"));
    a.start = idx < 0 ? idx + n : idx;
    a.end = a.start + 1;
    return a;
  }
  a.step = c.get_int("step");
  if (a.step < 1) fail(c, absl::StrCat("step ", a.step, " must be >= 1"));
  // Python's normalization (the caller normally passes normalized, clamped values).
  a.start = c.get_int("start");
  a.end = c.get_int("end");
  if (a.start < 0) a.start += n;
  if (a.end < 0) a.end += n;
  a.start = std::clamp<int64_t>(a.start, 0, n);
  a.end = std::clamp<int64_t>(a.end, a.start, n);
  return a;
}

// grad_output's expected shape.
Shape grad_shape(const SliceArgs& a) {
  Shape g = a.sizes;
  if (a.select) g.erase(g.begin() + a.dim);
  else g[a.dim] = (a.end - a.start + a.step - 1) / a.step;
  return g;
}

void define_slice_select_backward(Registry& reg, bool select) {
  OpDef& op = reg.define(
      select ? "select_backward(Tensor grad_output, int[] input_sizes, int dim, int index) -> Tensor"
             : "slice_backward(Tensor grad_output, int[] input_sizes, int dim, int start, int end, int step) -> Tensor",
      "view");
  op.cost = cost(CostClass::kCopy, Keeps::kNothing);
  op.aten.layout_dependent = true;  // input_sizes are global: a grad block fills the block of them
  op.no_backward = kNoDoubleBackward;
  op.complex = true;  // zeros and a copy (slice_backward_block): any dtype
  op.meta = [select](const OpCall& c) {
    SliceArgs a = slice_args(c, select);
    check_shape(c, 0, "grad_output", grad_shape(a));
    return std::vector<TensorMeta>{{a.sizes, c.tensor(0).dtype}};
  };
  op.kernel = guarded([select](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    SliceArgs a = slice_args(c, select);
    auto [shape, offset] = ctx.out_block(0);
    Tensor g = in[0];
    Shape goff = ctx.in_block(c, 0).second;
    if (select) {
      g = g.unsqueeze(a.dim);
      goff.insert(goff.begin() + a.dim, 0);
    }
    return one(kernels::slice_backward_block(g, goff, a.sizes, a.dim, a.start, a.end, a.step, shape, offset));
  });
  op.samples = [select] {
    if (select)
      return std::vector<Sample>{sample({{7}}, {T(0), L({7, 5}), I(1), I(-2)}),
                                 sample({{3, 4}}, {T(0), L({3, 5, 4}), I(1), I(2)}),
                                 sample({{5, 3}}, {T(0), L({5, 3, 2}), I(-1), I(0)}),
                                 sample({{3, 4}}, {T(0), L({3, 5, 4}), I(1), I(2)}, {}, {DType::kComplex64})};
    return std::vector<Sample>{sample({{7, 3}}, {T(0), L({7, 9}), I(1), I(1), I(8), I(3)}),
                               sample({{3, 2, 4}}, {T(0), L({3, 5, 4}), I(-2), I(2), I(4), I(1)}),
                               sample({{3, 5}}, {T(0), L({11, 5}), I(0), I(0), I(11), I(4)}),
                               sample({{7, 3}}, {T(0), L({7, 9}), I(1), I(1), I(8), I(3)}, {}, {DType::kComplex128})};
  };
}

}  // namespace

void define_view_backward_ops(Registry& reg) {
  define_slice_select_backward(reg, false);
  define_slice_select_backward(reg, true);
}

DTENSOR_FAMILY_PART("view", kDefinitions, define_view_backward_ops);

}  // namespace dtensor::ops

// Backward ops of the loss family that autograd/ calls by their ATen names: nll_loss_backward.
// Rules: ops/loss/rules.cc; shared helpers: ops/common/backward_defs.h.
#include "kernels/cpu/backward.h"

#include "dtensor/partial_split.h"
#include "ops/common/backward_defs.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

// nll_loss_backward: tensors grad_output (0), self (1), target (2), weight (3, optional).

void define_nll_loss_backward(Registry& reg) {
  OpDef& op = reg.define(
      "nll_loss_backward(Tensor grad_output, Tensor self, Tensor target, Tensor? weight=None, str reduction='mean', int ignore_index=-100) -> Tensor",
      "loss");
  op.cost = cost(CostClass::kOnePass, Keeps::kNothing);
  // ATen's takes the reduction as an int and a total_weight (dtensor counts the targets itself).
  op.aten.aliases = {{"nll_loss_backward", "nll_loss_backward"}};
  op.aten.layout_dependent = true;  // a class shard holds the targets in its range only
  op.no_backward = kNoDoubleBackward;
  op.meta = [](const OpCall& c) {
    check_floating(c, 0, "grad_output");
    check_floating(c, 1, "self");
    check_index(c, 2, "target");
    const Shape& x = c.tensor(1).shape;
    const Shape& t = c.tensor(2).shape;
    bool ok = (x.size() == 2 && t.size() == 1 && t[0] == x[0]) || (x.size() == 1 && t.empty());
    if (!ok) fail(c, "accepted: self [N, C] with target [N], or self [C] with target []");
    const std::string red = c.get_str("reduction");
    if (red != "mean" && red != "sum" && red != "none") fail(c, "reduction must be 'mean', 'sum' or 'none'");
    check_shape(c, 0, "grad_output (the loss output's shape)", red == "none" ? t : Shape{});
    if (c.has("weight")) {
      const int w = c.tensor_index("weight");
      check_floating(c, w, "weight");
      check_shape(c, w, "weight", Shape{x.back()});
    }
    return std::vector<TensorMeta>{c.tensor(1)};
  };
  // This rank's block of self: rows [r0, r0 + n) (all for 1-d self) and classes [c0, c0 + m).
  // Target rows (and grad rows for 'none') are cut from their own blocks, which the rules make
  // either aligned with self's rows or whole; 'mean' divides by the total weight of the whole
  // target (its rules keep target replicated).
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    const bool two_d = rank_of(c, 1) == 2;
    const std::string red = c.get_str("reduction");
    const int64_t ignore = c.get_int("ignore_index");
    const auto block = ctx.in_block(c, 1);
    const Shape& shape = block.first;
    const Shape& offset = block.second;
    std::optional<Tensor> weight;
    if (c.has("weight")) weight = in[c.tensor_index("weight")];
    Tensor target = in[2], grad = in[0];
    std::optional<double> total;
    if (two_d) {
      auto rows = [&](const Tensor& t, int index) {
        const int64_t at = offset[0] - ctx.in_block(c, index).second[0];
        DT_CHECK(at >= 0 && at + shape[0] <= t.size(0), "internal: rows [", offset[0], ", ",
                 offset[0] + shape[0], ") are not in this rank's block of tensor ", index);
        return t.narrow(0, at, shape[0]);
      };
      if (red == "mean") {
        DT_CHECK(ctx.in_whole_along(c, 2, 0), "'mean' needs the whole target (replicated)");
        total = kernels::nll_loss_total_weight(target, weight, ignore);
      }
      target = rows(target, 2);
      if (red == "none") grad = rows(grad, 0);
    }
    return one(kernels::nll_loss_backward(grad, shape, ctx.out_meta[0].dtype, target, weight, red, ignore,
                                          total, offset.back(), c.tensor(1).shape.back()));
  });
  op.samples = [] {
    using D = DType;
    const std::vector<DType> with_w{D::kFloat32, D::kFloat32, D::kInt64, D::kFloat32};
    return std::vector<Sample>{
        sample({{7}, {7, 5}, {7}}, {T(0), T(1), T(2)}, {{"reduction", V(std::string("none"))}},
               {D::kFloat32, D::kFloat32, D::kInt64}),
        sample({{}, {6, 4}, {6}, {4}}, {T(0), T(1), T(2), T(3)},
               {{"reduction", V(std::string("sum"))}, {"ignore_index", I(1)}}, with_w),
        sample({{}, {7, 5}, {7}, {5}}, {T(0), T(1), T(2), T(3)}, {{"ignore_index", I(2)}}, with_w),
        sample({{5}, {5, 3}, {5}}, {T(0), T(1), T(2)},
               {{"reduction", V(std::string("none"))}, {"ignore_index", I(0)}},
               {D::kFloat32, D::kFloat32, D::kInt32}),
        sample({{}, {5}, {}}, {T(0), T(1), T(2)}, {}, {D::kFloat32, D::kFloat32, D::kInt64})};
  };
  // Targets are class indices (some equal to ignore_index in the samples that set it to a class);
  // class weights are positive.
  op.make_input = [](int i, const OpCall& c, uint64_t seed) {
    if (i == 2) return index_input(c.tensor(2), c.tensor(1).shape.back(), seed);
    if (i == 3) return positive_input(c.tensor(3), seed);
    return random_tensor(c.tensor(i).shape, c.tensor(i).dtype, seed);
  };
}

}  // namespace

void define_loss_backward_ops(Registry& reg) {
  define_nll_loss_backward(reg);
}

DTENSOR_FAMILY_PART("loss", kDefinitions, define_loss_backward_ops);

}  // namespace dtensor::ops

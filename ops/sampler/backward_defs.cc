// grid_sampler_2d_backward, ATen's schema: (grad_input like input, grad_grid like grid) for
// grad_output [N, C, Ho, Wo] (kernels/cpu/grid_sampler.h). dtensor computes both; an output_mask
// entry that is false gives zeros there (the bridge hands torch None for it). `bool[2]
// output_mask` binds as an int list (0/1). Rules: rules.cc.
#include "ops/common/backward_defs.h"
#include "ops/family.h"
#include "ops/sampler/args.h"

namespace dtensor::ops {
namespace {

std::array<bool, 2> output_mask(const OpCall& c) {
  const std::vector<int64_t> m = c.get_int_list("output_mask", {1, 1});
  if (m.size() != 2) fail(c, absl::StrCat("output_mask has ", m.size(), " values; accepted: 2"));
  return {m[0] != 0, m[1] != 0};
}

void define_grid_sampler_backward(Registry& reg) {
  OpDef& op = reg.define(
      "grid_sampler_2d_backward(Tensor grad_output, Tensor input, Tensor grid, int interpolation_mode, "
      "int padding_mode, bool align_corners, bool[2] output_mask) -> (Tensor, Tensor)",
      "sampler");
  op.cost = cost(CostClass::kTranscendental, Keeps::kNothing);
  op.no_backward = kNoDoubleBackward;
  op.meta = [](const OpCall& c) {
    check_shape(c, 0, "grad_output (the forward's output shape)", sampled_shape(c, 1));
    output_mask(c);
    return std::vector<TensorMeta>{{c.tensor(1).shape, c.tensor(1).dtype}, {c.tensor(2).shape, c.tensor(2).dtype}};
  };
  op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    return guard(c, [&] {
      const Sampling s = sampling(c);
      const std::array<bool, 2> mask = output_mask(c);
      auto [gi, gg] = kernels::grid_sampler_2d_backward(in[0], in[1], in[2], s.interpolation, s.padding, s.align_corners);
      std::vector<Tensor> g{gi, gg};
      for (int i = 0; i < 2; ++i)
        if (!mask[i]) g[i] = Tensor::zeros(ctx.out_block(i).first, ctx.out_meta[i].dtype);
      return g;
    });
  };
  op.samples = [] {
    std::vector<Sample> out;
    for (const auto& m : sample_modes())
      out.push_back(sample({{3, 4, 4, 5}, {3, 4, 5, 6}, {3, 4, 5, 2}},
                           {T(0), T(1), T(2), I(m[0]), I(m[1]), V(m[2] != 0), L({1, m[0] != 1})}));
    return out;
  };
}

}  // namespace

DTENSOR_FAMILY_PART("sampler", kDefinitions, define_grid_sampler_backward);

}  // namespace dtensor::ops

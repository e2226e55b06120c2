// grid_sampler_2d, ATen's schema, over kernels/cpu/grid_sampler.h (which gives ATen's sampling
// formulas and their source):
//   grid_sampler_2d(input [N, C, H, W], grid [N, Ho, Wo, 2], interpolation_mode (0 bilinear,
//     1 nearest, 2 bicubic), padding_mode (0 zeros, 1 border, 2 reflection), align_corners)
//     -> [N, C, Ho, Wo], input's dtype (floating; grid of the same dtype).
// Rules: rules.cc; backward op: backward_defs.cc; backward formula: backward.cc.
#include "ops/common/backward_defs.h"
#include "ops/family.h"
#include "ops/sampler/args.h"

namespace dtensor::ops {
namespace {

void define_grid_sampler(Registry& reg) {
  OpDef& op = reg.define(
      "grid_sampler_2d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) "
      "-> Tensor",
      "sampler");
  // 4 taps per output element and channel (16 for bicubic): priced as 8 FLOPs per output element.
  op.cost = cost(CostClass::kTranscendental);
  op.meta = [](const OpCall& c) { return std::vector<TensorMeta>{{sampled_shape(c, 0), c.tensor(0).dtype}}; };
  op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
    const Sampling s = sampling(c);
    return one(guard(c, [&] { return kernels::grid_sampler_2d(in[0], in[1], s.interpolation, s.padding, s.align_corners); }));
  };
  op.samples = [] {
    std::vector<Sample> out;
    for (const auto& m : sample_modes())
      out.push_back(sample({{3, 4, 5, 6}, {3, 4, 5, 2}}, {T(0), T(1), I(m[0]), I(m[1]), V(m[2] != 0)}));
    return out;
  };
}

}  // namespace

DTENSOR_FAMILY_PART("sampler", kDefinitions, define_grid_sampler);

}  // namespace dtensor::ops

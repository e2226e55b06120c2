// Backward of grid_sampler_2d: grid_sampler_2d_backward gives both gradients (its rules keep
// them sharded: rules.cc); a gradient not needed is masked out there.
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {

void register_sampler_backward(Registry&) {
  def("grid_sampler_2d", [](const BackwardCtx& c) {
    const OpCall& k = c.call;
    const std::vector<int64_t> mask{c.needs[0] ? 1 : 0, c.needs[1] ? 1 : 0};
    auto g = call_op("grid_sampler_2d_backward",
                     {c.grad(0), c.inputs[0], c.inputs[1], k.value("interpolation_mode"), k.value("padding_mode"),
                      k.value("align_corners"), iv(mask)});
    return Grads{g[0], g[1]};
  });
}

}  // namespace

DTENSOR_FAMILY_PART("sampler", kBackward, register_sampler_backward);

}  // namespace dtensor::bw

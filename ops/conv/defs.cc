// convolution (ATen's schema; transposed = False): input[N, C, *sp], weight[O, C/g, *k], bias[O]?
// -> [N, O, *sp'], sp' = (sp + 2 padding - dilation (k - 1) - 1) / stride + 1. The kernel is the
// direct loop of kernels/cpu/conv.h. Rules: ops/conv/rules.cc; backward: convolution_backward
// (backward_defs.cc), through ops/conv/backward.cc.
#include "ops/common/backward_defs.h"
#include "ops/common/defs.h"
#include "ops/conv/params.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

void define_convolution(Registry& reg) {
  OpDef& op = reg.define(
      "convolution(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation, "
      "bool transposed, int[] output_padding, int groups) -> Tensor",
      "conv");
  // 2 FLOPs per multiply-add: each output element reads C/g x kernel weights.
  op.cost = cost(CostClass::kContraction);
  op.cost.flops = [](const OpCall& c, const std::vector<TensorMeta>& out) {
    const Shape& w = c.tensor(1).shape;
    return 2 * static_cast<double>(numel(out[0].shape)) * static_cast<double>(numel(w) / std::max<int64_t>(w[0], 1));
  };
  op.meta = [](const OpCall& c) {
    check_floating(c, 0, "input");
    if (c.tensor(1).dtype != c.tensor(0).dtype) fail(c, "weight must have the input's dtype");
    const Shape out = conv_output_shape(c, 0, 1);
    const int b = c.tensor_index("bias");
    if (b >= 0 && c.tensor(b).shape != Shape{c.tensor(1).shape[0]})
      fail(c, absl::StrCat("bias must have shape [", c.tensor(1).shape[0], "]"));
    return std::vector<TensorMeta>{{out, c.tensor(0).dtype}};
  };
  // No zeroing of empty blocks: a rank holding no input channel still adds its piece of a Partial
  // bias; the kernel handles empty dims.
  op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
    return guard(c, [&] {
      const int b = c.tensor_index("bias");
      return one(kernels::convolution(in[0], in[1], b >= 0 ? in[b] : Tensor(), conv_params(c, 0, 1)));
    });
  };
  op.samples = [] {
    auto conv = [](std::vector<Shape> shapes, std::vector<int64_t> stride, std::vector<int64_t> padding,
                   std::vector<int64_t> dilation, int64_t groups) {
      std::vector<ArgValue> pos{T(0), T(1), shapes.size() > 2 ? T(2) : V(IValue()), L(stride), L(padding),
                                L(dilation), V(false), L({0}), I(groups)};
      return sample(shapes, pos);
    };
    // The first sample is small (the validator enumerates its placements).
    return std::vector<Sample>{conv({{2, 4, 5}, {6, 4, 3}, {6}}, {1}, {1}, {1}, 1),
                               conv({{3, 4, 7, 6}, {4, 2, 3, 2}, {4}}, {2, 1}, {1, 0}, {1, 2}, 2),
                               conv({{2, 2, 4, 5, 4}, {3, 2, 2, 3, 2}}, {1, 2, 1}, {0, 1, 1}, {2, 1, 1}, 1)};
  };
}

}  // namespace

DTENSOR_FAMILY_PART("conv", kDefinitions, define_convolution);

}  // namespace dtensor::ops

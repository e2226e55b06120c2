// convolution_backward (ATen's schema): the gradients of convolution with respect to input, weight
// and bias: (grad_input like input, grad_weight like weight, grad_bias [O]). dtensor returns all
// three; an output_mask entry that is false gives zeros there (the bridge hands torch None for it).
// `bool[3] output_mask` binds as an int list (0/1). Rules: ops/conv/rules.cc.
#include "ops/common/backward_defs.h"
#include "ops/common/defs.h"
#include "ops/conv/params.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

std::array<bool, 3> output_mask(const OpCall& c) {
  const std::vector<int64_t> m = c.get_int_list("output_mask", {1, 1, 1});
  if (m.size() != 3) fail(c, absl::StrCat("output_mask has ", m.size(), " values; accepted: 3"));
  return {m[0] != 0, m[1] != 0, m[2] != 0};
}

void define_convolution_backward(Registry& reg) {
  OpDef& op = reg.define(
      "convolution_backward(Tensor grad_output, Tensor input, Tensor weight, int[]? bias_sizes, int[] stride, "
      "int[] padding, int[] dilation, bool transposed, int[] output_padding, int groups, bool[3] output_mask) "
      "-> (Tensor, Tensor, Tensor)",
      "conv");
  // Two contractions of the forward's size (grad_input and grad_weight).
  op.cost = cost(CostClass::kContraction, Keeps::kNothing);
  op.cost.flops = [](const OpCall& c, const std::vector<TensorMeta>&) {
    const Shape& w = c.tensor(2).shape;
    return 4 * static_cast<double>(numel(c.tensor(0).shape)) * static_cast<double>(numel(w) / std::max<int64_t>(w[0], 1));
  };
  op.no_backward = kNoDoubleBackward;
  op.meta = [](const OpCall& c) {
    check_floating(c, 1, "input");
    check_shape(c, 0, "grad_output (the convolution's output shape)", conv_output_shape(c, 1, 2));
    output_mask(c);  // bias_sizes only says that there is a bias (ATen's use of it); grad_bias is [O]
    const DType dt = c.tensor(1).dtype;
    return std::vector<TensorMeta>{{c.tensor(1).shape, dt}, {c.tensor(2).shape, dt}, {{c.tensor(2).shape[0]}, dt}};
  };
  // No zeroing of empty blocks: a rank without input channels still holds a replicated grad_bias.
  op.kernel = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    return guard(c, [&] {
      const std::array<bool, 3> mask = output_mask(c);
      std::vector<Tensor> g = kernels::convolution_backward(in[0], in[1], in[2], conv_params(c, 1, 2), mask);
      for (int i = 0; i < 3; ++i)
        if (!mask[i]) g[i] = Tensor::zeros(ctx.out_block(i).first, ctx.out_meta[i].dtype);
      return g;
    });
  };
  op.samples = [] {
    auto bw = [](Shape x, Shape w, std::vector<int64_t> stride, std::vector<int64_t> padding,
                 std::vector<int64_t> dilation, int64_t groups, std::vector<int64_t> mask) {
      Shape g{x[0], w[0]};
      for (size_t i = 0; i + 2 < x.size(); ++i)
        g.push_back(kernels::conv_out_size(x[2 + i], w[2 + i], stride[i], padding[i], dilation[i]));
      return sample({g, x, w}, {T(0), T(1), T(2), L({w[0]}), L(stride), L(padding), L(dilation), V(false), L({0}),
                                I(groups), L(mask)});
    };
    return std::vector<Sample>{bw({2, 4, 5}, {6, 4, 3}, {1}, {1}, {1}, 1, {1, 1, 1}),
                               bw({3, 4, 7, 6}, {4, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 2, {1, 1, 0}),
                               bw({2, 2, 4, 5, 4}, {3, 2, 2, 3, 2}, {1, 2, 1}, {0, 1, 1}, {2, 1, 1}, 1, {0, 1, 1})};
  };
}

}  // namespace

DTENSOR_FAMILY_PART("conv", kDefinitions, define_convolution_backward);

}  // namespace dtensor::ops

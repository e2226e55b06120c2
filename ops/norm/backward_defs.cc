// Backward ops of the norm family that autograd/ calls: layer_norm_backward, the fused gradient of
// layer_norm (kernels/cpu/norm.h), dtensor's own schema with mean and rstd recomputed from the input
// (layer_norm saves none); and ATen's native_layer_norm_backward and native_group_norm_backward, from
// the mean and rstd their forward ops return. Rules: ops/norm/rules.cc.
#include "kernels/cpu/norm.h"

#include "ops/common/backward_defs.h"
#include "ops/family.h"
#include "ops/norm/group_norm_args.h"

namespace dtensor::ops {

void define_norm_backward_ops(Registry& reg) {
  OpDef& op = reg.define(
      "layer_norm_backward(Tensor grad_out, Tensor input, int[] normalized_shape, Tensor? weight=None, float eps=1e-05) -> (Tensor grad_input, Tensor grad_weight, Tensor grad_bias)",
      "norm");
  op.cost = cost(CostClass::kNormalization, Keeps::kNothing);
  op.aten.not_aten = "dtensor's layer_norm backward (ATen's is native_layer_norm_backward, a registered op too)";
  op.no_backward = kNoDoubleBackward;
  op.meta = [](const OpCall& c) {
    check_floating(c, 0, "grad_out");
    check_floating(c, 1, "input");
    const Shape& x = c.tensor(1).shape;
    check_shape(c, 0, "grad_out", x);
    const Shape norm = normalized_shape_arg(c, 1);
    const int wi = c.tensor_index("weight");
    if (wi >= 0) {
      check_floating(c, wi, "weight");
      check_shape(c, wi, "weight", norm);
    }
    const DType wt = wi >= 0 ? c.tensor(wi).dtype : c.tensor(1).dtype;
    return std::vector<TensorMeta>{{x, c.tensor(1).dtype}, {norm, wt}, {norm, wt}};
  };
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext&) {
    const std::vector<int64_t> ns = c.get_int_list("normalized_shape");
    std::optional<Tensor> w;
    if (c.has("weight")) w = in[c.tensor_index("weight")];
    return kernels::layer_norm_backward(in[0], in[1], Shape(ns.begin(), ns.end()), w, c.get_double("eps"));
  });
  op.samples = [] {
    return std::vector<Sample>{sample({{6, 5, 4}, {6, 5, 4}, {4}}, {T(0), T(1), L({4}), T(2)}),
                               sample({{7, 3, 4}, {7, 3, 4}}, {T(0), T(1), L({3, 4})})};
  };
}

namespace {

// A norm's backward op of ATen's (grad_out, input, ..., output_mask) -> (input, weight, bias)
// gradients: no double backward, nothing kept.
OpDef& define_native_backward(Registry& reg, const std::string& schema) {
  OpDef& op = reg.define(schema, "norm");
  op.cost = cost(CostClass::kNormalization, Keeps::kNothing);
  op.no_backward = kNoDoubleBackward;
  op.make_input = positive_inputs({3});  // rstd > 0
  return op;
}

// Their common checks: floating grad_out and input of one shape, and output_mask's 3 values (every
// gradient is computed; the bridge drops the masked ones).
void check_grad_and_mask(const OpCall& c) {
  check_floating(c, 0, "grad_out");
  check_floating(c, 1, "input");
  check_shape(c, 0, "grad_out", c.tensor(1).shape);
  if (c.get_int_list("output_mask").size() != 3)
    fail(c, absl::StrCat("output_mask has ", c.get_int_list("output_mask").size(), " values; accepted: 3"));
}

// d input = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) over `dims` (n elements); the affine
// gradients sum g * xhat and g over `lead` (all in double).
std::vector<Tensor> norm_grads(const Tensor& g, const Tensor& xhat, const Tensor& rstd, const Tensor& gw,
                               const std::vector<int64_t>& dims, double n, const std::vector<int64_t>& lead) {
  namespace K = kernels;
  const Tensor mgw = K::div(K::sum(gw, dims, true), n), mgx = K::div(K::sum(K::mul(gw, xhat), dims, true), n);
  const Tensor gi = K::mul(rstd, K::sub(K::sub(gw, mgw), K::mul(xhat, mgx)));
  const Tensor gx = K::mul(g, xhat);
  return {gi, lead.empty() ? gx : K::sum(gx, lead), lead.empty() ? g : K::sum(g, lead)};
}

// ATen's native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
// output_mask) from the forward's mean and rstd.
void define_native_layer_norm_backward(Registry& reg) {
  OpDef& op = define_native_backward(
      reg,
      "native_layer_norm_backward(Tensor grad_out, Tensor input, int[] normalized_shape, Tensor mean, Tensor rstd, "
      "Tensor? weight, Tensor? bias, int[] output_mask) -> (Tensor, Tensor, Tensor)");
  op.meta = [](const OpCall& c) {
    check_grad_and_mask(c);
    const Shape& x = c.tensor(1).shape;
    const Shape norm = normalized_shape_arg(c, 1);
    Shape stats = x;
    std::fill(stats.end() - static_cast<int64_t>(norm.size()), stats.end(), 1);
    check_shape(c, 2, "mean ([leading dims, 1 per normalized dim])", stats);
    check_shape(c, 3, "rstd ([leading dims, 1 per normalized dim])", stats);
    const int wi = c.tensor_index("weight");
    if (wi >= 0) check_shape(c, wi, "weight", norm);
    const DType wt = wi >= 0 ? c.tensor(wi).dtype : c.tensor(1).dtype;
    return std::vector<TensorMeta>{{x, c.tensor(1).dtype}, {norm, wt}, {norm, wt}};
  };
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    namespace K = kernels;
    const int64_t nd = static_cast<int64_t>(c.get_int_list("normalized_shape").size()), rank = in[1].dim();
    std::vector<int64_t> dims, lead;
    for (int64_t d = 0; d < rank; ++d) (d < rank - nd ? lead : dims).push_back(d);
    double n = 1;
    for (int64_t d : dims) n *= static_cast<double>(in[1].size(d));
    const Tensor g = in[0].to(DType::kFloat64), rstd = in[3].to(DType::kFloat64);
    const Tensor xhat = K::mul(K::sub(in[1].to(DType::kFloat64), in[2].to(DType::kFloat64)), rstd);
    const int wi = c.tensor_index("weight");
    const Tensor gw = wi >= 0 ? K::mul(g, in[wi].to(DType::kFloat64)) : g;
    std::vector<Tensor> r = norm_grads(g, xhat, rstd, gw, dims, n, lead);
    for (int o = 0; o < 3; ++o) r[o] = r[o].to(ctx.out_meta[o].dtype).contiguous();
    return r;
  });
  op.samples = [] {
    return std::vector<Sample>{
        sample({{6, 5, 4}, {6, 5, 4}, {6, 5, 1}, {6, 5, 1}, {4}, {4}},
               {T(0), T(1), L({4}), T(2), T(3), T(4), T(5), L({1, 1, 1})}),
        sample({{7, 3, 4}, {7, 3, 4}, {7, 1, 1}, {7, 1, 1}},
               {T(0), T(1), L({3, 4}), T(2), T(3), V(IValue()), V(IValue()), L({1, 0, 0})})};
  };
}

// ATen's native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group,
// output_mask) from the forward's [N, group] mean and rstd; a block's own N (layout dependent).
void define_native_group_norm_backward(Registry& reg) {
  OpDef& op = define_native_backward(
      reg,
      "native_group_norm_backward(Tensor grad_out, Tensor input, Tensor mean, Tensor rstd, Tensor? weight, int N, "
      "int C, int HxW, int group, int[] output_mask) -> (Tensor, Tensor, Tensor)");
  op.aten.layout_dependent = true;  // N is the global batch: a block has its own
  op.meta = [](const OpCall& c) {
    check_grad_and_mask(c);
    check_group_norm_args(c, 1);
    const Shape& x = c.tensor(1).shape;
    const int64_t n = c.get_int("N"), ch = c.get_int("C"), g = c.get_int("group");
    check_shape(c, 2, "mean ([N, group])", {n, g});
    check_shape(c, 3, "rstd ([N, group])", {n, g});
    const int wi = c.tensor_index("weight");
    if (wi >= 0) check_shape(c, wi, "weight", {ch});
    const DType wt = wi >= 0 ? c.tensor(wi).dtype : c.tensor(1).dtype;
    return std::vector<TensorMeta>{{x, c.tensor(1).dtype}, {{ch}, wt}, {{ch}, wt}};
  };
  op.kernel = guarded([](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    namespace K = kernels;
    const Tensor& x = in[1];
    const int64_t n = x.size(0), ch = x.size(1), g = c.get_int("group");
    const int64_t k = x.numel() / n / g, sp = x.numel() / n / ch;
    const Tensor rstd = in[3].to(DType::kFloat64).reshape({n, g, 1});
    const Tensor mean = in[2].to(DType::kFloat64).reshape({n, g, 1});
    const Tensor xhat = K::mul(K::sub(x.to(DType::kFloat64).reshape({n, g, k}), mean), rstd);
    const Tensor gy = in[0].to(DType::kFloat64).reshape({n, ch, sp});
    const int wi = c.tensor_index("weight");
    const Tensor gw = (wi >= 0 ? K::mul(gy, in[wi].to(DType::kFloat64).reshape({ch, 1})) : gy).reshape({n, g, k});
    // Per (sample, group) row for the input; per channel (summed over N and its elements) for the
    // affine gradients.
    std::vector<Tensor> r = norm_grads(gy.reshape({n, g, k}), xhat, rstd, gw, {2}, static_cast<double>(k), {});
    r[0] = r[0].reshape(x.sizes());
    r[1] = K::sum(K::mul(gy, xhat.reshape({n, ch, sp})), {0, 2});
    r[2] = K::sum(gy, {0, 2});
    for (int o = 0; o < 3; ++o) r[o] = r[o].to(ctx.out_meta[o].dtype).contiguous();
    return r;
  }, {0, 1});
  op.samples = [] {
    return std::vector<Sample>{sample({{4, 6, 3}, {4, 6, 3}, {4, 3}, {4, 3}, {6}},
                                      {T(0), T(1), T(2), T(3), T(4), I(4), I(6), I(3), I(3), L({1, 1, 1})})};
  };
}

void define_native_norm_backward_ops(Registry& reg) {
  define_native_layer_norm_backward(reg);
  define_native_group_norm_backward(reg);
}

}  // namespace

DTENSOR_FAMILY_PART("norm", kDefinitions, define_norm_backward_ops);
DTENSOR_FAMILY_PART("norm", kDefinitions, define_native_norm_backward_ops);

}  // namespace dtensor::ops

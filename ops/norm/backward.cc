// Backward formulas of the norm family: softmax, log_softmax, layer_norm, native_layer_norm, rms_norm.
#include <limits>

#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {

std::vector<int64_t> last_dims(int64_t rank, int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = rank - n; i < rank; ++i) d.push_back(i);
  return d;
}

std::vector<int64_t> first_dims(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 0; i < n; ++i) d.push_back(i);
  return d;
}

double default_rms_eps(DType t) {
  switch (t) {
    case DType::kFloat64: return std::numeric_limits<double>::epsilon();
    case DType::kBFloat16: return 0.0078125;
    case DType::kFloat16: return 0.0009765625;
    default: return std::numeric_limits<float>::epsilon();
  }
}

// dx of rms_norm's x_hat * w given dy: rrms * (gw - x_hat * mean(gw * x_hat)). (layer_norm's
// backward is the fused layer_norm_backward op.)
DTensor rms_norm_input_grad(const DTensor& gw, const DTensor& xhat, const DTensor& r,
                            const std::vector<int64_t>& dims) {
  return F::mul(F::sub(gw, F::mul(xhat, F::mean(F::mul(gw, xhat), dims, true))), r);
}

}  // namespace

void register_norm_backward(Registry&) {
  def("softmax", [](const BackwardCtx& c) {
    const DTensor& o = c.outputs[0];
    int64_t d = c.call.get_int("dim");
    DTensor g = c.grad(0);
    return Grads{F::mul(o, F::sub(g, F::sum(F::mul(g, o), {d}, true)))};
  });
  def("log_softmax", [](const BackwardCtx& c) {
    int64_t d = c.call.get_int("dim");
    DTensor g = c.grad(0);
    return Grads{F::sub(g, F::mul(F::exp(c.outputs[0]), F::sum(g, {d}, true)))};
  });
  def("layer_norm", [](const BackwardCtx& c) {
    // One fused op (kernels/cpu/norm.h, with a CUDA kernel) instead of ~18 composite ops.
    const DTensor& x = c.inputs[0];
    int wi = c.call.tensor_index("weight"), bi = c.call.tensor_index("bias");
    std::vector<std::pair<std::string, OpArg>> kw{{"normalized_shape", iv(c.call.get_int_list("normalized_shape"))},
                                                  {"eps", iv(c.call.get_double("eps"))}};
    if (wi >= 0) kw.emplace_back("weight", c.inputs[wi]);
    auto g = call_op("layer_norm_backward", {c.grad(0), x}, kw);
    Grads r(c.inputs.size());
    r[0] = g[0];
    if (wi >= 0) r[wi] = g[1];
    if (bi >= 0) r[bi] = g[2];
    return r;
  });
  // native_layer_norm: ATen's native_layer_norm_backward over the saved mean and rstd; the mean and
  // rstd outputs are differentiable here too (ATen declares them not): d mean / dx = 1 / n,
  // d rstd / dx = -rstd^3 (x - mean) / n over each row's n elements.
  def("native_layer_norm", [](const BackwardCtx& c) {
    const DTensor& x = c.inputs[0];
    const int wi = c.call.tensor_index("weight"), bi = c.call.tensor_index("bias");
    const DTensor& mean = c.outputs[1];
    const DTensor& rstd = c.outputs[2];
    const std::vector<int64_t> ns = c.call.get_int_list("normalized_shape");
    auto opt = [&](int t) { return t >= 0 ? OpArg(c.inputs[t]) : OpArg(IValue()); };
    auto g = call_op("native_layer_norm_backward", {c.grad(0), x, iv(ns), mean, rstd, opt(wi), opt(bi),
                                                    iv(std::vector<int64_t>{1, 1, 1})});
    Grads r(c.inputs.size());
    r[0] = g[0];
    if (wi >= 0) r[wi] = g[1];
    if (bi >= 0) r[bi] = g[2];
    if (c.grads[1] || c.grads[2]) {
      double n = 1;
      for (int64_t s : ns) n *= static_cast<double>(s);
      DTensor extra = F::div(c.grad(1), n);
      extra = F::sub(extra, F::mul(F::mul(c.grad(2), F::pow(rstd, 3.0)), F::div(F::sub(x, mean), n)));
      r[0] = F::add(*r[0], extra);
    }
    return r;
  });
  // native_group_norm, over x viewed as [N, group, K] (K elements per sample and group) with its
  // mean and rstd outputs: layer_norm's formula per row, the affine gradients summed over N and the
  // spatial elements per channel, and (as native_layer_norm's) the statistics' own gradients.
  def("native_group_norm", [](const BackwardCtx& c) {
    const DTensor& x = c.inputs[0];
    const Shape& s = x.shape();
    const int64_t n = s[0], ch = s[1], g = c.call.get_int("group");
    const int64_t k = n * ch == 0 ? 0 : numel(s) / n / g, sp = n * ch == 0 ? 0 : numel(s) / n / ch;
    const DTensor xr = F::reshape(x, {n, g, k});
    const DTensor mean = F::reshape(c.outputs[1], {n, g, 1}), rstd = F::reshape(c.outputs[2], {n, g, 1});
    const DTensor xhat = F::mul(F::sub(xr, mean), rstd);
    const DTensor gy = F::reshape(c.grad(0), {n, ch, sp});
    const int wi = c.call.tensor_index("weight"), bi = c.call.tensor_index("bias");
    const DTensor gw = F::reshape(wi >= 0 ? F::mul(gy, F::reshape(c.inputs[wi], {ch, 1})) : gy, {n, g, k});
    DTensor gin = F::mul(F::sub(F::sub(gw, F::mean(gw, {2}, true)), F::mul(xhat, F::mean(F::mul(gw, xhat), {2}, true))),
                         rstd);
    if (c.grads[1] || c.grads[2]) {
      gin = F::add(gin, F::div(F::reshape(c.grad(1), {n, g, 1}), static_cast<double>(k)));
      const DTensor d = F::mul(F::mul(F::reshape(c.grad(2), {n, g, 1}), F::pow(rstd, 3.0)), F::sub(xr, mean));
      gin = F::sub(gin, F::div(d, static_cast<double>(k)));
    }
    Grads r(c.inputs.size());
    r[0] = F::reshape(gin, {s.begin(), s.end()});
    if (wi >= 0) r[wi] = F::sum(F::mul(gy, F::reshape(xhat, {n, ch, sp})), {0, 2}, false);
    if (bi >= 0) r[bi] = F::sum(gy, {0, 2}, false);
    return r;
  });
  def("rms_norm", [](const BackwardCtx& c) {
    const DTensor& x = c.inputs[0];
    const int64_t nn = static_cast<int64_t>(c.call.get_int_list("normalized_shape").size());
    auto dims = last_dims(x.dim(), nn), batch = first_dims(x.dim() - nn);
    double eps = c.call.has("eps") ? c.call.get_double("eps") : default_rms_eps(x.dtype());
    DTensor rr = F::rsqrt(F::add(F::mean(F::mul(x, x), dims, true), eps));
    DTensor xhat = F::mul(x, rr), g = c.grad(0);
    int wi = c.call.tensor_index("weight");
    Grads r(c.inputs.size());
    r[0] = rms_norm_input_grad(wi >= 0 ? F::mul(g, c.inputs[wi]) : g, xhat, rr, dims);
    if (wi >= 0) r[wi] = batch.empty() ? F::mul(g, xhat) : F::sum(F::mul(g, xhat), batch);
    return r;
  });
}

DTENSOR_FAMILY_PART("norm", kBackward, register_norm_backward);

}  // namespace dtensor::bw

// Backward formulas of softmax, log_softmax, layer_norm, rms_norm, embedding, the losses and
// scaled_dot_product_attention.
#include <limits>

#include "autograd/backward_util.h"

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

// dx of x_hat * w given dy: rstd * (gw - mean(gw) - x_hat * mean(gw * x_hat)) (layer norm) or, with
// centered = false, rrms * (gw - x_hat * mean(gw * x_hat)) (rms norm).
DTensor norm_input_grad(const DTensor& gw, const DTensor& xhat, const DTensor& r, const std::vector<int64_t>& dims,
                        bool centered) {
  DTensor inner = F::sub(gw, F::mul(xhat, F::mean(F::mul(gw, xhat), dims, true)));
  if (centered) inner = F::sub(inner, F::mean(gw, dims, true));
  return F::mul(inner, r);
}

}  // namespace

void register_norm_loss_backward() {
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
    const DTensor& x = c.inputs[0];
    const int64_t nn = static_cast<int64_t>(c.call.get_int_list("normalized_shape").size());
    auto dims = last_dims(x.dim(), nn), batch = first_dims(x.dim() - nn);
    DTensor xc = F::sub(x, F::mean(x, dims, true));
    DTensor rstd = F::rsqrt(F::add(F::mean(F::mul(xc, xc), dims, true), c.call.get_double("eps")));
    DTensor xhat = F::mul(xc, rstd), g = c.grad(0);
    int wi = c.call.tensor_index("weight"), bi = c.call.tensor_index("bias");
    Grads r(c.inputs.size());
    r[0] = norm_input_grad(wi >= 0 ? F::mul(g, c.inputs[wi]) : g, xhat, rstd, dims, true);
    if (wi >= 0) r[wi] = batch.empty() ? F::mul(g, xhat) : F::sum(F::mul(g, xhat), batch);
    if (bi >= 0) r[bi] = batch.empty() ? g : F::sum(g, batch);
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
    r[0] = norm_input_grad(wi >= 0 ? F::mul(g, c.inputs[wi]) : g, xhat, rr, dims, false);
    if (wi >= 0) r[wi] = batch.empty() ? F::mul(g, xhat) : F::sum(F::mul(g, xhat), batch);
    return r;
  });
  def("embedding", [](const BackwardCtx& c) {
    const DTensor& w = c.inputs[0];
    return Grads{call_op1("embedding_dense_backward", {c.grad(0), c.inputs[1], iv(w.shape()[0])},
                          {{"padding_idx", iv(c.call.get_int("padding_idx"))}}),
                 std::nullopt};
  });
  auto nll_grad = [](const BackwardCtx& c, const DTensor& g, const DTensor& logp) {
    std::vector<OpArg> args{g, logp, c.inputs[1]};
    int wi = c.call.tensor_index("weight");
    args.push_back(wi >= 0 ? OpArg(c.inputs[wi]) : OpArg(IValue{}));
    return call_op1("nll_loss_backward", args,
                    {{"reduction", iv(c.call.get_str("reduction"))}, {"ignore_index", iv(c.call.get_int("ignore_index"))}});
  };
  def("nll_loss", [nll_grad](const BackwardCtx& c) {
    Grads r(c.inputs.size());
    r[0] = nll_grad(c, c.grad(0), c.inputs[0]);
    return r;
  });
  // cross_entropy: d/dx = c_n (onehot(t_n) - softmax(x)_n) with c_n = -g w_t / denominator, written
  // with element-wise ops only, so class-sharded logits (loss parallel) stay sharded: the one-hot
  // compares the targets with a class index laid out like the logits' class dim.
  def("cross_entropy", [](const BackwardCtx& c) {
    DT_CHECK(c.call.get_double("label_smoothing") == 0.0,
             "cross_entropy backward: label_smoothing is not supported; accepted: 0.0");
    const DTensor& x = c.inputs[0];
    const DTensor& target = c.inputs[1];
    const int64_t cls = x.dim() >= 2 ? 1 : 0, C = x.shape()[cls];
    const std::string red = c.call.get_str("reduction");
    MeshPtr mesh = x.mesh();
    Placements cp(mesh->ndim(), Replicate());
    for (int i = 0; i < mesh->ndim(); ++i)
      if (x.placements()[i].is_shard(cls)) cp[i] = Shard(0);
    DTensor classes = distribute_tensor(Tensor::arange(C, DType::kInt64).to(x.local_tensor().device()), mesh, cp);
    DTensor t = x.dim() >= 2 ? F::unsqueeze(target, 1) : target;  // [N, 1] or []
    DTensor onehot = as_float(call_op1("eq", {t, classes}), x.dtype());
    // Per-sample weight of the target (0 where ignored).
    DTensor keep = as_float(call_op1("ne", {t, full_like(t, static_cast<double>(c.call.get_int("ignore_index")))}), x.dtype());
    DTensor safe_t = F::mul(F::to(t, DType::kInt64), F::to(keep, DType::kInt64));
    int wi = c.call.tensor_index("weight");
    DTensor wt = keep;
    if (wi >= 0) {
      DTensor w2 = F::unsqueeze(c.inputs[wi], 1);  // [C, 1]
      DTensor looked = F::embedding(w2, safe_t);   // [N, 1, 1] or [1]
      wt = F::mul(F::reshape(looked, std::vector<int64_t>(t.shape().begin(), t.shape().end())), keep);
    }
    DTensor g = c.grad(0);
    if (red == "none" && x.dim() >= 2) g = F::unsqueeze(g, 1);
    DTensor coef = F::neg(F::mul(wt, g));
    if (red == "mean") coef = F::div(coef, F::sum(wt));
    DTensor softmax = F::softmax(x, cls);
    Grads r(c.inputs.size());
    r[0] = F::mul(F::sub(onehot, softmax), coef);
    return r;
  });
  def("scaled_dot_product_attention", [](const BackwardCtx& c) {
    std::vector<std::pair<std::string, OpArg>> kw{{"is_causal", iv(c.call.get_bool("is_causal"))}};
    if (c.call.has("scale")) kw.emplace_back("scale", iv(c.call.get_double("scale")));
    const int mask = c.call.tensor_index("attn_mask");
    if (mask >= 0) kw.emplace_back("attn_mask", c.inputs[mask]);
    auto g = call_op("_scaled_dot_product_attention_backward",
                     {c.grad(0), c.inputs[0], c.inputs[1], c.inputs[2], c.outputs[0]}, kw);
    Grads r{g[0], g[1], g[2]};
    if (mask >= 0) r.push_back(std::nullopt);  // masks get no gradient
    return r;
  });
}

}  // namespace dtensor::bw

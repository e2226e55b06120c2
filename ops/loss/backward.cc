// Backward formulas of the losses: nll_loss and cross_entropy.

#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {

void register_loss_backward(Registry&) {
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
}

DTENSOR_FAMILY_PART("loss", kBackward, register_loss_backward);

}  // namespace dtensor::bw

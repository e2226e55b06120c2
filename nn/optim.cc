#include "nn/optim.h"

#include <cmath>

#include "kernels/cpu/vec_math.h"

namespace dtensor::nn {

AdamW::AdamW(std::vector<std::pair<std::string, DTensor*>> params, AdamWOptions options)
    : params_(std::move(params)), o_(options) {
  for (auto& [name, p] : params_) {
    Tensor z = Tensor::zeros(p->local_tensor().sizes(), p->dtype(), p->local_tensor().device());
    m_.emplace_back(p->spec(), z);
    v_.emplace_back(p->spec(), z.clone());
  }
}

namespace {
// The update on the local blocks in one fused pass (kernels/cpu/vec_math.h) when all four are
// contiguous CPU float32/float64 tensors of one dtype and size; the tensor-op path below (one op per
// term, a fresh tensor each) stays for other devices and layouts. Both compute the same formula.
bool fused_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, double c1, double c2,
                const AdamWOptions& o) {
  const DType t = p.dtype();
  if ((t != DType::kFloat32 && t != DType::kFloat64) || !p.device().is_cpu() || !g.device().is_cpu())
    return false;
  for (const Tensor* x : {&p, &g, &m, &v})
    if (x->dtype() != t || x->numel() != p.numel() || !x->is_contiguous()) return false;
  const kernels::vec::AdamWScalars s{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, c1, c2};
  if (t == DType::kFloat32)
    kernels::vec::adamw_step(p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), p.numel(), s);
  else
    kernels::vec::adamw_step(p.data<double>(), g.data<double>(), m.data<double>(), v.data<double>(), p.numel(), s);
  return true;
}
}  // namespace

void AdamW::step() {
  NoGradGuard ng;
  ++t_;
  const double c1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t_));
  const double c2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t_));
  for (size_t i = 0; i < params_.size(); ++i) {
    DTensor& p = *params_[i].second;
    auto g = grad(p);
    if (!g) continue;
    DT_CHECK(g->placements() == p.placements(), "AdamW: gradient of ", params_[i].first, " has placements ",
             placements_str(g->placements()), ", the parameter ", placements_str(p.placements()));
    if (fused_step(p.local_tensor(), g->local_tensor(), m_[i].local_tensor(), v_[i].local_tensor(), c1, c2, o_))
      continue;
    DTensor gd = detach(*g);
    DTensor m = F::add(F::mul(m_[i], o_.beta1), F::mul(gd, 1.0 - o_.beta1));
    DTensor v = F::add(F::mul(v_[i], o_.beta2), F::mul(F::mul(gd, gd), 1.0 - o_.beta2));
    DTensor upd = F::div(F::div(m, c1), F::add(F::sqrt(F::div(v, c2)), o_.eps));
    DTensor q = detach(p);
    DTensor next = F::sub(F::mul(q, 1.0 - o_.lr * o_.weight_decay), F::mul(upd, o_.lr));
    // In place: the modules hold this DTensor (and its autograd meta).
    Tensor(p.local_tensor()).copy_(next.local_tensor());
    Tensor(m_[i].local_tensor()).copy_(m.local_tensor());
    Tensor(v_[i].local_tensor()).copy_(v.local_tensor());
  }
}

void AdamW::zero_grad() {
  for (auto& [n, p] : params_) dtensor::zero_grad(*p);
}

std::vector<std::pair<std::string, DTensor*>> AdamW::state() {
  std::vector<std::pair<std::string, DTensor*>> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back(params_[i].first + ".exp_avg", &m_[i]);
    out.emplace_back(params_[i].first + ".exp_avg_sq", &v_[i]);
  }
  return out;
}

}  // namespace dtensor::nn

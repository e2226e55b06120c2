// Softmax statistics over a sharded dim (DESIGN §6, loss parallel): the row max is all-reduced
// (max), then the sum of exp(x - max) (sum); logsumexp = max + log(sum), and log-probabilities are
// (x - max) - log(sum), never x - logsumexp, which loses log(sum) for |max| ~1e16 times larger (as
// the single-device kernels, kernels/cpu/norm.cc). On top of it:
// logsumexp, softmax and log_softmax keep the reduced dim sharded, and cross_entropy over a
// class-sharded logit gathers only per-row scalars (the target's logit and, for label smoothing,
// the row sum) instead of the logits.
#include <cmath>
#include <limits>

#include "dtensor/dtensor_spec.h"
#include "ops/common/steps.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

Tensor all_reduce(Tensor t, ReduceOp op, const std::vector<int>& dims, const DeviceMesh& mesh, Timeout to) {
  t = t.contiguous().clone();
  for (int md : dims) mesh.group(md).all_reduce(t, op, to);
  return t;
}

// Global softmax statistics over `d` (keepdim) of a block sharded along d over `dims`, in float64:
// shift, the row max (0 for a row of -inf only), and log_sum = log(sum(exp(x - shift))).
struct RowStats {
  Tensor shift, log_sum;
};

RowStats global_stats(const Tensor& x64, int64_t d, const std::vector<int>& dims, const DeviceMesh& mesh, Timeout to) {
  Shape s = x64.sizes();
  s[d] = 1;
  const Device dev = x64.device();  // every buffer stays there (StepDef::runs_on_device)
  Tensor mx = x64.size(d) > 0 ? kernels::amax(x64, {d}, true)
                              : Tensor::full(s, -std::numeric_limits<double>::infinity(), DType::kFloat64, dev);
  mx = all_reduce(mx, ReduceOp::kMax, dims, mesh, to);
  // A row of -inf everywhere would give NaN below; shift by 0 there instead.
  Tensor safe = kernels::where(kernels::eq(mx, Scalar(-std::numeric_limits<double>::infinity())),
                               Tensor::zeros(s, DType::kFloat64, dev), mx);
  Tensor se = x64.size(d) > 0 ? kernels::sum(kernels::exp(kernels::sub(x64, safe)), {d}, true)
                              : Tensor::zeros(s, DType::kFloat64, dev);
  se = all_reduce(se, ReduceOp::kSum, dims, mesh, to);
  return {safe, kernels::log(se)};
}

int64_t row_bytes(const OpCall& c, const Strategy& st, int64_t d) {
  Shape block = local_block(c.tensor(0).shape, st.inputs[0], c.mesh_shape(),
                            std::vector<int64_t>(c.mesh_shape().size(), 0)).first;
  return block[d] == 0 ? 0 : numel(block) / block[d] * 8;
}

StepTraffic two_reductions(const OpCall& c, const Strategy& st, const std::vector<int>& dims, int64_t d, int n) {
  int64_t group = 1;
  for (int i : dims) group *= c.mesh_shape()[i];
  const int64_t per = comm_bytes_sent(CommKind::kAllReduce, row_bytes(c, st, d), group);
  return StepTraffic{CommKind::kAllReduce, per * n, n};
}

}  // namespace

StepDef softmax_stats_step(const std::string& kind) {
  StepDef step;
  step.name = "softmax_stats";
  step.runs_on_device = true;
  step.traffic = [](const OpCall& c, const Strategy& st, const std::vector<int>& dims) {
    int64_t d = wrap_dim(c.has("dim") ? c.get_int_list("dim")[0] : 0, static_cast<int64_t>(c.tensor(0).shape.size()), "dim");
    return two_reductions(c, st, dims, d, 2);
  };
  step.run = [kind](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx,
                    const std::vector<int>& dims, const DeviceMesh& mesh, Timeout to) {
    const int64_t rank = static_cast<int64_t>(c.tensor(0).shape.size());
    const int64_t d = wrap_dim(c.get_int_list("dim")[0], rank, "dim");
    Tensor x64 = in[0].to(DType::kFloat64);
    const RowStats st = global_stats(x64, d, dims, mesh, to);
    const DType dt = ctx.out_meta[0].dtype;
    if (kind == "logsumexp") {
      Tensor lse = kernels::add(st.log_sum, st.shift);
      if (!(c.has("keepdim") && c.get_bool("keepdim"))) lse = lse.squeeze(d);
      return std::vector<Tensor>{lse.contiguous().to(dt)};
    }
    Tensor logp = kernels::sub(kernels::sub(x64, st.shift), st.log_sum);
    return std::vector<Tensor>{(kind == "softmax" ? kernels::exp(logp) : logp).to(dt)};
  };
  return step;
}

// cross_entropy(self [N, C] class-sharded, target [N] replicated, weight [C] replicated).
StepDef loss_parallel_step() {
  StepDef step;
  step.name = "loss_parallel";
  step.traffic = [](const OpCall& c, const Strategy& st, const std::vector<int>& dims) {
    return two_reductions(c, st, dims, 1, 4);
  };
  step.runs_on_device = true;  // kernels and collectives only; the one host read is the target range
  step.run = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx,
                const std::vector<int>& dims, const DeviceMesh& mesh, Timeout to) {
    namespace K = kernels;
    const Tensor& x = in[0];
    const Device dev = x.device();  // every buffer stays there
    const Tensor x64 = x.to(DType::kFloat64);
    const int64_t N = x.size(0), C = c.tensor(0).shape[1];
    const int64_t off = ctx.in_block(c, 0).second[1], len = x.size(1);
    const RowStats st = global_stats(x64, 1, dims, mesh, to);
    const Tensor log_sum = st.log_sum.reshape({N});
    const Tensor shifted = K::sub(x64, st.shift);  // x - max: the log-probabilities plus log_sum
    const Tensor t = in[1].to(DType::kInt64);
    const int64_t ii = c.get_int("ignore_index");
    const double eps = c.get_double("label_smoothing");
    const Tensor ignored = K::eq(t, Scalar(ii));
    const Tensor zeros_n = Tensor::zeros({N}, DType::kInt64, dev);
    const Tensor t_safe = K::where(ignored, zeros_n, t);  // ignored rows read class 0, then drop out
    if (N > 0) {  // the range, read back once (two numbers): the only host read
      const auto lohi = K::stack({K::amin(t_safe), K::amax(t_safe)}).to(cpu()).to_vector<int64_t>();
      for (int64_t v : lohi)
        DT_CHECK(v >= 0 && v < C, c.str(), ": target ", v, " out of range [0, ", C, ")");
    }
    // Per row: the target's shifted logit (from the rank that holds its class) and the row's
    // weighted shifted-logit sum, summed over the class-sharding ranks.
    std::vector<int64_t> iota(len);
    for (int64_t k = 0; k < len; ++k) iota[k] = off + k;  // this rank's classes
    const Tensor classes = Tensor::from_vector(iota, {1, len}).to(dev);
    const Tensor hit = K::eq(t.reshape({N, 1}), classes);  // [N, len]; never true on ignored rows' class 0
    const Tensor hit_kept = K::where(ignored.reshape({N, 1}), Tensor::zeros({N, 1}, DType::kBool, dev), hit);
    const Tensor zero_f = Tensor::zeros({1, 1}, DType::kFloat64, dev);
    const Tensor target_logit = K::sum(K::where(hit_kept, shifted, zero_f), {1});
    Tensor w;  // [C] float64 on the device, or undefined (all ones)
    if (c.has("weight")) w = in[c.tensor_index("weight")].to(DType::kFloat64);
    const Tensor weighted = w.defined() ? K::mul(shifted, w.narrow(0, off, len).reshape({1, len})) : shifted;
    Tensor picked = K::stack({target_logit, K::sum(weighted, {1})}, 1);  // [N, 2]
    picked = all_reduce(picked, ReduceOp::kSum, dims, mesh, to);
    const Tensor p_t = picked.narrow(1, 0, 1).reshape({N}), p_all = picked.narrow(1, 1, 1).reshape({N});
    // -(1 - eps) w_t log p_t - eps / C * sum_c w_c log p_c (torch's weighted label smoothing), with
    // log p_c = (x_c - max) - log_sum.
    const Tensor w_t = w.defined() ? K::embedding(w.reshape({C, 1}), t_safe).reshape({N})
                                   : Tensor::full({N}, 1.0, DType::kFloat64, dev);
    const Tensor w_sum = w.defined() ? K::sum(w) : Tensor::full({}, static_cast<double>(C), DType::kFloat64, dev);
    const Tensor nll = K::mul(w_t, K::sub(log_sum, p_t));
    const Tensor smooth = K::div(K::sub(K::mul(log_sum, w_sum), p_all), Scalar(static_cast<double>(C)));
    const Tensor zero_n = Tensor::zeros({N}, DType::kFloat64, dev);
    const Tensor loss =
        K::where(ignored, zero_n, K::add(K::mul(nll, Scalar(1.0 - eps)), K::mul(smooth, Scalar(eps))));
    const std::string red = c.get_str("reduction");
    const DType dt = ctx.out_meta[0].dtype;
    if (red == "none") return std::vector<Tensor>{loss.to(dt)};
    const Tensor total = K::sum(loss);
    if (red == "sum") return std::vector<Tensor>{total.to(dt)};
    // mean: over the kept rows' weights; 0 / 0 (every row ignored) is NaN, as torch.
    return std::vector<Tensor>{K::div(total, K::sum(K::where(ignored, zero_n, w_t))).to(dt)};
  };
  return step;
}

void add_softmax_steps(Registry& reg) {
  reg.mutable_find("logsumexp").steps.push_back(softmax_stats_step("logsumexp"));
  reg.mutable_find("softmax").steps.push_back(softmax_stats_step("softmax"));
  reg.mutable_find("log_softmax").steps.push_back(softmax_stats_step("log_softmax"));
  reg.mutable_find("cross_entropy").steps.push_back(loss_parallel_step());
}

DTENSOR_FAMILY_PART("norm", kSteps, add_softmax_steps);

}  // namespace dtensor::ops

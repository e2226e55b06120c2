// Softmax statistics over a sharded dim (DESIGN §6, loss parallel): the row max is all-reduced
// (max), then the sum of exp(x - max) (sum); logsumexp = max + log(sum). On top of it:
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

// Global logsumexp over `d` (keepdim) of a block sharded along d over `dims`, in float64.
Tensor global_lse(const Tensor& x64, int64_t d, const std::vector<int>& dims, const DeviceMesh& mesh, Timeout to) {
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
  return kernels::add(kernels::log(se), safe);
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
    Tensor lse = global_lse(x64, d, dims, mesh, to);
    const DType dt = ctx.out_meta[0].dtype;
    if (kind == "logsumexp") {
      if (!(c.has("keepdim") && c.get_bool("keepdim"))) lse = lse.squeeze(d);
      return std::vector<Tensor>{lse.contiguous().to(dt)};
    }
    Tensor logp = kernels::sub(x64, lse);
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
  step.run = [](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx,
                const std::vector<int>& dims, const DeviceMesh& mesh, Timeout to) {
    const Tensor& x = in[0];
    Tensor x64 = x.to(DType::kFloat64);
    const int64_t N = x.size(0), C = c.tensor(0).shape[1];
    const int64_t off = ctx.in_block(c, 0).second[1], len = x.size(1);
    Tensor lse = global_lse(x64, 1, dims, mesh, to);  // [N, 1]
    auto target = in[1].to(DType::kInt64).contiguous().to_vector<int64_t>();
    const int64_t ii = c.get_int("ignore_index");
    const double eps = c.get_double("label_smoothing");
    std::vector<double> w(C, 1.0);
    if (c.has("weight")) w = in[c.tensor_index("weight")].to_vector<double>();
    // Per row: the target's logit (from the rank that holds it) and the row's weighted logit sum.
    Tensor picked = Tensor::zeros({N, 2}, DType::kFloat64);
    Tensor xc = x64.contiguous();
    const double* px = xc.data<double>();
    double* pp = picked.data<double>();
    for (int64_t n = 0; n < N; ++n) {
      const int64_t t = target[n];
      if (t != ii && t >= off && t < off + len) pp[2 * n] = px[n * len + (t - off)];
      for (int64_t k = 0; k < len; ++k) pp[2 * n + 1] += w[off + k] * px[n * len + k];
    }
    picked = all_reduce(picked, ReduceOp::kSum, dims, mesh, to);
    const double* pk = picked.data<double>();
    auto l = lse.to_vector<double>();
    double wsum_all = 0;
    for (double v : w) wsum_all += v;
    std::vector<double> loss(N, 0.0);
    double total = 0, denom = 0;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t t = target[n];
      DT_CHECK(t == ii || (t >= 0 && t < C), c.str(), ": target ", t, " out of range [0, ", C, ")");
      if (t == ii) continue;
      // -(1 - eps) w_t log p_t - eps / C * sum_c w_c log p_c (torch's weighted label smoothing).
      double nll = w[t] * (l[n] - pk[2 * n]);
      double smooth = (wsum_all * l[n] - pk[2 * n + 1]) / static_cast<double>(C);
      loss[n] = (1.0 - eps) * nll + eps * smooth;
      total += loss[n];
      denom += w[t];
    }
    const std::string red = c.get_str("reduction");
    const DType dt = ctx.out_meta[0].dtype;
    if (red == "none") return std::vector<Tensor>{Tensor::from_vector(loss, {N}).to(dt)};
    double v = red == "sum" ? total : (denom > 0 ? total / denom : std::nan(""));
    return std::vector<Tensor>{Tensor::full({}, v, dt)};
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

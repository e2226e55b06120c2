#include "planner/cluster_plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dtensor/core/error.h"
#include "dtensor/placement.h"
#include "planner/graph.h"

namespace dtensor::planner {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The compute dtype: its largest parameter's (the zoo's models are bfloat16 throughout).
DType compute_dtype(const ModelGraph& g) {
  DType dt = DType::kFloat32;
  int64_t most = -1;
  for (int v = 0; v < g.num_vertices(); ++v) {
    const Node& nd = g.node(v);
    if (nd.kind != NodeKind::kParam || nd.outputs.empty()) continue;
    if (const int64_t n = numel(nd.outputs[0].shape); n > most) std::tie(most, dt) = std::make_pair(n, nd.outputs[0].dtype);
  }
  return dt;
}

// The batch: dim 0 of the graph's first data input (tokens [batch, seq], images [batch, ...]).
int64_t batch_rows(const ModelGraph& g) {
  for (int v = 0; v < g.num_vertices(); ++v) {
    const Node& nd = g.node(v);
    if (nd.kind == NodeKind::kInput && !nd.outputs.empty() && !nd.outputs[0].shape.empty()) return nd.outputs[0].shape[0];
  }
  return 0;
}

// The units a mesh dim's share is counted in: batch rows on data-parallel dims (named other than
// the zoo's model-parallel names tp, cp, sp, ep, pp), 4 per rank on the others (small integer
// weights, which split the power-of-two dims of hidden sizes and heads exactly).
std::vector<int64_t> share_units(const MeshSpec& mesh, int64_t batch) {
  std::vector<int64_t> units(mesh.ndim());
  for (int i = 0; i < mesh.ndim(); ++i) {
    const std::string& d = mesh.names[i];
    const bool model_parallel = d == "tp" || d == "cp" || d == "sp" || d == "ep" || d == "pp";
    units[i] = !model_parallel && batch > 0 ? batch : 4 * mesh.shape[i];
  }
  return units;
}

// Weights made whole units: each coordinate's units by largest remainder (weighted_range), and
// those counts as the weights, so that the batch, and every dim the model folds it into
// ([batch * seq] tokens), splits with no remainder. Empty where the counts come out even; nullopt
// when a coordinate would get none (weights are >= 1).
std::optional<MeshWeights> as_rows(const MeshWeights& w, const std::vector<int64_t>& units) {
  MeshWeights out(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i].empty()) continue;
    for (size_t c = 0; c < w[i].size(); ++c) {
      out[i].push_back(weighted_range(units[i], w[i], static_cast<int64_t>(c)).second);
      if (out[i].back() == 0) return std::nullopt;
    }
    if (std::all_of(out[i].begin(), out[i].end(), [&](int64_t r) { return r == out[i][0]; })) out[i].clear();
  }
  return out;
}

}  // namespace

MeshWeights speed_weights(const Cluster& cluster, const MeshSpec& mesh, DType dtype, bool memory_bandwidth,
                          double share) {
  cluster.check_mesh(mesh.shape, mesh.str());
  const int nd = mesh.ndim();
  MeshWeights out(nd);
  int64_t stride = 1;
  for (int i = nd - 1; i >= 0; --i) {
    const int64_t k = mesh.shape[i];
    std::vector<double> speed(k, std::numeric_limits<double>::infinity());
    for (int64_t r = 0; r < mesh.size(); ++r) {
      const HardwareProfile& p = cluster.profile_of(r);
      const double s = memory_bandwidth ? p.memory_bandwidth_GBps : p.peak_flops_per_us(dtype);
      double& c = speed[(r / stride) % k];
      c = std::min(c, s);
    }
    stride *= k;
    const double slowest = *std::min_element(speed.begin(), speed.end());
    if (!(slowest > 0) || slowest == *std::max_element(speed.begin(), speed.end())) continue;
    for (double s : speed) {
      const double w = std::round(100.0 * ((1.0 - share) + share * s / slowest));
      out[i].push_back(static_cast<int64_t>(std::clamp(w, 1.0, static_cast<double>(kMaxShardWeight))));
    }
  }
  return out;
}

PlanResult plan_cluster(const ModelGraph& g, const MeshSpec& mesh, const Cluster& cluster, PlanOptions options) {
  cluster.check_mesh(mesh.shape, mesh.str());
  const DType dt = compute_dtype(g);
  struct Candidate {
    std::string basis;
    MeshWeights weights;
  };
  const std::vector<int64_t> units = share_units(mesh, batch_rows(g));
  std::vector<Candidate> cands = {{"even", MeshWeights(mesh.ndim())}};
  std::vector<PlanResult::WeightOption> tried;
  auto add = [&](std::string basis, const MeshWeights& speed) {
    std::optional<MeshWeights> w = as_rows(speed, units);
    if (!w) {
      PlanResult::WeightOption none;
      none.basis = basis;
      none.weights = speed;
      none.searched = false;
      none.error = absl::StrCat("gives a rank none of the ", absl::StrJoin(units, ", "),
                                " units (batch rows on data-parallel dims, 4 per rank on tp/cp/sp/ep/pp) of the mesh dims");
      tried.push_back(std::move(none));
      return;
    }
    for (Candidate& c : cands)
      if (c.weights == *w) {
        if (c.basis != "even") c.basis += ", " + basis;  // the same rows: one search
        return;
      }
    cands.push_back({std::move(basis), std::move(*w)});
  };
  for (double a : {0.25, 0.5, 0.75}) add(absl::StrCat("peak FLOP/s x ", a), speed_weights(cluster, mesh, dt, false, a));
  add("peak FLOP/s", speed_weights(cluster, mesh, dt, false));
  add("memory bandwidth", speed_weights(cluster, mesh, dt, true));

  const HardwareProfile& hw = *cluster.hosts.front().profile;
  std::vector<PlanResult::WeightOption> searched;  // the shares that could not be given (tried) go last
  std::optional<size_t> best;
  std::string even_error;
  for (size_t i = 0; i < cands.size(); ++i) {
    PlanOptions o = options;
    o.compare = false;
    o.shares = {&cluster, cands[i].weights};
    PlanResult::WeightOption w;
    w.basis = cands[i].basis;
    w.weights = cands[i].weights;
    const double t0 = now_ms();
    try {
      PlanResult r = plan_model(g, mesh, hw, o);
      w.valid = true;
      w.step_time_us = r.eval.step_time_us;
      w.peak_memory_bytes = r.eval.peak_memory_bytes;
      if (!best || w.step_time_us < searched[*best].step_time_us) best = i;
    } catch (const Error& e) {
      if (i == 0) even_error = e.what();
      w.error = e.what();
    }
    w.plan_time_ms = now_ms() - t0;
    searched.push_back(std::move(w));
  }
  searched.insert(searched.end(), tried.begin(), tried.end());
  if (!best) DT_FAIL(even_error);
  // The winner again, with the baselines priced under its weights.
  options.shares = {&cluster, cands[*best].weights};
  PlanResult r = plan_model(g, mesh, hw, options);
  r.cluster = cluster.str();
  r.weights = cands[*best].weights;
  r.weight_options = std::move(searched);
  return r;
}

}  // namespace dtensor::planner

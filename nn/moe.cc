#include "nn/moe.h"

#include <algorithm>
#include <numeric>

#include "dtensor/collectives/process_group.h"

namespace dtensor::nn {
namespace {

int ep_dim_of(const DeviceMesh& mesh) {
  const auto& names = mesh.dim_names();
  auto it = std::find(names.begin(), names.end(), "ep");
  return it == names.end() ? -1 : static_cast<int>(it - names.begin());
}

DTensor index_tensor(const std::vector<int64_t>& ids, const MeshPtr& self, Device device) {
  return dtensor::from_local(Tensor::from_vector(ids, {static_cast<int64_t>(ids.size())}).to(device), self,
                             {Replicate()});
}

// Where every (token, slot) pair goes: top-k experts per token, the pairs sorted by expert.
struct Routing {
  std::vector<int64_t> expert;  // per pair (token-major)
  std::vector<int64_t> order;   // pair indices sorted by expert (stable)
  std::vector<int64_t> counts;  // pairs per expert
};

Routing route(const Tensor& probs, int64_t k) {
  const int64_t n = probs.size(0), E = probs.size(1);
  std::vector<double> p = probs.to_vector<double>();
  Routing r;
  r.expert.resize(n * k);
  r.counts.assign(E, 0);
  std::vector<int64_t> idx(E);
  for (int64_t t = 0; t < n; ++t) {
    std::iota(idx.begin(), idx.end(), 0);
    const double* row = p.data() + t * E;
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int64_t a, int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    for (int64_t j = 0; j < k; ++j) {
      r.expert[t * k + j] = idx[j];
      ++r.counts[idx[j]];
    }
  }
  r.order.resize(n * k);
  std::iota(r.order.begin(), r.order.end(), 0);
  std::stable_sort(r.order.begin(), r.order.end(), [&](int64_t a, int64_t b) { return r.expert[a] < r.expert[b]; });
  return r;
}

// Whether the experts' FFN dim is split over mesh dim `tp` (ExpertParallel::param_placements).
bool mesh_tp_split(const DeviceMesh& mesh, int tp, int ep) {
  return tp >= 0 && tp < mesh.ndim() && tp != ep && mesh.size(tp) > 1;
}

std::vector<int64_t> inverse(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

}  // namespace

MoE::MoE(int64_t dim, int64_t hidden, int64_t experts, int64_t top_k, uint64_t seed)
    : dim_(dim), hidden_(hidden), experts_(experts), top_k_(top_k) {
  DT_CHECK(experts >= 1 && top_k >= 1 && top_k <= experts, "MoE: top_k ", top_k, " of ", experts,
           " experts; accepted: 1 <= top_k <= experts");
  router_ = &add_parameter("router", normal_init({experts, dim}, 0.02, seed_of("router", seed)));
  w1_ = &add_parameter("w1", normal_init({experts, dim, hidden}, 0.02, seed_of("w1", seed)));
  w2_ = &add_parameter("w2", normal_init({experts, hidden, dim}, 0.02, seed_of("w2", seed)));
}

DTensor MoE::forward(const DTensor& x) {
  const MeshPtr& mesh = x.mesh();
  DT_CHECK(x.dim() == 3 && x.shape()[2] == dim_, "MoE: input ", shape_str(x.shape()), "; accepted: [B, T, ", dim_, "]");
  int ep = ep_dim_of(*mesh);
  DT_CHECK(ep < 0 || experts_ % mesh->size(ep) == 0, "MoE: ", experts_, " experts do not divide over the ep mesh dim's ",
           mesh->size(ep), " ranks");
  // A batch that does not split over ep (sampling one sequence) runs on every rank with all experts
  // gathered.
  const bool gathered = ep >= 0 && x.shape()[0] % mesh->size(ep) != 0;
  auto expert_weight = [&](const DTensor& w) {
    return to_local(gathered ? redistribute(w, Placements(mesh->ndim(), Replicate())) : w);
  };
  if (gathered) ep = -1;
  const int64_t eps = ep >= 0 ? mesh->size(ep) : 1, me = ep >= 0 ? mesh->coordinate(ep) : 0;
  const int64_t E = experts_, k = top_k_, El = E / eps;
  Placements split(mesh->ndim(), Replicate());
  if (ep >= 0) split[ep] = Shard(0);
  // Parameters replicated on ep but used with this rank's tokens only: their local gradients are
  // partial sums over ep.
  Placements partial_on_ep(mesh->ndim(), Replicate());
  if (ep >= 0) partial_on_ep[ep] = Partial();
  const DTensor xl = to_local(redistribute(x, split));  // [b, T, D]
  const MeshPtr self = xl.mesh();
  const Device device = xl.local_tensor().device();
  const int64_t b = xl.shape()[0], T = xl.shape()[1], n = b * T;
  DTensor tok = F::reshape(xl, {n, dim_});
  DTensor probs = F::softmax(F::linear(tok, to_local(*router_, partial_on_ep), std::nullopt), -1);  // [n, E]

  Routing r = route(probs.local_tensor().to(cpu()), k);
  // Per-expert counts of every ep rank, row s = rank s.
  std::vector<int64_t> all_counts = r.counts;
  if (ep >= 0) {
    Tensor mine = Tensor::from_vector(r.counts, {E});
    Tensor all = Tensor::empty({eps * E}, DType::kInt64);
    mesh->group(ep).all_gather(mine, all, std::vector<int64_t>(eps, E), mesh->timeout());
    all_counts = all.to_vector<int64_t>();
  }
  auto count = [&](int64_t s, int64_t e) { return all_counts[s * E + e]; };
  std::vector<int64_t> send(eps, 0), recv(eps, 0);
  for (int64_t e = 0; e < E; ++e) send[e / El] += r.counts[e];
  for (int64_t s = 0; s < eps; ++s)
    for (int64_t e = me * El; e < (me + 1) * El; ++e) recv[s] += count(s, e);
  rows_sent_ = rows_received_ = 0;
  for (int64_t s = 0; s < eps; ++s)
    if (s != me) {
      rows_sent_ += send[s];
      rows_received_ += recv[s];
    }

  // Dispatch: rows sorted by expert, then to the experts' ranks.
  std::vector<int64_t> src_token(n * k);
  for (int64_t i = 0; i < n * k; ++i) src_token[i] = r.order[i] / k;
  DTensor sorted = F::embedding(tok, index_tensor(src_token, self, device));  // [n k, D]
  DTensor got = ep >= 0 ? all_to_all_v(sorted, *mesh, ep, send, recv) : sorted;
  // Received: by source rank, then by expert; regroup by expert, then source.
  std::vector<int64_t> by_expert, base(eps, 0);
  for (int64_t s = 1; s < eps; ++s) base[s] = base[s - 1] + recv[s - 1];
  std::vector<int32_t> offs;
  for (int64_t e = me * El; e < (me + 1) * El; ++e) {
    for (int64_t s = 0; s < eps; ++s) {
      int64_t at = base[s];
      for (int64_t f = me * El; f < e; ++f) at += count(s, f);
      for (int64_t j = 0; j < count(s, e); ++j) by_expert.push_back(at + j);
    }
    offs.push_back(static_cast<int32_t>(by_expert.size()));
  }
  DTensor xg = F::embedding(got, index_tensor(by_expert, self, device));
  DTensor offs_t = dtensor::from_local(Tensor::from_vector(offs, {El}).to(device), self, {Replicate()});
  // Tensor parallel inside the experts (Megatron's MLP per expert): w1's FFN columns and w2's rows
  // split over tp, so each tp rank's product is a partial sum. The tp ranks of one ep rank hold the
  // same rows; xg enters as Megatron's f (identity, gradient all-reduced over tp) and y leaves as g
  // (all-reduced, gradient passed whole to every rank).
  const int tp = tp_dim();
  const bool tp_split = !gathered && mesh_tp_split(*mesh, tp, ep);
  MeshPtr tpm = tp_split ? mesh->submesh({mesh->dim_names()[tp]}) : nullptr;
  if (tp_split) xg = to_local(from_local(xg, tpm, {Replicate()}), Placements{Partial()});
  DTensor h = F::gelu(F::grouped_mm(xg, expert_weight(*w1_), offs_t), "tanh");
  DTensor y = F::grouped_mm(h, expert_weight(*w2_), offs_t);  // [rows here, D]
  if (tp_split) y = to_local(redistribute(from_local(y, tpm, {Partial()}), {Replicate()}));

  // Combine: back to source order, back to the tokens' ranks, back to (token, slot) order.
  DTensor back = F::embedding(y, index_tensor(inverse(by_expert), self, device));
  DTensor home = ep >= 0 ? all_to_all_v(back, *mesh, ep, recv, send) : back;
  DTensor pairs = F::reshape(F::embedding(home, index_tensor(inverse(r.order), self, device)), {n, k, dim_});
  // The chosen experts' probabilities as gates: probs [n, 1, E] * one-hot [n, k, E], summed over E.
  std::vector<double> hot(n * k * E, 0.0);
  for (int64_t i = 0; i < n * k; ++i) hot[i * E + r.expert[i]] = 1.0;
  const Tensor onehot = Tensor::from_vector(hot, {n, k, E}).to(probs.local_tensor().dtype());
  DTensor gates = F::sum(F::mul(F::unsqueeze(probs, 1),
                                dtensor::from_local(onehot.to(device), self, {Replicate()})), {2}, true);  // [n, k, 1]
  DTensor out = F::sum(F::mul(pairs, gates), {1});  // [n, D]

  // Load balancing over all tokens of the step: P_e through the engine's mean over the ep split,
  // f_e from the gathered counts.
  std::vector<double> f(E, 0.0);
  int64_t pairs_all = 0;
  for (int64_t s = 0; s < eps; ++s)
    for (int64_t e = 0; e < E; ++e) {
      f[e] += static_cast<double>(count(s, e));
      pairs_all += count(s, e);
    }
  for (double& v : f) v /= static_cast<double>(std::max<int64_t>(pairs_all, 1));
  DTensor P = F::mean(from_local(probs, mesh, split, Shape{n * eps, E}), {0});  // [E]
  DTensor fd = distribute_tensor(Tensor::from_vector(f, {E}).to(probs.local_tensor().dtype()).to(device), mesh,
                                 Placements(mesh->ndim(), Replicate()));
  aux_ = F::mul(F::sum(F::mul(P, fd)), static_cast<double>(E));
  return from_local(F::reshape(out, {b, T, dim_}), mesh, split, Shape{b * eps, T, dim_});
}

Placements ExpertParallel::param_placements(const std::string& name, const Module&, const DeviceMesh& mesh,
                                            int tp_dim) const {
  Placements p(mesh.ndim(), Replicate());
  const int ep = ep_dim_of(mesh);
  if (ep >= 0 && (name == "w1" || name == "w2")) p[ep] = Shard(0);
  if (mesh_tp_split(mesh, tp_dim, ep)) {
    if (name == "w1") p[tp_dim] = Shard(2);  // [E, D, H]: FFN columns
    if (name == "w2") p[tp_dim] = Shard(1);  // [E, H, D]: FFN rows
  }
  return p;
}

ParallelPlan moe_plan(bool sequence_parallel, bool loss_parallel) {
  ParallelPlan plan;
  for (auto& entry : megatron_plan(sequence_parallel, loss_parallel))
    if (entry.first.find(".mlp") == std::string::npos) plan.push_back(entry);
  plan.push_back({"blocks.*.moe", std::make_shared<ExpertParallel>()});
  return plan;
}

}  // namespace dtensor::nn

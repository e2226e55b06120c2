#include "planner/cost.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>

#include "dispatch/dispatch.h"
#include "dtensor/dtensor_spec.h"
#include "dtensor/redistribute.h"
#include "ops/flops.h"
#include "propagation/propagate.h"

namespace dtensor::planner {
namespace {

bool is_view_op(const OpDef& op) { return op.cost.cls == CostClass::kView; }

// Forward FLOPs (ops/flops.h), the planner's errors naming itself.
double op_flops(const OpCall& c, const std::vector<TensorMeta>& out) {
  try {
    return forward_flops(c, out);
  } catch (const Error& e) {
    DT_FAIL("planner: ", e.what());
  }
}

// Whether the op's backward keeps its tensor inputs (activations) / its own output.
bool saves_input(const OpDef& op) { return op.cost.saves_inputs; }
bool saves_output(const OpDef& op) { return op.cost.saves_output; }

bool split_on(const Strategy& s, int i) {
  for (const auto* group : {&s.outputs, &s.inputs})
    for (const Placements& p : *group)
      if (!p[i].is_replicate()) return true;
  return false;
}

Placements grad_of(const Strategy& s, int k) {
  Placements g = s.inputs[k];
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i].is_partial()) g[i] = Replicate();
    else if (g[i].is_replicate() && split_on(s, static_cast<int>(i))) g[i] = Partial();
  }
  return g;
}

bool non_sum_partial(const Strategy& s) {
  for (const auto* group : {&s.outputs, &s.inputs})
    for (const Placements& p : *group)
      for (const Placement& x : p)
        if (x.is_partial() && x.reduce != ReduceOp::kSum) return true;
  return false;
}

bool same_strategy(const Strategy& a, const Strategy& b) {
  return a.outputs == b.outputs && a.inputs == b.inputs && a.steps == b.steps;
}

const Move& no_move() {
  static const Move m;
  return m;
}

}  // namespace

// The steps of the engine's redistribution plans (dtensor/redistribute_plan.cc) between the
// placements of tensors of one rank on meshes of one number of dims: R, P(sum) and even S(d), one
// digit each per mesh dim (0: R, 1: P(sum), 2 + d: S(d)). The plan's steps, their order and their
// collectives follow from the placements alone (mesh and tensor sizes only give each step's
// bytes), so one plan, made on a small mesh and tensor, serves every mesh and tensor of the rank.
// An entry, filled on first use (any thread; lock-free), packs up to kMaxSteps collective steps:
// per step the placements before it (their index), its mesh dim and its collective.
class MoveSkeletons {
 public:
  static constexpr int kMaxSteps = 4;
  static constexpr int kIndexBits = 11;  // placements a side: at most 2048
  static constexpr uint64_t kFilled = uint64_t{1} << 63;
  static constexpr uint64_t kCountShift = 60;     // 3 bits: the number of steps; 7: not packed
  static constexpr uint64_t kUnpacked = 7;
  // The collectives a redistribution step can take, as 2-bit codes.
  static constexpr CommKind kKinds[4] = {CommKind::kAllReduce, CommKind::kAllGather, CommKind::kReduceScatter,
                                         CommKind::kAllToAll};

  // The table for `ndim` mesh dims and tensors of `rank` dims; null when its placements exceed
  // kIndexBits.
  static MoveSkeletons* get(int ndim, int rank) {
    if (ndim < 1 || ndim > 4 || rank < 0 || rank > 16) return nullptr;
    static std::mutex mu;
    static auto* tables = new std::map<std::pair<int, int>, std::unique_ptr<MoveSkeletons>>();
    std::lock_guard<std::mutex> l(mu);
    auto& t = (*tables)[{ndim, rank}];
    if (!t) {
      int64_t size = 1;
      for (int i = 0; i < ndim; ++i) size *= rank + 2;
      if (size > (int64_t{1} << kIndexBits)) return nullptr;
      t.reset(new MoveSkeletons(ndim, rank, static_cast<int>(size)));
    }
    return t.get();
  }

  int size() const { return size_; }
  int ndim() const { return ndim_; }

  // The index of p (-1: not among these placements).
  int index(const Placements& p) const {
    if (static_cast<int>(p.size()) != ndim_) return -1;
    int ix = 0;
    for (int i = ndim_ - 1; i >= 0; --i) {
      const Placement& x = p[i];
      int digit;
      if (x.is_replicate()) digit = 0;
      else if (x.is_partial()) {
        if (x.reduce != ReduceOp::kSum) return -1;
        digit = 1;
      } else {
        if (x.weights_id != 0 || x.dim < 0 || x.dim >= rank_) return -1;
        digit = 2 + x.dim;
      }
      ix = ix * base_ + digit;
    }
    return ix;
  }
  Placements placements(int ix) const {
    Placements p(ndim_);
    for (int i = 0; i < ndim_; ++i, ix /= base_) {
      const int digit = ix % base_;
      p[i] = digit == 0 ? Replicate() : digit == 1 ? Partial() : Shard(digit - 2);
    }
    return p;
  }

  // The packed steps of a -> b (kFilled set).
  uint64_t steps(int a, int b) {
    std::atomic<uint64_t>* row = rows_[a].load(std::memory_order_acquire);
    if (!row) {
      auto* fresh = new std::atomic<uint64_t>[size_]();
      if (rows_[a].compare_exchange_strong(row, fresh, std::memory_order_acq_rel)) row = fresh;
      else delete[] fresh;  // another thread's row won
    }
    uint64_t w = row[b].load(std::memory_order_relaxed);
    if (w == 0) {
      w = plan(a, b);
      row[b].store(w, std::memory_order_relaxed);  // the same value whichever thread stores it
    }
    return w;
  }

 private:
  MoveSkeletons(int ndim, int rank, int size)
      : ndim_(ndim), rank_(rank), base_(rank + 2), size_(size), rows_(new std::atomic<std::atomic<uint64_t>*>[size]()) {}

  uint64_t plan(int a, int b) const {
    const Placements src = placements(a), dst = placements(b);
    RedistributePlan plan;
    try {
      plan = compute_redistribute_plan(Shape(ndim_, 2), src, dst, Shape(rank_, 8), DType::kFloat32);
    } catch (const Error&) {
      return kFilled | kUnpacked << kCountShift;  // planned as before, which throws the same
    }
    uint64_t w = 0;
    int count = 0;
    Placements cur = src;
    for (const RedistributeStep& st : plan.steps) {
      if (st.kind != CommKind::kLocal) {
        const int kind = static_cast<int>(std::find(std::begin(kKinds), std::end(kKinds), st.kind) - std::begin(kKinds));
        if (count == kMaxSteps || kind == 4) return kFilled | kUnpacked << kCountShift;
        const uint64_t step = static_cast<uint64_t>(index(cur)) | static_cast<uint64_t>(st.mesh_dim) << kIndexBits |
                              static_cast<uint64_t>(kind) << (kIndexBits + 2);
        w |= step << (15 * count++);
      }
      cur[st.mesh_dim] = st.to;
      if (index(cur) < 0) return kFilled | kUnpacked << kCountShift;
    }
    return kFilled | static_cast<uint64_t>(count) << kCountShift | w;
  }

  const int ndim_, rank_, base_, size_;
  std::unique_ptr<std::atomic<std::atomic<uint64_t>*>[]> rows_;  // per source: its entries, or null
};

uint64_t placement_key(const Placements& p) {
  uint64_t k = 0;
  for (const Placement& x : p) {
    uint64_t code = x.is_replicate() ? 0 : x.is_partial() ? 1 + static_cast<uint64_t>(x.reduce) : 8 + x.dim;
    k = k * 64 + code;
  }
  return k;
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

Recompute recompute_from_name(const std::string& name) {
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
    if (name == recompute_name(r)) return r;
  DT_FAIL("recompute '", name, "' is not accepted; accepted: none, selective, full");
}

bool CostModel::replayed(int v, int k) const {
  if (!recomputed_[v]) return false;
  const Node& u = g_.node(inputs_[v][k].node);
  return u.kind != NodeKind::kParam && u.layer == g_.node(v).layer;
}

CostModel::Keeping CostModel::keeping(Recompute recompute, int recompute_layers) const {
  const int n = g_.num_vertices();
  Keeping out;
  // What backward keeps: per consumer input, and through views back to the tensor's real producer.
  out.kept.assign(n, 0);
  out.saves_in.assign(n, 0);
  const std::vector<int> order = g_.topological_order();
  for (int v : order) {
    const Node& nd = g_.node(v);
    if (nd.kind != NodeKind::kOp || nd.fused) continue;
    const OpDef& op = Registry::get().find(nd.op);
    if (saves_output(op)) out.kept[v] = 1;
    if (!saves_input(op)) continue;
    for (int k = 0; k < static_cast<int>(inputs_[v].size()); ++k) {
      const NodeKind uk = g_.node(inputs_[v][k].node).kind;
      if (takes_tensors(uk) || uk == NodeKind::kInput) out.saves_in[v] |= 1ull << k;
    }
  }
  // Recomputation (Recompute): inside a repeated layer, backward keeps only the tensors that
  // enter the layer and, selectively, its contractions' outputs; everything else is recomputed.
  out.recomputed.assign(n, 0);
  if (recompute != Recompute::kNone && g_.training) {
    auto contraction = [&](const Node& x) {
      return x.kind == NodeKind::kOp && Registry::get().find(x.op).cost.cls == CostClass::kContraction;
    };
    for (int v = 0; v < n; ++v) {
      const Node& nd = g_.node(v);
      if (!takes_tensors(nd.kind) || nd.layer < 0 || (recompute_layers >= 0 && nd.layer >= recompute_layers))
        continue;
      const bool keeps_output = recompute == Recompute::kSelective && contraction(nd) && !nd.fused;
      out.recomputed[v] = !keeps_output;
      out.kept[v] = keeps_output ? 1 : 0;
      uint64_t keep = 0;
      for (int k = 0; k < static_cast<int>(inputs_[v].size()); ++k) {
        const Node& u = g_.node(inputs_[v][k].node);
        const bool entering = u.layer != nd.layer && (takes_tensors(u.kind) || u.kind == NodeKind::kInput);
        const bool saved = recompute == Recompute::kSelective && u.layer == nd.layer && contraction(u);
        if (entering || (saved && (out.saves_in[v] >> k & 1))) keep |= 1ull << k;
      }
      out.saves_in[v] = keep;
    }
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int v = *it;
    const Node& nd = g_.node(v);
    if (!takes_tensors(nd.kind)) continue;
    // A redistribution is a view of its input that keeps its moved copy when a consumer saves it.
    const bool redist = nd.kind == NodeKind::kRedistribute;
    if (redist && out.kept[v]) out.saves_in[v] = 1;
    for (int k = 0; k < static_cast<int>(inputs_[v].size()); ++k) {
      const int u = inputs_[v][k].node;
      if (!takes_tensors(g_.node(u).kind)) continue;
      const bool view = redist || is_view_op(Registry::get().find(nd.op));
      if ((out.saves_in[v] >> k & 1) || (view && out.kept[v])) out.kept[u] = 1;
    }
  }
  return out;
}

CostModel::CostModel(const ModelGraph& g, const MeshSpec& mesh, const HardwareProfile& hw, ClusterShares shares,
                     Recompute recompute, int activation_copies, int recompute_layers)
    : g_(g),
      mesh_(mesh),
      hw_(hw),
      shares_(std::move(shares)),
      recompute_(recompute),
      copies_(activation_copies),
      recompute_layers_(recompute_layers) {
  DT_CHECK(activation_copies >= 1, "planner: activation_copies ", activation_copies, "; accepted: at least 1");
  init_ops();  // every family, the planned one included
  const int nd = mesh.ndim();
  DT_CHECK(shares_.weights.empty() || static_cast<int>(shares_.weights.size()) == nd, "planner: ",
           shares_.weights.size(), " weight lists for the mesh ", mesh.str(), "; give one per mesh dim (empty: even)");
  weight_ids_.assign(nd, 0);
  for (int i = 0; i < static_cast<int>(shares_.weights.size()); ++i) {
    const std::vector<int64_t>& w = shares_.weights[i];
    if (w.empty()) continue;
    DT_CHECK(static_cast<int64_t>(w.size()) == mesh.shape[i], "planner: ", w.size(), " weights for mesh dim ",
             mesh.names[i], " of ", mesh.shape[i], " ranks; give one weight per rank of that mesh dim");
    weight_ids_[i] = intern_shard_weights(w);  // checks each weight's range
  }
  if (shares_.cluster) {
    links_ = shares_.cluster->links_for_mesh(mesh.shape);  // checks the rank count first
  } else {
    links_ = hw.links_for_mesh(mesh.shape);
  }
  // Rank classes: (profile, coordinates on the weighted dims); their blocks at 0 on the others.
  {
    std::vector<std::pair<const HardwareProfile*, std::vector<int64_t>>> seen;
    const int64_t ranks = mesh.size();
    for (int64_t r = 0; r < ranks; ++r) {
      std::vector<int64_t> at(nd, 0);
      for (int64_t i = nd - 1, rest = r; i >= 0; --i) {
        if (weight_ids_[i] != 0) at[i] = rest % mesh.shape[i];
        rest /= mesh.shape[i];
      }
      const HardwareProfile* p = shares_.cluster ? &shares_.cluster->profile_of(r) : &hw;
      std::pair<const HardwareProfile*, std::vector<int64_t>> key{p, at};
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      seen.push_back(key);
      auto b = std::find(block_coords_.begin(), block_coords_.end(), at);
      if (b == block_coords_.end()) b = block_coords_.insert(block_coords_.end(), at);
      classes_.push_back({static_cast<size_t>(b - block_coords_.begin()), p});
    }
  }
  const int n = g.num_vertices();
  inputs_.resize(n);
  for (int v = 0; v < n; ++v) inputs_[v] = g.inputs(v);
  rg_ = g.requires_grad();
  opt_of_.assign(n, -1);
  param_uses_.resize(n);
  for (int v = 0; v < n; ++v) {
    if (g.node(v).kind == NodeKind::kParam) opt_of_[v] = g.optimizer_of(v);
    if (g.node(v).kind != NodeKind::kOp) continue;
    for (int k = 0; k < static_cast<int>(inputs_[v].size()); ++k) {
      const int u = inputs_[v][k].node;
      if (g.node(u).kind == NodeKind::kParam) param_uses_[u].push_back({v, k});
    }
  }
  Keeping keep = keeping(recompute_, recompute_layers_);
  kept_ = std::move(keep.kept);
  saves_in_ = std::move(keep.saves_in);
  recomputed_ = std::move(keep.recomputed);
  for (int v = 0; v < n; ++v)
    for (const TensorMeta& m : g.node(v).outputs) intern(m);
  bool weighted = false;
  for (uint16_t id : weight_ids_) weighted |= id != 0;
  for (const TensorMeta& m : metas_)
    skeletons_.push_back(weighted ? nullptr : MoveSkeletons::get(nd, static_cast<int>(m.shape.size())));
  info_.resize(n);
  calls_.resize(n);
  // Shared infos: ops by (call key, vertex flags), leaves by (kind, meta).
  struct OpEntry {
    std::shared_ptr<OpCall> call;
    uint64_t flags;
    std::shared_ptr<VertexInfo> info;
  };
  absl::flat_hash_map<size_t, std::vector<OpEntry>> ops;
  absl::flat_hash_map<std::string, std::shared_ptr<VertexInfo>> leaves;
  absl::flat_hash_map<std::vector<uint64_t>, std::shared_ptr<VertexInfo>> redists;
  absl::flat_hash_map<std::tuple<const void*, int, Shape>, std::pair<std::vector<Placements>, std::vector<uint64_t>>>
      placements_of;
  auto empty = std::make_shared<VertexInfo>();
  for (int v = 0; v < n; ++v) {
    const Node& nd = g.node(v);
    if (nd.kind == NodeKind::kConstant) {
      info_[v] = empty;
      continue;
    }
    if (nd.kind == NodeKind::kRedistribute) {
      // Shared by redistributions with the same placements to choose from, whichever op made the
      // tensor (a repeated layer's entering tensor comes from the embedding once, then from layers).
      // The placements (and their keys) depend on the tensor's shape, or a fused producer's layouts.
      const TensorId t = inputs_[v][0];
      auto& [xs, xkeys] = placements_of[{nd.fused ? info_[t.node].get() : nullptr, nd.fused ? t.output : 0,
                                         nd.fused ? Shape{} : nd.outputs[0].shape}];
      if (xkeys.empty()) {
        xs = redistribute_placements(v);
        for (const Placements& x : xs) xkeys.push_back(placement_key(x));
      }
      std::vector<uint64_t> key = {(nd.fused ? 1u : 0u) | (rg_[v] ? 2u : 0u) | (kept_[v] ? 4u : 0u) |
                                       (recomputed_[v] ? 8u : 0u),
                                   static_cast<uint64_t>(intern(nd.outputs[0]))};
      key.insert(key.end(), xkeys.begin(), xkeys.end());
      auto& slot = redists[key];
      if (!slot) slot = build_redistribute(v, xs);
      info_[v] = slot;
      continue;
    }
    if (nd.kind == NodeKind::kOp) {
      auto call = std::make_shared<OpCall>(bind_vertex(g, v, mesh.shape));
      calls_[v] = call;
      uint64_t flags = (nd.fused ? 1u : 0u) | (rg_[v] ? 2u : 0u) | (kept_[v] ? 4u : 0u) | (recomputed_[v] ? 8u : 0u) |
                       (saves_in_[v] << 40);
      for (int k = 0; k < static_cast<int>(inputs_[v].size()); ++k) {
        const int u = inputs_[v][k].node;
        const bool grad_key = g.training && rg_[u] && g.node(u).kind != NodeKind::kParam;
        const bool param = g.node(u).kind == NodeKind::kParam;
        flags |= (grad_key ? 1ull : 0ull) << (4 + 2 * k);
        flags |= (param ? 1ull : 0ull) << (5 + 2 * k);
      }
      auto& bucket = ops[call->hash()];
      for (const OpEntry& e : bucket)
        if (e.flags == flags && e.call->same_key(*call)) info_[v] = e.info;
      if (!info_[v]) {
        info_[v] = build_op(v, *call);
        bucket.push_back({call, flags, info_[v]});
      }
      continue;
    }
    const TensorMeta& m = nd.kind == NodeKind::kOptimizer ? g.meta(inputs_[v][0]) : nd.outputs[0];
    std::string key = absl::StrCat(node_kind_name(nd.kind), shape_str(m.shape), dtype_name(m.dtype));
    auto& slot = leaves[key];
    if (!slot) slot = build_leaf(v);
    info_[v] = slot;
  }
}

Placements CostModel::weigh(const Placements& p) const {
  Placements q = p;
  for (size_t i = 0; i < q.size() && i < weight_ids_.size(); ++i)
    if (weight_ids_[i] != 0 && q[i].is_shard()) q[i].weights_id = weight_ids_[i];
  return q;
}

int64_t CostModel::block_numel(const Shape& shape, const Placements& weighed, size_t block) const {
  if (shape.empty()) return 1;
  return numel(local_block(shape, weighed, mesh_.shape, block_coords_[block]).first);
}

int64_t CostModel::local_numel(const Shape& shape, const Placements& p) const {
  const Placements q = weigh(p);
  int64_t most = 0;
  for (size_t b = 0; b < block_coords_.size(); ++b) most = std::max(most, block_numel(shape, q, b));
  return most;
}

std::vector<Placements> CostModel::storage_placements(const Shape& shape) const {
  const int nd = mesh_.ndim();
  const int r = static_cast<int>(shape.size());
  std::vector<Placements> out;
  std::vector<int> idx(nd, 0);  // 0: R, 1 + d: S(d)
  while (true) {
    Placements p(nd);
    std::vector<int64_t> pieces(r, 1);
    for (int i = 0; i < nd; ++i) {
      p[i] = idx[i] == 0 ? Replicate() : Shard(idx[i] - 1);
      if (idx[i] > 0) pieces[idx[i] - 1] *= mesh_.shape[i];
    }
    bool ok = true;
    for (int d = 0; d < r; ++d) ok &= pieces[d] == 1 || pieces[d] <= shape[d];
    if (ok) out.push_back(p);
    int i = nd - 1;
    while (i >= 0 && ++idx[i] == r + 1) idx[i--] = 0;
    if (i < 0) break;
  }
  return out;
}

bool CostModel::weights_align(const OpCall& call, const std::vector<TensorMeta>& out_meta, const Strategy& s) const {
  bool weighted = false;
  for (uint16_t id : weight_ids_) weighted |= id != 0;
  if (!weighted) return true;
  // The engine runs no distributed step on weighted rows.
  if (s.step() != 0)
    for (int i : s.step_mesh_dims())
      if (weight_ids_[i] != 0) return false;
  // Per weighted mesh dim and block: the fraction that mesh dim alone leaves of each tensor it
  // splits (the other mesh dims replicated), compared exactly (a*d == c*b in 128 bits: element
  // counts reach 2^43).
  for (int i = 0; i < mesh_.ndim(); ++i) {
    if (weight_ids_[i] == 0) continue;
    for (size_t b = 0; b < block_coords_.size(); ++b) {
      bool first = true;
      __int128 num = 0, den = 1;
      auto same = [&](const TensorMeta& m, const Placements& p) {
        if (!p[i].is_shard()) return true;
        Placements only(p.size(), Replicate());
        only[i] = p[i];
        const __int128 local = block_numel(m.shape, weigh(only), b), total = numel(m.shape);
        if (first) {
          first = false;
          num = local;
          den = total;
          return true;
        }
        return local * den == num * total;
      };
      for (size_t o = 0; o < out_meta.size(); ++o)
        if (!same(out_meta[o], s.outputs[o])) return false;
      for (int t = 0; t < call.num_tensors(); ++t)
        if (!same(call.tensor(t), s.inputs[t])) return false;
    }
  }
  return true;
}

Choice CostModel::make_op_choice(int v, const OpCall& call, const std::vector<TensorMeta>& out_meta,
                                 const Strategy& s) const {
  const Node& nd = g_.node(v);
  const bool view = is_view_op(call.op());
  Choice c;
  c.strategy = s;
  // Per block (rank class coordinates): the smallest local/global ratio and the bytes touched.
  const size_t nb = block_coords_.size();
  absl::InlinedVector<double, 4> frac(nb, 1.0);
  absl::InlinedVector<int64_t, 4> bytes(nb, 0), out_bytes(nb, 0);
  auto visit = [&](const TensorMeta& m, const Placements& p, bool is_out) {
    const int64_t total = numel(m.shape);
    const Placements q = weigh(p);
    for (size_t k = 0; k < nb; ++k) {
      const int64_t local = block_numel(m.shape, q, k);
      if (total > 0) frac[k] = std::min(frac[k], static_cast<double>(local) / static_cast<double>(total));
      const int64_t b = local * static_cast<int64_t>(itemsize(m.dtype));
      bytes[k] += b;
      if (is_out) out_bytes[k] += b;
    }
  };
  for (size_t o = 0; o < out_meta.size(); ++o) visit(out_meta[o], s.outputs[o], true);
  for (int t = 0; t < call.num_tensors(); ++t) visit(call.tensor(t), s.inputs[t], false);
  c.work_bytes = *std::max_element(bytes.begin(), bytes.end());
  c.out_bytes = *std::max_element(out_bytes.begin(), out_bytes.end());
  if (!view) {
    DType dt = !out_meta.empty() && is_floating(out_meta[0].dtype) ? out_meta[0].dtype
               : call.num_tensors() > 0                           ? call.tensor(0).dtype
                                                                   : DType::kFloat32;
    const double op = op_flops(call, out_meta);
    // The slowest rank class: its own block on its own profile.
    for (const RankClass& rc : classes_) {
      const double flops = op * frac[rc.block];
      const double mem = nd.fused ? 0.0 : static_cast<double>(bytes[rc.block]) / (rc.hw->memory_bandwidth_GBps * 1e3);
      c.fwd_us = std::max(c.fwd_us, std::max(flops / rc.hw->peak_flops_per_us(dt), mem));
    }
  }
  if (g_.training && rg_[v]) {
    c.bwd_us = (recomputed_[v] ? 3 : 2) * c.fwd_us;  // a recomputed op runs its forward again
    if (!view && !nd.fused && kept_[v]) c.act_bytes = copies_ * c.out_bytes;
  }
  if (s.step() != 0) {
    const StepDef& sd = call.op().steps.at(s.step() - 1);
    auto dims = s.step_mesh_dims();
    StepTraffic t = sd.traffic(call, s, dims);
    int64_t group = 1;
    LinkModel link = links_[dims[0]];
    for (int i : dims) {
      group *= mesh_.shape[i];
      if (links_[i].model(t.collective).bandwidth_GBps < link.model(t.collective).bandwidth_GBps) link = links_[i];
    }
    const int rounds = std::max(t.rounds, 1);
    const double time = t.bytes == 0 ? 0.0 : (t.overlapped ? 1 : rounds) * collective_time_us(t.collective, t.bytes / rounds, group, link);
    if (t.bytes > 0) {
      c.has_step = true;
      c.step = {t.collective, dims[0], t.bytes, time};
    }
  }
  for (int k = 0; k < call.num_tensors(); ++k) c.grad_in.push_back(grad_of(s, k));
  return c;
}

std::shared_ptr<VertexInfo> CostModel::build_op(int v, const OpCall& call) const {
  auto info = std::make_shared<VertexInfo>();
  info->view = is_view_op(call.op());
  std::vector<TensorMeta> meta = call.op().meta(call);
  std::vector<Strategy> all = expand_strategies(call, meta, true);
  std::vector<Strategy> kept;
  absl::flat_hash_map<uint64_t, std::vector<size_t>> kept_by_key;  // equal strategies, equal keys
  for (Strategy& s : all) {
    if (non_sum_partial(s)) continue;
    // Matrix products take no Partial factor (their Partial pass-through rows): in these graphs a
    // Partial never reaches a matmul without a non-linear op between, and on 3-d meshes those rows
    // double the strategies to price.
    if (call.op().family == "matrix") {
      bool p_in = false;
      const int first = call.name() == "addmm" ? 1 : 0;  // the two factors (not a bias)
      for (int t = first; t < first + 2 && t < static_cast<int>(s.inputs.size()); ++t)
        for (const Placement& x : s.inputs[t]) p_in |= x.is_partial();
      if (p_in) continue;
    }
    uint64_t key = s.steps.size();
    for (const auto* group : {&s.outputs, &s.inputs})
      for (const Placements& p : *group) key = key * 0x9E3779B97F4A7C15ull + placement_key(p);
    for (uint8_t st : s.steps) key = key * 0x9E3779B97F4A7C15ull + st;
    std::vector<size_t>& same = kept_by_key[key];
    bool dup = false;
    for (size_t i : same) dup |= same_strategy(kept[i], s);
    if (!dup) {
      same.push_back(kept.size());
      kept.push_back(std::move(s));
    }
  }
  for (const Strategy& s : kept)
    if (weights_align(call, meta, s)) info->choices.push_back(make_op_choice(v, call, meta, s));
  classify(v, *info);
  return info;
}

Choice CostModel::op_choice(int v, const Strategy& s) const {
  const OpCall& call = *calls_.at(v);
  DT_CHECK(calls_[v], "planner: vertex '", g_.node(v).name, "' is not an op");
  return make_op_choice(v, call, call.op().meta(call), s);
}

Choice CostModel::redistribute_choice(const Placements& x, const Placements& g) {
  Choice c;
  c.strategy.outputs = {x};
  c.strategy.inputs = {x};
  c.grad_in = {g};
  c.grad_out = {g};
  return c;
}

std::vector<Placements> CostModel::redistribute_placements(int v) const {
  // Any layout without Partial: a Partial tensor is reduced once for all its consumers (each
  // reducing it on its own, as consumers of a Partial would, is never cheaper). A fused producer's
  // output cannot move: only its own layouts. Ordered by placement_key.
  const Node& nd = g_.node(v);
  const TensorId t = inputs_[v][0];
  std::vector<Placements> xs = nd.fused ? info_[t.node]->out_reps.at(t.output) : storage_placements(nd.outputs[0].shape);
  std::sort(xs.begin(), xs.end(),
            [](const Placements& a, const Placements& b) { return placement_key(a) < placement_key(b); });
  return xs;
}

std::shared_ptr<VertexInfo> CostModel::build_redistribute(int v, std::vector<Placements> xs) const {
  const Node& nd = g_.node(v);
  auto info = std::make_shared<VertexInfo>();
  info->view = true;
  // The gradient layout: dual_out, or, in training, Partial on every dim where the tensor is
  // replicated (its consumers' partial gradients summed locally, reduced once): Megatron's
  // column-parallel q, k, v.
  const bool grads = g_.training && rg_[v];
  for (const Placements& x : xs) {
    const Placements d = dual_out(x);
    info->choices.push_back(redistribute_choice(x, d));
    Placements p = x;
    for (Placement& e : p)
      if (e.is_replicate()) e = Partial();
    if (grads && !nd.fused && p != d) info->choices.push_back(redistribute_choice(x, p));
  }
  classify(v, *info);
  return info;
}

std::shared_ptr<VertexInfo> CostModel::build_leaf(int v) const {
  const Node& nd = g_.node(v);
  auto info = std::make_shared<VertexInfo>();
  const TensorMeta& m = nd.kind == NodeKind::kOptimizer ? g_.meta(inputs_[v][0]) : nd.outputs[0];
  const int64_t item = static_cast<int64_t>(itemsize(m.dtype));
  const bool adam = g_.optimizer == "adamw";
  for (const Placements& p : storage_placements(m.shape)) {
    Choice c;
    c.strategy.outputs = {p};
    const int64_t local = local_numel(m.shape, p);
    switch (nd.kind) {
      case NodeKind::kInput: c.act_bytes = copies_ * local * item; break;
      case NodeKind::kParam: c.param_bytes = local * item; break;
      case NodeKind::kOptimizer:
        c.grad_bytes = local * item;
        c.state_bytes = local * (adam ? 12 : 8);
        // Reads param, grad, master, state; writes param, master, state.
        for (const RankClass& rc : classes_) {
          const double n = static_cast<double>(block_numel(m.shape, weigh(p), rc.block));
          c.opt_us = std::max(c.opt_us, n * (2.0 * item + (adam ? 28.0 : 20.0)) / (rc.hw->memory_bandwidth_GBps * 1e3));
        }
        break;
      default: break;
    }
    info->choices.push_back(std::move(c));
  }
  classify(v, *info);
  return info;
}

void CostModel::classify(int v, VertexInfo& info) const {
  const Node& nd = g_.node(v);
  const size_t n_out = info.choices.empty() ? 0 : info.choices[0].strategy.outputs.size();
  for (size_t j = 0; j < n_out; ++j) {
    std::vector<uint64_t> keys;
    for (const Choice& c : info.choices) {
      const uint64_t x = placement_key(c.strategy.outputs[j]);
      keys.push_back(c.grad_out.empty() ? x : (x << 32) ^ placement_key(c.grad_out[j]) ^ (uint64_t{1} << 63));
    }
    auto m = classes_from_keys(keys);
    std::vector<Placements> reps(m->count), greps(m->count);
    for (size_t s = 0; s < info.choices.size(); ++s) {
      reps[m->of[s]] = info.choices[s].strategy.outputs[j];
      greps[m->of[s]] = grad_target(info.choices[s], static_cast<int>(j));
    }
    info.out_classes.push_back(m);
    info.out_reps.push_back(std::move(reps));
    info.out_grad_reps.push_back(std::move(greps));
  }
  if (!takes_tensors(nd.kind)) return;
  for (int k = 0; k < nd.num_inputs; ++k) {
    const int u = inputs_[v][k].node;
    const bool grad_key = g_.training && rg_[u] && g_.node(u).kind != NodeKind::kParam;
    std::vector<uint64_t> keys, gkeys;
    for (const Choice& c : info.choices) {
      const uint64_t in = placement_key(c.strategy.inputs[k]);
      const uint64_t gr = placement_key(c.grad_in[k]);
      keys.push_back(grad_key ? (in << 24) ^ gr : in);
      gkeys.push_back(gr);
    }
    auto m = classes_from_keys(keys);
    auto gm = classes_from_keys(gkeys);
    std::vector<std::pair<Placements, Placements>> reps(m->count);
    std::vector<Placements> greps(gm->count);
    for (size_t s = 0; s < info.choices.size(); ++s) {
      reps[m->of[s]] = {info.choices[s].strategy.inputs[k], info.choices[s].grad_in[k]};
      greps[gm->of[s]] = info.choices[s].grad_in[k];
    }
    info.in_classes.push_back(m);
    info.in_reps.push_back(std::move(reps));
    info.grad_classes.push_back(gm);
    info.grad_reps.push_back(std::move(greps));
  }
}

int CostModel::intern(const TensorMeta& m) {
  for (size_t i = 0; i < metas_.size(); ++i)
    if (metas_[i] == m) return static_cast<int>(i);
  metas_.push_back(m);
  return static_cast<int>(metas_.size()) - 1;
}

int CostModel::meta_id(const TensorMeta& m) const {
  for (size_t i = 0; i < metas_.size(); ++i)
    if (metas_[i] == m) return static_cast<int>(i);
  DT_FAIL("planner: internal error: tensor ", shape_str(m.shape), " is not in the graph");
}

namespace {

// Latency of a record shared by a bucket: (base + steps * alpha) * min(1, bytes / bucket) + bytes / beta.
double bucketed_time(const CollectiveRecord& r, int64_t group, const LinkModel& link) {
  const double lat = collective_time_us(r.kind, 0, group, link);
  return r.time_us - lat + lat * std::min(1.0, static_cast<double>(r.bytes) / CostModel::kBucketBytes);
}

}  // namespace

double CostModel::step_time(int meta, int cur, int dim, int kind, bool bucketed) const {
  const MoveSkeletons& sk = *skeletons_[meta];
  const TensorMeta& m = metas_[meta];
  const CommKind k = MoveSkeletons::kKinds[kind];
  // As the engine's plan prices the step (dtensor/redistribute_plan.cc, emit) and plan_time_us.
  const Shape block = local_block(m.shape, sk.placements(cur), mesh_.shape, std::vector<int64_t>(sk.ndim(), 0), dim).first;
  const int64_t bytes = comm_bytes_sent(k, numel(block) * static_cast<int64_t>(itemsize(m.dtype)), mesh_.shape[dim]);
  const double dt = collective_time_us(k, bytes, mesh_.shape[dim], links_[dim]);
  return bucketed ? bucketed_time(CollectiveRecord{k, dim, bytes, dt}, mesh_.shape[dim], links_[dim]) : dt;
}

int CostModel::placement_index(const Placements& p, int meta) const {
  const MoveSkeletons* sk = skeletons_.at(meta);
  return sk ? sk->index(p) : -1;
}

bool CostModel::planned_move_time(int a, int b, int meta, MoveTimes& cache, bool bucketed, MoveTime* t) const {
  MoveSkeletons& sk = *const_cast<MoveSkeletons*>(skeletons_[meta]);
  const uint64_t w = sk.steps(a, b);
  const uint64_t count = w >> MoveSkeletons::kCountShift & 7;
  if (count == MoveSkeletons::kUnpacked) return false;
  if (cache.step_us.size() <= static_cast<size_t>(meta)) cache.step_us.resize(metas_.size());
  std::vector<double>& times = cache.step_us[meta];
  const int nd = sk.ndim();
  if (times.empty()) times.assign(static_cast<size_t>(sk.size()) * nd * 8, std::numeric_limits<double>::quiet_NaN());
  *t = {};
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t step = w >> (15 * i);
    const int cur = static_cast<int>(step & ((1u << MoveSkeletons::kIndexBits) - 1));
    const int dim = static_cast<int>(step >> MoveSkeletons::kIndexBits & 3);
    const int kind = static_cast<int>(step >> (MoveSkeletons::kIndexBits + 2) & 3);
    double& dt = times[((static_cast<size_t>(cur) * nd + dim) * 4 + kind) * 2 + (bucketed ? 1 : 0)];
    if (std::isnan(dt)) dt = step_time(meta, cur, dim, kind, bucketed);
    t->us += dt;
  }
  t->comm = count > 0;
  return true;
}

CostModel::MoveTime CostModel::move_time(const Placements& src, const Placements& dst, int meta,
                                         MoveTimes& cache, bool bucketed, int src_ix, int dst_ix) const {
  if (src_ix == kNoIndex) src_ix = placement_index(src, meta);
  if (dst_ix == kNoIndex) dst_ix = src_ix < 0 ? -1 : placement_index(dst, meta);
  if (src_ix >= 0 && dst_ix >= 0) {
    if (src_ix == dst_ix) return {};  // the same placements
    MoveTime t;
    if (planned_move_time(src_ix, dst_ix, meta, cache, bucketed, &t)) return t;
  }
  if (src == dst) return {};
  const std::tuple<uint64_t, uint64_t, int> key{placement_key(src), placement_key(dst), 2 * meta + (bucketed ? 1 : 0)};
  auto [it, fresh] = cache.map.try_emplace(key);
  if (fresh && shared_times_) {
    for (const auto& kept : shared_times_->maps) {
      if (auto at = kept.find(key); at != kept.end()) {
        it->second = at->second;
        return it->second;
      }
    }
  }
  if (fresh) {
    const TensorMeta& m = metas_[meta];
    RedistributePlan plan = compute_redistribute_plan(mesh_.shape, weigh(src), weigh(dst), m.shape, m.dtype);
    if (!bucketed) {
      it->second.us = plan_time_us(plan, mesh_.shape, links_, nullptr);
    } else {
      std::vector<CollectiveRecord> recs;
      plan_time_us(plan, mesh_.shape, links_, &recs);
      for (const CollectiveRecord& r : recs)
        it->second.us += bucketed_time(r, mesh_.shape[r.mesh_dim], links_[r.mesh_dim]);
    }
    for (const RedistributeStep& st : plan.steps) it->second.comm |= st.kind != CommKind::kLocal;
  }
  return it->second;
}

void CostModel::keep_move_times(MoveTimes&& cache) const {
  if (!shared_times_ || cache.map.empty()) return;
  std::lock_guard<std::mutex> l(shared_times_->mu);
  shared_times_->maps.push_back(std::move(cache.map));
}

void CostModel::share_move_times(std::shared_ptr<SharedMoveTimes> s) {
  if (s) {
    std::lock_guard<std::mutex> l(s->mu);
    if (!s->graph) {
      s->graph = &g_, s->mesh = mesh_.shape, s->hw = &hw_, s->cluster = shares_.cluster, s->weights = shares_.weights;
    } else {
      DT_CHECK(s->graph == &g_ && s->mesh == mesh_.shape && s->hw == &hw_ && s->cluster == shares_.cluster &&
                   s->weights == shares_.weights,
               "planner: internal error: move times shared between cost models of different graphs, meshes, hardware "
               "or shares");
    }
  }
  shared_times_ = std::move(s);
}

void CostModel::edge_time_row(int u, int v, int k, const Placements& src, int src_ix,
                              const std::vector<const Placements*>& to, const std::vector<int>& to_ix, int meta,
                              MoveTimes& cache, bool backward_part, EdgeTime* out) const {
  const size_t n = to.size();
  const bool param = g_.node(u).kind == NodeKind::kParam;
  if (backward_part) {
    const bool moves = !param && g_.training && rg_[u];
    for (size_t i = 0; i < n; ++i) {
      out[i] = EdgeTime{};
      if (moves) out[i].time = move_time(*to[i], src, meta, cache, false, to_ix[i], src_ix).us;
    }
    return;
  }
  // What depends on the edge alone, once.
  const bool replay = g_.training && replayed(v, k);
  const bool regather = param && g_.training;
  const bool keeps = !param && g_.training && rg_[v] && (saves_in_[v] >> k & 1);
  for (size_t i = 0; i < n; ++i) {
    const MoveTime fwd = move_time(src, *to[i], meta, cache, param, src_ix, to_ix[i]);
    EdgeTime e;
    e.time = fwd.us;
    if (replay) e.time += fwd.us;  // the recomputed forward moves it again
    if (regather && fwd.comm) e.time += fwd.us;
    if (keeps && fwd.comm) {
      auto [it, fresh] = cache.local_bytes.try_emplace({placement_key(*to[i]), meta}, 0);
      if (fresh) {
        const TensorMeta& m = metas_[meta];
        it->second = copies_ * local_numel(m.shape, *to[i]) * static_cast<int64_t>(itemsize(m.dtype));
      }
      e.act_bytes = it->second;
      e.again = fwd.us;
    }
    out[i] = e;
  }
}

const Move& CostModel::move(const Placements& src, const Placements& dst, const TensorMeta& m,
                            bool bucketed) const {
  if (src == dst) return no_move();
  std::lock_guard<std::mutex> l(mu_);
  MoveKey key{placement_key(src), placement_key(dst), 2 * meta_id(m) + (bucketed ? 1 : 0)};
  auto [it, fresh] = moves_.try_emplace(key);
  Move& mv = it->second;
  if (fresh) {
    // The engine's planner, without its bounded process-wide cache (this cache holds every move).
    RedistributePlan plan = compute_redistribute_plan(mesh_.shape, weigh(src), weigh(dst), m.shape, m.dtype);
    mv.us = plan_time_us(plan, mesh_.shape, links_, &mv.records);
    if (bucketed) {
      mv.us = 0;
      for (CollectiveRecord& r : mv.records) {
        r.time_us = bucketed_time(r, mesh_.shape[r.mesh_dim], links_[r.mesh_dim]);
        mv.us += r.time_us;
      }
    }
    mv.bytes = plan.total_bytes();
    mv.comm = !mv.records.empty();
  }
  return mv;
}

Placements CostModel::grad_target(const Choice& c, int slot) {
  return c.grad_out.empty() ? dual_out(c.strategy.outputs.at(slot)) : c.grad_out.at(slot);
}

Placements CostModel::dual_out(const Placements& p) {
  Placements d = p;
  for (Placement& x : d)
    if (x.is_partial()) x = Replicate();
  return d;
}

CostModel::EdgeCost CostModel::edge_cost(int u, int v, int k, const Placements& src, const Placements& src_grad,
                                         const Placements& in, const Placements& grad) const {
  EdgeCost e;
  const TensorMeta& m = g_.meta(inputs_[v][k]);
  const NodeKind uk = g_.node(u).kind;
  e.fwd = &move(src, in, m, uk == NodeKind::kParam);
  if (uk == NodeKind::kParam) {
    if (g_.training && e.fwd->comm) e.bwd = e.fwd;  // re-gathered in backward
    return e;
  }
  if (g_.training && rg_[u]) {
    const Move& b = move(grad, src_grad, m);
    if (!b.records.empty() || b.us > 0) e.bwd = &b;
  }
  if (g_.training && rg_[v] && e.fwd->comm && (saves_in_[v] >> k & 1))
    e.act_bytes = copies_ * local_numel(m.shape, in) * static_cast<int64_t>(itemsize(m.dtype));
  return e;
}

PlanEval evaluate(const CostModel& cm, const std::vector<const Choice*>& plan, double lambda) {
  const ModelGraph& g = cm.graph();
  const int n = g.num_vertices();
  DT_CHECK(static_cast<int>(plan.size()) == n, "planner: a plan needs one choice per vertex");
  const bool train = cm.training();
  PlanEval ev;
  ev.vertices.resize(n);
  int64_t max_work = 0;
  auto add = [&](VertexReport& r, const Move* m, const char* phase, int input, const std::string& what) {
    if (!m) return;
    for (const CollectiveRecord& rec : m->records) {
      r.collectives.push_back({rec.kind, rec.mesh_dim, rec.bytes, rec.time_us, phase, input, what});
      r.comm_us += rec.time_us;
      r.comm_bytes += rec.bytes;
    }
  };
  for (int v = 0; v < n; ++v) {
    const Node& nd = g.node(v);
    VertexReport& r = ev.vertices[v];
    if (nd.kind == NodeKind::kConstant) continue;
    const Choice* c = plan[v];
    DT_CHECK(c, "planner: no choice for vertex '", nd.name, "'");
    switch (nd.kind) {
      case NodeKind::kInput:
        r.memory_bytes = c->act_bytes;
        ev.activation_bytes += c->act_bytes;
        break;
      case NodeKind::kParam:
        r.memory_bytes = c->param_bytes;
        ev.param_bytes += c->param_bytes;
        break;
      case NodeKind::kOptimizer: {
        const TensorId p = cm.inputs(v)[0];
        const TensorMeta& m = g.meta(p);
        r.compute_us = c->opt_us;
        r.memory_bytes = c->grad_bytes + c->state_bytes;
        ev.grad_bytes += c->grad_bytes;
        ev.state_bytes += c->state_bytes;
        for (auto [user, k] : cm.param_uses(p.node))
          add(r, &cm.move(plan[user]->grad_in[k], c->placement(), m, true), "backward", -1,
              "gradient from " + g.node(user).name);
        add(r, &cm.move(c->placement(), plan[p.node]->placement(), m, true), "optimizer", -1,
            "updated " + g.node(p.node).name);
        break;
      }
      case NodeKind::kOp:
      case NodeKind::kRedistribute: {
        r.compute_us = c->fwd_us + (train ? c->bwd_us : 0);
        r.memory_bytes = c->act_bytes;
        max_work = std::max(max_work, c->work_bytes);
        if (c->has_step) {
          r.collectives.push_back({c->step.kind, c->step.mesh_dim, c->step.bytes, c->step.time_us, "forward", -1, "step"});
          r.comm_us += c->step.time_us;
          r.comm_bytes += c->step.bytes;
          const int again = train && cm.requires_grad(v) ? (cm.recomputed(v) ? 2 : 1) : 0;
          for (int i = 0; i < again; ++i) {
            r.collectives.push_back({c->step.kind, c->step.mesh_dim, c->step.bytes, c->step.time_us, "backward", -1,
                                     i == 0 ? "step" : "step (recomputed)"});
            r.comm_us += c->step.time_us;
            r.comm_bytes += c->step.bytes;
          }
        }
        const auto& ins = cm.inputs(v);
        for (int k = 0; k < static_cast<int>(ins.size()); ++k) {
          const int u = ins[k].node;
          if (g.node(u).kind == NodeKind::kConstant) continue;
          const Placements& src = plan[u]->strategy.outputs.at(ins[k].output);
          auto e = cm.edge_cost(u, v, k, src, CostModel::grad_target(*plan[u], ins[k].output), c->strategy.inputs[k],
                                c->grad_in[k]);
          const std::string what = "input " + std::to_string(k) + " from " + g.node(u).name;
          add(r, e.fwd, "forward", k, what);
          if (train) add(r, e.bwd, "backward", k, what);
          if (train && cm.replayed(v, k)) add(r, e.fwd, "backward", k, what + " (recomputed)");
          if (e.regather(lambda)) add(r, e.fwd, "backward", k, what + " (moved again)");
          else r.memory_bytes += e.act_bytes;
        }
        ev.activation_bytes += r.memory_bytes;
        break;
      }
      default: break;
    }
    ev.compute_us += r.compute_us;
    ev.comm_us += r.comm_us;
    ev.comm_bytes += r.comm_bytes;
  }
  ev.step_time_us = ev.compute_us + ev.comm_us;
  ev.working_bytes = max_work;
  ev.peak_memory_bytes = train ? ev.param_bytes + ev.grad_bytes + ev.state_bytes + ev.activation_bytes
                               : ev.param_bytes + ev.activation_bytes + max_work;
  return ev;
}

}  // namespace dtensor::planner

#include "planner/search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "propagation/propagate.h"

namespace dtensor::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kTieBreakLambda = 1e-9;  // µs per byte
// Redistribution table entries over the whole graph (24 bytes each: about 0.8 GB); real models on
// 1-4-d meshes need well under 10^7.
constexpr int64_t kMaxTableEntries = int64_t{1} << 25;

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string gb(double bytes) { return absl::StrFormat("%.1f GB", bytes / 1e9); }

}  // namespace

struct Planner::Template {
  std::vector<int> layers;
  std::vector<std::vector<int>> verts;  // per instance, in vertex order (same positions)
  std::vector<TensorId> entry;          // per instance: the tensor entering the layer
  int exit_pos = -1;                    // position of the vertex whose output leaves the layer
  std::vector<Placements> proxy;        // placements the entering tensor can have
  std::vector<Placements> proxy_grad;   // and the gradient layout its producer takes for each
  std::vector<ClassMapPtr> entry_map;   // per instance: entry producer's choices -> proxy index
};

// Factor tables (a time part and a bytes part), shared by vertices with equal infos.
struct Planner::Tables {
  struct T {
    std::vector<double> time, bytes, again;  // again: time to move a dropped input again in backward
  };
  using EdgeKey = std::tuple<const void*, int, const void*, int, int>;
  std::mutex mu;
  absl::flat_hash_map<EdgeKey, std::unique_ptr<T>> edge, grad, update;
};

Planner::Planner(const ModelGraph& g, const MeshSpec& mesh, const HardwareProfile& hw, PlanOptions options,
                 std::shared_ptr<CostModel> cm)
    : g_(g), mesh_(mesh), hw_(hw), options_(std::move(options)), tables_(std::make_unique<Tables>()) {
  const double t0 = now_ms();
  if (cm) {
    DT_CHECK(&cm->graph() == &g && cm->mesh().shape == mesh.shape && cm->recompute() == options_.recompute &&
                 cm->activation_copies() == options_.activation_copies &&
                 cm->recompute_layers() == options_.recompute_layers && !options_.shares.cluster,
             "planner: internal error: a cost model built for other options");
    cm_ = std::move(cm);
  } else {
    cm_ = std::make_shared<CostModel>(g, mesh, hw, options_.shares, options_.recompute, options_.activation_copies,
                                      options_.recompute_layers);
  }
  if (options_.move_times) cm_->share_move_times(options_.move_times);
  template_of_.assign(g.num_vertices(), -1);
  instance_of_.assign(g.num_vertices(), -1);
  if (options_.use_templates) detect_templates();
  prefetch_tables();
  build_ms_ = now_ms() - t0;
}

Planner::~Planner() = default;

void Planner::detect_templates() {
  const int n = g_.num_vertices();
  std::map<int, std::vector<int>> by_layer;
  for (int v = 0; v < n; ++v)
    if (g_.node(v).layer >= 0 && g_.node(v).kind != NodeKind::kConstant) by_layer[g_.node(v).layer].push_back(v);
  // Fingerprint of each layer that has one entering tensor and one leaving vertex.
  std::map<std::vector<intptr_t>, std::vector<int>> groups;
  std::map<int, std::pair<TensorId, int>> shape_of;  // layer -> (entry, exit position)
  for (auto& [layer, verts] : by_layer) {
    absl::flat_hash_map<int, int> pos;
    for (size_t i = 0; i < verts.size(); ++i) pos[verts[i]] = static_cast<int>(i);
    std::vector<TensorId> entries;
    std::vector<int> exits;
    std::vector<intptr_t> fp;
    bool ok = true;
    for (size_t i = 0; i < verts.size() && ok; ++i) {
      const int v = verts[i];
      fp.push_back(reinterpret_cast<intptr_t>(cm_->info_ptr(v).get()));
      fp.push_back(static_cast<intptr_t>(g_.node(v).kind));
      for (const TensorId& t : cm_->inputs(v)) {
        const NodeKind k = g_.node(t.node).kind;
        if (k == NodeKind::kConstant) {
          fp.push_back(-2);
        } else if (auto it = pos.find(t.node); it != pos.end()) {
          fp.push_back(it->second);
        } else {
          if (k == NodeKind::kParam) ok = false;
          bool seen = false;
          for (const TensorId& e : entries) seen |= e == t;
          if (!seen) entries.push_back(t);
          fp.push_back(-1);
        }
        fp.push_back(t.output);
      }
      for (auto& [c, e] : g_.consumers(v))
        if (!pos.contains(c)) {
          if (exits.empty() || exits.back() != v) exits.push_back(v);
        }
    }
    if (!ok || entries.size() != 1 || exits.size() != 1) continue;
    const int exit_pos = pos[exits[0]];
    fp.push_back(-3);
    fp.push_back(exit_pos);
    // The entering tensor: what its edges cost depends on its producer's kind, whether it needs a
    // gradient and its shape, not on which op made it (the proxy domain covers every producer).
    const TensorId e = entries[0];
    fp.push_back(static_cast<intptr_t>(g_.node(e.node).kind));
    fp.push_back(cm_->requires_grad(e.node));
    fp.push_back(static_cast<intptr_t>(g_.meta(e).dtype));
    for (int64_t d : g_.meta(e).shape) fp.push_back(static_cast<intptr_t>(d));
    groups[fp].push_back(layer);
    shape_of[layer] = {entries[0], exit_pos};
  }
  for (auto& [fp, layers] : groups) {
    if (layers.size() < 2) continue;
    Template t;
    t.layers = layers;
    t.exit_pos = shape_of[layers[0]].second;
    const int id = static_cast<int>(templates_.size());
    absl::flat_hash_map<uint64_t, int> proxy_index;
    for (int layer : layers) {
      t.verts.push_back(by_layer[layer]);
      const TensorId entry = shape_of[layer].first;
      t.entry.push_back(entry);
      for (size_t i = 0; i < by_layer[layer].size(); ++i) {
        template_of_[by_layer[layer][i]] = id;
        instance_of_[by_layer[layer][i]] = static_cast<int>(t.verts.size()) - 1;
      }
      const VertexInfo& ei = cm_->info(entry.node);
      auto m = std::make_shared<ClassMap>();
      for (const Choice& c : ei.choices) {
        const Placements& p = c.strategy.outputs.at(entry.output);
        const Placements gp = CostModel::grad_target(c, entry.output);
        auto [it, fresh] = proxy_index.emplace(placement_key(p) << 32 ^ placement_key(gp), static_cast<int>(t.proxy.size()));
        if (fresh) {
          t.proxy.push_back(p);
          t.proxy_grad.push_back(gp);
        }
        m->of.push_back(it->second);
      }
      t.entry_map.push_back(m);
    }
    for (auto& m : t.entry_map) const_cast<ClassMap&>(*m).count = static_cast<int32_t>(t.proxy.size());
    templates_.push_back(std::move(t));
  }
}

namespace {

// Objective of one choice: time (µs) + lambda * memory (bytes).
double unary_cost(const CostModel& cm, int v, const Choice& c, double lambda) {
  const ModelGraph& g = cm.graph();
  const bool train = cm.training();
  switch (g.node(v).kind) {
    case NodeKind::kInput: return lambda * static_cast<double>(c.act_bytes);
    case NodeKind::kParam: return lambda * static_cast<double>(c.param_bytes);
    case NodeKind::kOptimizer: return c.opt_us + lambda * static_cast<double>(c.grad_bytes + c.state_bytes);
    case NodeKind::kOp:
    case NodeKind::kRedistribute: {
      double t = c.fwd_us + (train ? c.bwd_us : 0);
      if (c.has_step) t += c.step.time_us * (train && cm.requires_grad(v) ? (cm.recomputed(v) ? 3 : 2) : 1);
      return t + lambda * static_cast<double>(c.act_bytes);
    }
    default: return 0;
  }
}


}  // namespace

// src_reps, src_grads: the producer's output placement and the gradient layout it takes, per class.
std::unique_ptr<Planner::Tables::T> fill_edge_table(const CostModel& cm, int u, int j, int v, int k,
                                                    const std::vector<Placements>& src_reps,
                                                    const std::vector<Placements>& src_grads,
                                                    CostModel::MoveTimes& cache) {
  auto t = std::make_unique<Planner::Tables::T>();
  const auto& reps = cm.info(v).in_reps[k];
  const int meta = cm.meta_id(cm.graph().meta({u, j}));
  const size_t n = src_reps.size() * reps.size();
  t->time.resize(n);
  t->bytes.resize(n);
  t->again.resize(n);
  // The entry is forward(src -> in) + backward(grad -> src): price each distinct input placement and
  // each distinct gradient placement once per source.
  absl::flat_hash_map<uint64_t, int> in_ix, grad_ix;
  std::vector<int> in_of(reps.size()), grad_of(reps.size());
  std::vector<size_t> in_rep, grad_rep;
  for (size_t b = 0; b < reps.size(); ++b) {
    auto [i1, f1] = in_ix.emplace(placement_key(reps[b].first), static_cast<int>(in_rep.size()));
    if (f1) in_rep.push_back(b);
    in_of[b] = i1->second;
    auto [i2, f2] = grad_ix.emplace(placement_key(reps[b].second), static_cast<int>(grad_rep.size()));
    if (f2) grad_rep.push_back(b);
    grad_of[b] = i2->second;
  }
  if (cm.graph().node(u).fused) {
    // Inside a fused kernel (flash attention, rotary embedding) the tensor never exists in memory:
    // it cannot be redistributed, forward or backward.
    const bool grad = cm.training() && cm.requires_grad(u);
    for (size_t a = 0; a < src_reps.size(); ++a)
      for (size_t b = 0; b < reps.size(); ++b) {
        const bool same = reps[b].first == src_reps[a] && (!grad || reps[b].second == src_grads[a]);
        t->time[a * reps.size() + b] = same ? 0.0 : std::numeric_limits<double>::infinity();
      }
    return t;
  }
  // Forward moves depend on the source placement only, backward ones on the gradient layout only:
  // price each distinct one once (a redistribution has one class per (placement, gradient layout)).
  absl::flat_hash_map<uint64_t, int> src_ix, sg_ix;
  std::vector<int> src_of(src_reps.size()), sg_of(src_reps.size());
  std::vector<std::vector<CostModel::EdgeTime>> fwd;
  std::vector<std::vector<double>> bwd;
  // Each placement's index among those whose moves are planned once (CostModel::move_time).
  std::vector<const Placements*> ins(in_rep.size()), grads(grad_rep.size());
  std::vector<int> in_pix(in_rep.size()), grad_pix(grad_rep.size());
  for (size_t i = 0; i < in_rep.size(); ++i) {
    ins[i] = &reps[in_rep[i]].first;
    in_pix[i] = cm.placement_index(*ins[i], meta);
  }
  for (size_t i = 0; i < grad_rep.size(); ++i) {
    grads[i] = &reps[grad_rep[i]].second;
    grad_pix[i] = cm.placement_index(*grads[i], meta);
  }
  std::vector<CostModel::EdgeTime> row(grad_rep.size());
  for (size_t a = 0; a < src_reps.size(); ++a) {
    auto [i1, f1] = src_ix.emplace(placement_key(src_reps[a]), static_cast<int>(fwd.size()));
    if (f1) {
      fwd.emplace_back(in_rep.size());
      cm.edge_time_row(u, v, k, src_reps[a], cm.placement_index(src_reps[a], meta), ins, in_pix, meta, cache, false,
                       fwd.back().data());
    }
    src_of[a] = i1->second;
    auto [i2, f2] = sg_ix.emplace(placement_key(src_grads[a]), static_cast<int>(bwd.size()));
    if (f2) {
      cm.edge_time_row(u, v, k, src_grads[a], cm.placement_index(src_grads[a], meta), grads, grad_pix, meta, cache,
                       true, row.data());
      bwd.emplace_back(grad_rep.size());
      for (size_t i = 0; i < grad_rep.size(); ++i) bwd.back()[i] = row[i].time;
    }
    sg_of[a] = i2->second;
  }
  for (size_t a = 0; a < src_reps.size(); ++a) {
    const auto& fa = fwd[src_of[a]];
    const auto& ba = bwd[sg_of[a]];
    for (size_t b = 0; b < reps.size(); ++b) {
      const size_t i = a * reps.size() + b;
      const CostModel::EdgeTime& f = fa[in_of[b]];
      t->time[i] = f.time + ba[grad_of[b]];
      t->bytes[i] = static_cast<double>(f.act_bytes);
      t->again[i] = f.again;
    }
  }
  return t;
}

// Builds variables and factors for a set of vertices. `var_of` maps vertices to variables (-1: not in
// the problem). `proxy` (template solving): the entering tensor's producer is represented by the
// variable proxy_var whose domain is tpl->proxy.
struct ProblemBuilder {
  const CostModel& cm;
  Planner::Tables* tables;
  double lambda;
  const Constraints* cons;

  MinSumProblem p;
  std::vector<int> var_of;

  void add_var(int v, bool zero_unary) {
    const VertexInfo& info = cm.info(v);
    std::vector<double> u(info.choices.size(), 0.0);
    for (size_t s = 0; s < u.size(); ++s) {
      if (!zero_unary) u[s] = unary_cost(cm, v, info.choices[s], lambda);
      if (cons && !cons->allowed.empty() && !cons->allowed[v].empty() && !cons->allowed[v][s]) u[s] = kInf;
    }
    var_of[v] = p.add_var(std::move(u));
  }

  const Planner::Tables::T& edge_table(int u, int j, int v, int k, const std::vector<Placements>& src_reps,
                                       const std::vector<Placements>& src_grads, int tpl) {
    const VertexInfo& vi = cm.info(v);
    Planner::Tables::EdgeKey key{cm.info_ptr(u).get(), j, &vi, k, tpl};
    std::lock_guard<std::mutex> l(tables->mu);
    auto& slot = tables->edge[key];
    if (!slot) {
      CostModel::MoveTimes cache;
      slot = fill_edge_table(cm, u, j, v, k, src_reps, src_grads, cache);
    }
    return *slot;
  }

  // Edge u(slot j) -> v(input k); u's variable uses `um` classes with representatives `ureps`.
  void add_edge(int u, int j, int v, int k, int uvar, ClassMapPtr um, const std::vector<Placements>& ureps,
                const std::vector<Placements>& ugreps, int tpl) {
    const VertexInfo& vi = cm.info(v);
    const auto& t = edge_table(u, j, v, k, ureps, ugreps, tpl);
    std::vector<double> c(t.time.size());
    for (size_t i = 0; i < c.size(); ++i) c[i] = t.time[i] + std::min(lambda * t.bytes[i], t.again[i] > 0 ? t.again[i] : kInf);
    for (size_t i = 0; i < c.size(); ++i)
      if (t.bytes[i] == 0) c[i] = t.time[i];
    p.add_factor(uvar, um, var_of[v], vi.in_classes[k], std::move(c));
  }

  void add_param_factors(int param) {
    const int o = cm.optimizer_of(param);
    if (o < 0 || var_of[o] < 0 || var_of[param] < 0) return;
    const TensorMeta& m = cm.graph().meta({param, 0});
    const VertexInfo& oi = cm.info(o);
    const VertexInfo& pi = cm.info(param);
    for (auto [c, k] : cm.param_uses(param)) {
      if (var_of[c] < 0) continue;
      const VertexInfo& ci = cm.info(c);
      Planner::Tables::EdgeKey key{&ci, k, &oi, 0, 0};
      std::vector<double> time;
      {
        std::lock_guard<std::mutex> l(tables->mu);
        auto& slot = tables->grad[key];
        if (!slot) {
          slot = std::make_unique<Planner::Tables::T>();
          const auto& greps = ci.grad_reps[k];
          const auto& oreps = oi.out_reps[0];
          for (const Placements& gr : greps)
            for (const Placements& op : oreps) slot->time.push_back(cm.move(gr, op, m, true).us);
        }
        time = slot->time;
      }
      p.add_factor(var_of[c], ci.grad_classes[k], var_of[o], oi.out_classes[0], std::move(time));
    }
    Planner::Tables::EdgeKey key{&oi, 0, &pi, 0, 1};
    std::vector<double> time;
    {
      std::lock_guard<std::mutex> l(tables->mu);
      auto& slot = tables->update[key];
      if (!slot) {
        slot = std::make_unique<Planner::Tables::T>();
        for (const Placements& op : oi.out_reps[0])
          for (const Placements& pp : pi.out_reps[0]) slot->time.push_back(cm.move(op, pp, m, true).us);
      }
      time = slot->time;
    }
    p.add_factor(var_of[o], oi.out_classes[0], var_of[param], pi.out_classes[0], std::move(time));
  }
};

void Planner::prefetch_tables() {
  struct Job {
    int u, j, v, k;
    const std::vector<Placements>* reps;
    const std::vector<Placements>* greps;
    Tables::EdgeKey key;
    std::unique_ptr<Tables::T>* slot = nullptr;
  };
  std::vector<Job> jobs;
  for (int v = 0; v < g_.num_vertices(); ++v) {
    if (!takes_tensors(g_.node(v).kind)) continue;
    const int ti = template_of_[v];
    if (ti >= 0 && instance_of_[v] != 0) continue;
    const auto& ins = cm_->inputs(v);
    for (int k = 0; k < static_cast<int>(ins.size()); ++k) {
      const int u = ins[k].node;
      if (g_.node(u).kind == NodeKind::kConstant) continue;
      const bool entry = ti >= 0 && !(template_of_[u] == ti && instance_of_[u] == 0);
      const std::vector<Placements>* reps = entry ? &templates_[ti].proxy : &cm_->info(u).out_reps[ins[k].output];
      const std::vector<Placements>* greps =
          entry ? &templates_[ti].proxy_grad : &cm_->info(u).out_grad_reps[ins[k].output];
      Tables::EdgeKey key{cm_->info_ptr(u).get(), ins[k].output, &cm_->info(v), k, entry ? ti : -1};
      auto& slot = tables_->edge[key];
      if (slot) continue;
      slot = std::make_unique<Tables::T>();  // placeholder, filled below
      jobs.push_back({u, ins[k].output, v, k, reps, greps, key});
    }
  }
  for (Job& j : jobs) j.slot = &tables_->edge[j.key];  // the map no longer grows
  // A bound on the work before any of it: a rank-20 tensor on a 3-d mesh has ~10^4 layouts a side,
  // 10^8 entries per table (which once threw bad_alloc inside a worker thread).
  double entries = 0;
  for (const Job& j : jobs) {
    const double n = static_cast<double>(j.reps->size()) * static_cast<double>(cm_->info(j.v).in_reps[j.k].size());
    entries += n;
    DT_CHECK(entries <= static_cast<double>(kMaxTableEntries), "dtensor plan: the redistribution tables of ", g_.name, " on mesh ",
             mesh_.str(), " need more than ", kMaxTableEntries, " entries (the edge '", g_.node(j.u).name, "' -> '",
             g_.node(j.v).name, "' alone: ", j.reps->size(), " x ", cm_->info(j.v).in_reps[j.k].size(),
             " layouts); accepted: at most ", kMaxTableEntries, ". Plan on a mesh with fewer dims, or with "
             "lower-rank tensors (each tensor dim is a layout choice per mesh dim)");
  }
  // Tables of the same tensor share most of their moves: deal whole tensors to the threads, largest
  // first, each to the least loaded thread (each thread keeps its own move cache).
  const int threads = static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 8));
  std::map<int, std::pair<double, std::vector<size_t>>> by_meta;
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto& e = by_meta[cm_->meta_id(g_.meta({jobs[i].u, jobs[i].j}))];
    e.first += static_cast<double>(jobs[i].reps->size() * cm_->info(jobs[i].v).in_reps[jobs[i].k].size());
    e.second.push_back(i);
  }
  std::vector<std::pair<double, std::vector<size_t>>> groups;
  for (auto& [m, e] : by_meta) groups.push_back(std::move(e));
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::vector<size_t>> share(threads);
  std::vector<double> load(threads, 0);
  for (auto& [w, ids] : groups) {
    const int t = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    load[t] += w;
    share[t].insert(share[t].end(), ids.begin(), ids.end());
  }
  // A thread's exception (bad_alloc, an Error) is kept and rethrown after every thread joined: one
  // escaping a thread, or the caller's unwinding past joinable threads, would terminate the process.
  std::vector<std::exception_ptr> failed(threads);
  std::vector<CostModel::MoveTimes> caches(threads);
  auto work = [&](int t) {
    try {
      CostModel::MoveTimes& cache = caches[t];
      for (size_t i : share[t])
        *jobs[i].slot =
            fill_edge_table(*cm_, jobs[i].u, jobs[i].j, jobs[i].v, jobs[i].k, *jobs[i].reps, *jobs[i].greps, cache);
    } catch (...) {
      failed[t] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  try {
    for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  } catch (...) {  // a thread that could not start: join the started ones before unwinding past them
    for (auto& th : pool) th.join();
    throw;
  }
  work(0);
  for (auto& th : pool) th.join();
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
  for (CostModel::MoveTimes& c : caches) cm_->keep_move_times(std::move(c));  // for the next mode's tables
}

MinSumProblem Planner::build_problem(double lambda, const Constraints* c, std::vector<int>* var_of) const {
  ProblemBuilder b{*cm_, tables_.get(), lambda, c, {}, {}};
  const int n = g_.num_vertices();
  b.var_of.assign(n, -1);
  for (int v = 0; v < n; ++v)
    if (g_.node(v).kind != NodeKind::kConstant) b.add_var(v, false);
  for (int v = 0; v < n; ++v) {
    if (!takes_tensors(g_.node(v).kind)) continue;
    const auto& ins = cm_->inputs(v);
    for (int k = 0; k < static_cast<int>(ins.size()); ++k) {
      const int u = ins[k].node;
      if (g_.node(u).kind == NodeKind::kConstant) continue;
      const VertexInfo& ui = cm_->info(u);
      b.add_edge(u, ins[k].output, v, k, b.var_of[u], ui.out_classes[ins[k].output], ui.out_reps[ins[k].output],
                 ui.out_grad_reps[ins[k].output], -1);
    }
  }
  for (int v = 0; v < n; ++v)
    if (g_.node(v).kind == NodeKind::kParam) b.add_param_factors(v);
  if (var_of) *var_of = b.var_of;
  return std::move(b.p);
}

std::vector<int> Planner::solve(double lambda, const Constraints* c, double* cost, bool* exact) const {
  const int n = g_.num_vertices();
  SolveOptions so;
  so.branch_budget = options_.branch_budget;
  std::vector<int> x(n, -1);
  *exact = true;
  if (templates_.empty()) {
    std::vector<int> var_of;
    MinSumProblem p = build_problem(lambda, c, &var_of);
    Solution s = planner::solve(p, so);
    for (int v = 0; v < n; ++v)
      if (var_of[v] >= 0) x[v] = s.x[var_of[v]];
    *cost = s.cost;
    *exact = s.exact;
    return x;
  }
  // 1. Each template: eliminate everything but the entering tensor (proxy) and the exit vertex.
  std::vector<std::shared_ptr<const Reduction>> reductions;
  for (size_t ti = 0; ti < templates_.size(); ++ti) {
    const Template& t = templates_[ti];
    ProblemBuilder b{*cm_, tables_.get(), lambda, c, {}, {}};
    b.var_of.assign(n, -1);
    const std::vector<int>& verts = t.verts[0];
    for (int v : verts) b.add_var(v, false);
    const int proxy = b.p.add_var(std::vector<double>(t.proxy.size(), 0.0));
    const TensorId entry = t.entry[0];
    for (int v : verts) {
      if (!takes_tensors(g_.node(v).kind)) continue;
      const auto& ins = cm_->inputs(v);
      for (int k = 0; k < static_cast<int>(ins.size()); ++k) {
        const int u = ins[k].node;
        if (g_.node(u).kind == NodeKind::kConstant) continue;
        if (b.var_of[u] >= 0) {
          const VertexInfo& ui = cm_->info(u);
          b.add_edge(u, ins[k].output, v, k, b.var_of[u], ui.out_classes[ins[k].output], ui.out_reps[ins[k].output],
                 ui.out_grad_reps[ins[k].output], -1);
        } else {
          DT_CHECK(ins[k] == entry, "planner: internal error: template input");
          b.add_edge(u, ins[k].output, v, k, proxy, identity_classes(static_cast<int>(t.proxy.size())), t.proxy,
                     t.proxy_grad, static_cast<int>(ti));
        }
      }
    }
    for (int v : verts)
      if (g_.node(v).kind == NodeKind::kParam) b.add_param_factors(v);
    auto red = reduce(b.p, {proxy, b.var_of[verts[t.exit_pos]]}, so);
    *exact &= red->exact();
    reductions.push_back(red);
  }
  // 2. The rest of the graph with one table per layer instance.
  ProblemBuilder b{*cm_, tables_.get(), lambda, c, {}, {}};
  b.var_of.assign(n, -1);
  for (int v = 0; v < n; ++v) {
    if (g_.node(v).kind == NodeKind::kConstant) continue;
    const int ti = template_of_[v];
    if (ti < 0) b.add_var(v, false);
    else if (templates_[ti].verts[instance_of_[v]][templates_[ti].exit_pos] == v) b.add_var(v, true);
  }
  for (int v = 0; v < n; ++v) {
    if (!takes_tensors(g_.node(v).kind) || template_of_[v] >= 0) continue;
    const auto& ins = cm_->inputs(v);
    for (int k = 0; k < static_cast<int>(ins.size()); ++k) {
      const int u = ins[k].node;
      if (g_.node(u).kind == NodeKind::kConstant) continue;
      const VertexInfo& ui = cm_->info(u);
      b.add_edge(u, ins[k].output, v, k, b.var_of[u], ui.out_classes[ins[k].output], ui.out_reps[ins[k].output],
                 ui.out_grad_reps[ins[k].output], -1);
    }
  }
  for (int v = 0; v < n; ++v)
    if (g_.node(v).kind == NodeKind::kParam && template_of_[v] < 0) b.add_param_factors(v);
  for (size_t ti = 0; ti < templates_.size(); ++ti) {
    const Template& t = templates_[ti];
    for (size_t i = 0; i < t.verts.size(); ++i) {
      const int exit = t.verts[i][t.exit_pos];
      const int dom = static_cast<int>(cm_->info(exit).choices.size());
      b.p.add_factor(b.var_of[t.entry[i].node], t.entry_map[i], b.var_of[exit], identity_classes(dom),
                     reductions[ti]->shared_table());
    }
  }
  Solution s = planner::solve(b.p, so);
  *exact &= s.exact;
  *cost = s.cost;
  for (int v = 0; v < n; ++v)
    if (b.var_of[v] >= 0) x[v] = s.x[b.var_of[v]];
  // 3. Layer internals from each instance's (entry, exit) values.
  for (size_t ti = 0; ti < templates_.size(); ++ti) {
    const Template& t = templates_[ti];
    std::map<std::pair<int, int>, std::vector<int>> cache;
    for (size_t i = 0; i < t.verts.size(); ++i) {
      const int pa = t.entry_map[i]->of[x[t.entry[i].node]];
      const int sb = x[t.verts[i][t.exit_pos]];
      auto& inner = cache[{pa, sb}];
      if (inner.empty()) inner = reductions[ti]->backtrack({pa, sb});
      // Variables of instance 0 were numbered in vertex order, like every instance's positions.
      for (size_t pos = 0; pos < t.verts[i].size(); ++pos) x[t.verts[i][pos]] = inner[pos];
    }
  }
  return x;
}

std::vector<const Choice*> Planner::choices(const std::vector<int>& index) const {
  std::vector<const Choice*> out(index.size(), nullptr);
  for (size_t v = 0; v < index.size(); ++v)
    if (index[v] >= 0) out[v] = &cm_->info(static_cast<int>(v)).choices[index[v]];
  return out;
}

Constraints Planner::megatron_constraints(int tp, std::string* note) const {
  const int n = g_.num_vertices();
  Constraints c;
  c.allowed.resize(n);
  std::vector<std::string> problems;
  // Whether every data input can split its batch over the data-parallel dims.
  bool split_batch = mesh_.ndim() > 1;
  for (int v = 0; v < n; ++v) {
    if (g_.node(v).kind != NodeKind::kInput) continue;
    bool any = false;
    for (const Choice& ch : cm_->info(v).choices) {
      bool ok = true;
      for (int i = 0; i < mesh_.ndim(); ++i)
        ok &= i == tp ? ch.placement()[i].is_replicate() : ch.placement()[i].is_shard(0);
      any |= ok;
    }
    split_batch &= any;
  }
  for (int v = 0; v < n; ++v) {
    const Node& nd = g_.node(v);
    const VertexInfo& info = cm_->info(v);
    auto& a = c.allowed[v];
    if (nd.kind == NodeKind::kConstant || nd.kind == NodeKind::kOptimizer) continue;
    a.assign(info.choices.size(), 1);
    for (size_t s = 0; s < info.choices.size(); ++s) {
      const Strategy& st = info.choices[s].strategy;
      bool ok = true;
      if (nd.kind == NodeKind::kParam) {
        for (int i = 0; i < mesh_.ndim(); ++i) ok &= i == tp || st.outputs[0][i].is_replicate();
      } else if (nd.kind == NodeKind::kInput) {
        for (int i = 0; i < mesh_.ndim(); ++i)
          ok &= i == tp ? st.outputs[0][i].is_replicate() : st.outputs[0][i].is_shard(0);
      } else if (takes_tensors(nd.kind) && split_batch && cm_->requires_grad(v)) {
        // Data parallel on the other dims: no activation is replicated there.
        for (int i = 0; i < mesh_.ndim(); ++i)
          if (i != tp)
            for (const Placements& p : st.outputs) ok &= !p[i].is_replicate();
      }
      if (ok && nd.kind == NodeKind::kOp && !nd.role.empty()) {
        const auto& in = st.inputs;
        const int64_t r0 = static_cast<int64_t>(cm_->graph().meta(cm_->inputs(v)[0]).shape.size());
        const int64_t rw = in.size() > 1 ? static_cast<int64_t>(cm_->graph().meta(cm_->inputs(v)[1]).shape.size()) : 0;
        const int64_t ro = static_cast<int64_t>(nd.outputs[0].shape.size());
        const bool lin = nd.op == "linear";
        if (nd.role == "column") {
          ok &= in[1][tp].is_shard(lin ? 0 : rw - 1) && in[0][tp].is_replicate() && st.outputs[0][tp].is_shard(ro - 1);
        } else if (nd.role == "row") {
          ok &= in[1][tp].is_shard(lin ? 1 : rw - 2) && in[0][tp].is_shard(r0 - 1) && st.outputs[0][tp].is_partial();
        } else if (nd.role == "vocab") {
          ok &= in[0][tp].is_shard(0);
        } else if (nd.role == "expert") {
          ok &= in[1][tp].is_shard(0);
        }
      }
      a[s] = ok;
    }
    bool any = false;
    for (char x : a) any |= x != 0;
    if (!any) {
      if (nd.kind == NodeKind::kInput) {
        a.assign(info.choices.size(), 1);  // batch too small to split: leave it free
        problems.push_back(absl::StrCat("input ", nd.name, " ", shape_str(nd.outputs[0].shape),
                                        " cannot split its dim 0 over the data-parallel dims"));
      } else {
        problems.push_back(absl::StrCat(nd.name, " (", nd.op, nd.role.empty() ? "" : ", role " + nd.role,
                                        ") has no strategy of Megatron's on ", mesh_.str()));
      }
    }
  }
  if (note) *note = absl::StrJoin(problems, "; ");
  return c;
}

Constraints Planner::data_parallel_constraints(std::string* note) const {
  const int n = g_.num_vertices();
  Constraints c;
  c.allowed.resize(n);
  std::vector<std::string> problems;
  for (int v = 0; v < n; ++v) {
    const Node& nd = g_.node(v);
    if (nd.kind == NodeKind::kConstant || takes_tensors(nd.kind)) continue;
    const VertexInfo& info = cm_->info(v);
    auto& a = c.allowed[v];
    a.assign(info.choices.size(), 0);
    bool any = false;
    for (size_t s = 0; s < info.choices.size(); ++s) {
      const Placements& p = info.choices[s].placement();
      bool ok = true;
      for (const Placement& x : p) ok &= nd.kind == NodeKind::kInput ? x.is_shard(0) : x.is_replicate();
      a[s] = ok;
      any |= ok;
    }
    if (!any && nd.kind == NodeKind::kInput)
      problems.push_back(absl::StrCat("input ", nd.name, " ", shape_str(nd.outputs[0].shape), " cannot split dim 0 over ",
                                      mesh_.size(), " ranks"));
  }
  if (note) *note = absl::StrJoin(problems, "; ");
  return c;
}

Baseline Planner::greedy() const {
  Baseline b;
  b.name = "greedy";
  b.note = "the engine's propagate() op by op from batch-split inputs and replicated parameters";
  const int n = g_.num_vertices();
  b.owned = std::make_shared<std::vector<Choice>>(n);
  b.plan.assign(n, nullptr);
  PropagateOptions po;
  po.hardware = &hw_;
  for (int v : g_.topological_order()) {
    const Node& nd = g_.node(v);
    if (nd.kind == NodeKind::kConstant) continue;
    const VertexInfo& info = cm_->info(v);
    Choice& c = (*b.owned)[v];
    if (nd.kind == NodeKind::kRedistribute) {
      // Eager DTensor moves each consumer's input on its own: the tensor stays as made.
      const TensorId t = cm_->inputs(v)[0];
      c = CostModel::redistribute_choice(b.plan[t.node]->strategy.outputs[t.output],
                                         CostModel::grad_target(*b.plan[t.node], t.output));
      b.plan[v] = &c;
      continue;
    }
    if (nd.kind != NodeKind::kOp) {
      // Inputs split on dim 0 over every mesh dim it fits, parameters and optimizer state replicated.
      Placements want(mesh_.ndim(), Replicate());
      if (nd.kind == NodeKind::kInput) {
        int64_t pieces = 1;
        for (int i = 0; i < mesh_.ndim(); ++i)
          if (!nd.outputs[0].shape.empty() && pieces * mesh_.shape[i] <= nd.outputs[0].shape[0]) {
            want[i] = Shard(0);
            pieces *= mesh_.shape[i];
          }
      }
      for (const Choice& x : info.choices)
        if (x.placement() == want) c = x;
      b.plan[v] = &c;
      continue;
    }
    std::vector<TensorMeta> metas;
    std::vector<Placements> pl;
    for (const TensorId& t : cm_->inputs(v)) {
      metas.push_back(g_.meta(t));
      pl.push_back(g_.node(t.node).kind == NodeKind::kConstant ? Placements(mesh_.ndim(), Replicate())
                                                                 : b.plan[t.node]->strategy.outputs[t.output]);
    }
    OpCall call = OpCall::bind(Registry::get().find(nd.op), nd.positional, nd.keyword, metas, pl, mesh_.shape);
    auto d = propagate(call, po);
    c = cm_->op_choice(v, d->strategy);
    b.plan[v] = &c;
  }
  b.valid = true;
  return b;
}

void Planner::check_mesh_dims() const {
  const int n = g_.num_vertices();
  for (int i = 0; i < mesh_.ndim(); ++i) {
    if (mesh_.shape[i] == 1) continue;
    bool usable = false;
    for (int v = 0; v < n && !usable; ++v) {
      if (g_.node(v).kind != NodeKind::kOp) continue;
      for (const Choice& c : cm_->info(v).choices) {
        for (const auto* group : {&c.strategy.outputs, &c.strategy.inputs})
          for (const Placements& p : *group) usable |= p[i].is_shard();
        if (usable) break;
      }
    }
    if (usable) continue;
    // The largest size of this mesh dim at which some op could split something.
    auto works = [&](int64_t k) {
      absl::flat_hash_map<std::string, char> seen;
      for (int v = 0; v < n; ++v) {
        if (g_.node(v).kind != NodeKind::kOp) continue;
        OpCall call = bind_vertex(g_, v, Shape{k});
        if (!seen.emplace(std::to_string(call.hash()), 1).second) continue;
        for (const Strategy& s : expand_strategies(call, call.op().meta(call), true))
          for (const auto* group : {&s.outputs, &s.inputs})
            for (const Placements& p : *group)
              if (p[0].is_shard()) return true;
      }
      return false;
    };
    int64_t lo = 1, hi = mesh_.shape[i];  // works(lo) (trivially), !works(hi)
    while (hi - lo > 1) {
      int64_t mid = (lo + hi) / 2;
      if (works(mid)) lo = mid;
      else hi = mid;
    }
    std::string fit = lo > 1 ? absl::StrCat(mesh_.names[i], " <= ", lo) : "no size above 1";
    DT_FAIL("dtensor plan: mesh dim '", mesh_.names[i], "' of size ", mesh_.shape[i], " cannot split any tensor of ",
            g_.name, ": every dim a rule could shard over it is smaller than ", mesh_.shape[i],
            " or does not split evenly where the rule needs it. Would fit: ", fit,
            " (or a larger batch / sequence for data or sequence parallelism)");
  }
}

Planner::Search Planner::lagrangian(const Constraints* c, double limit, double stop_above) const {
  Search out;
  auto attempt = [&](double lambda) {
    Search::Found f;
    if (auto at = c ? solved_.end() : solved_.find(lambda); at != solved_.end()) {
      f = at->second;  // lower_bound solved it
    } else {
      double cost = 0;
      f.x = solve(lambda, c, &cost, &f.exact);
      f.valid = std::isfinite(cost);
      if (f.valid) f.eval = evaluate(*cm_, choices(f.x), lambda);
      f.lambda = lambda;
    }
    ++out.solves;
    out.exact &= f.exact;
    return f;
  };
  auto consider = [&](Search::Found f) {
    if (!f.valid || f.eval.peak_memory_bytes > limit) return false;
    if (!out.best.valid || f.eval.step_time_us < out.best.eval.step_time_us) out.best = std::move(f);
    return true;
  };
  // A price of 1 µs per GB breaks ties between equally fast plans toward less memory.
  Search::Found f0 = attempt(kTieBreakLambda);
  if (!f0.valid) return out;  // the constraints admit nothing
  out.least = f0;
  if (consider(f0)) return out;
  // As lower_bound(): every plan that fits takes at least the memory-free plan's time less its
  // price for the limit.
  if (f0.exact && (f0.eval.step_time_us - kTieBreakLambda * limit) * (1 - 1e-9) >= stop_above) {
    out.stopped = true;
    return out;
  }
  const double scale = f0.eval.step_time_us / std::max(1.0, static_cast<double>(f0.eval.peak_memory_bytes));
  // Memory alone (weights scaled far above time) first: when even that plan does not fit, no price
  // between can, and the escalation below would solve up to 16 times for nothing.
  Search::Found memory_alone = attempt(scale * 1e9);
  if (memory_alone.valid && memory_alone.eval.peak_memory_bytes < out.least.eval.peak_memory_bytes)
    out.least = memory_alone;
  if (!memory_alone.valid || memory_alone.eval.peak_memory_bytes > limit) return out;
  double lo = 0, hi = std::max(scale * 0.1, 8 * kTieBreakLambda);
  bool fit = false;
  Search::Found near = f0;  // the plan that does not fit at the highest price tried below `hi`
  for (int i = 0; i < 16 && !fit; ++i) {
    Search::Found f = attempt(hi);
    if (f.valid && f.eval.peak_memory_bytes < out.least.eval.peak_memory_bytes) out.least = f;
    if (f.valid && f.eval.peak_memory_bytes > limit) near = f;
    fit = consider(std::move(f));
    if (!fit) {
      lo = hi;
      hi *= 8;
    }
  }
  if (!fit) {  // no price below fitted, the memory-alone plan did: it is the plan
    consider(std::move(memory_alone));
    return out;
  }
  // Bisection (in log space) down to a factor 1.5 between the last price that did not fit and the
  // first that did; finer prices rarely change the plan.
  for (int i = 0; i < 6; ++i) {
    if (lo > 0 && hi / lo < 1.5) break;
    const double mid = lo > 0 ? std::sqrt(lo * hi) : hi / 8;
    Search::Found f = attempt(mid);
    if (f.valid && f.eval.peak_memory_bytes > limit) near = f;
    if (consider(std::move(f))) hi = mid;
    else lo = mid;
  }
  mix_layers(near, limit, &out);
  return out;
}

double Planner::lower_bound(double limit, bool* feasible) const {
  check_mesh_dims();
  auto attempt = [&](double lambda) -> const Search::Found& {
    auto [it, fresh] = solved_.try_emplace(lambda);
    if (fresh) {
      Search::Found& f = it->second;
      double cost = 0;
      f.x = solve(lambda, nullptr, &cost, &f.exact);
      f.valid = std::isfinite(cost);
      if (f.valid) f.eval = evaluate(*cm_, choices(f.x), lambda);
      f.lambda = lambda;
    }
    return it->second;
  };
  // As lagrangian() begins: the memory-free plan, then (when it does not fit) memory alone.
  const Search::Found& f0 = attempt(kTieBreakLambda);
  if (feasible) {
    *feasible = f0.valid && f0.eval.peak_memory_bytes <= limit;
    if (f0.valid && !*feasible) {
      const double scale = f0.eval.step_time_us / std::max(1.0, static_cast<double>(f0.eval.peak_memory_bytes));
      const double lambda = scale * 1e9;
      // The memory-alone plan M minimizes time + lambda * bytes (exactly, as f0 was solved: the
      // same problem's structure): for any plan P, bytes(M) <= bytes(P) + time(P) / lambda. P = f0
      // with every parameter and optimizer state in its least-memory layout (no op's choice changes,
      // so every factor stays finite) proves that M fits without solving for it.
      bool proven = false;
      if (f0.exact) {
        std::vector<int> x = f0.x;
        for (int v = 0; v < g_.num_vertices(); ++v) {
          const NodeKind kind = g_.node(v).kind;
          if (kind != NodeKind::kParam && kind != NodeKind::kOptimizer) continue;
          const std::vector<Choice>& cs = cm_->info(v).choices;
          auto bytes = [](const Choice& c) { return c.param_bytes + c.grad_bytes + c.state_bytes; };
          int least = x[v];
          for (int i = 0; i < static_cast<int>(cs.size()); ++i)
            if (bytes(cs[i]) < bytes(cs[least])) least = i;
          x[v] = least;
        }
        const PlanEval e = evaluate(*cm_, choices(x), lambda);
        proven = static_cast<double>(e.peak_memory_bytes) + e.step_time_us / lambda <= limit * (1 - 1e-9);
      }
      if (proven) {
        *feasible = true;
      } else {
        const Search::Found& m = attempt(lambda);
        *feasible = m.valid && m.eval.peak_memory_bytes <= limit;
      }
    }
  }
  if (!f0.valid || !f0.exact) return 0;
  if (options_.compare && greedy_may_fit(*cm_, limit)) return 0;
  // Every plan P: time(P) + l * bytes(P) >= the exact minimum, time(f0) + l * bytes(f0), at l =
  // kTieBreakLambda (keeping or moving an input again, P pays at least the objective's cheaper
  // one); for P within the limit, time(P) >= time(f0) - l * limit. Less a rounding margin.
  return (f0.eval.step_time_us - kTieBreakLambda * limit) * (1 - 1e-9);
}

void Planner::mix_layers(const Search::Found& fast, double limit, Search* out) const {
  // Between the plan that fits (slow) and the faster one that does not, identical layers may take
  // either plan's inside when everything else agrees: the objective is a sum over layers given their
  // boundaries. Give the faster inside to as many layers as the memory allows.
  Search::Found& slow = out->best;
  if (templates_.empty() || !fast.valid || !slow.valid || fast.x == slow.x) return;
  // The layers' boundaries (entering tensors' producers and exits) must agree; the rest of the graph
  // is taken from the plan that fits.
  for (const Template& t : templates_)
    for (size_t i = 0; i < t.verts.size(); ++i)
      for (int v : {t.entry[i].node, t.verts[i][t.exit_pos]})
        if (fast.x[v] != slow.x[v]) return;
  // Instances whose insides differ, and what switching one of them to the fast inside changes.
  struct Group {
    std::vector<std::pair<int, int>> instances;  // (template, instance)
    double dt = 0, dm = 0;
  };
  std::map<std::vector<int>, Group> groups;
  for (size_t ti = 0; ti < templates_.size(); ++ti) {
    const Template& t = templates_[ti];
    for (size_t i = 0; i < t.verts.size(); ++i) {
      std::vector<int> key = {static_cast<int>(ti), slow.x[t.entry[i].node], slow.x[t.verts[i][t.exit_pos]]};
      bool differs = false;
      for (int v : t.verts[i]) differs |= fast.x[v] != slow.x[v];
      if (differs) groups[key].instances.push_back({static_cast<int>(ti), static_cast<int>(i)});
    }
  }
  auto swapped = [&](const std::vector<std::pair<int, int>>& which) {
    std::vector<int> x = slow.x;
    for (auto [ti, i] : which)
      for (int v : templates_[ti].verts[i]) x[v] = fast.x[v];
    return x;
  };
  std::vector<Group*> order;
  for (auto& [key, gr] : groups) {
    PlanEval e = evaluate(*cm_, choices(swapped({gr.instances[0]})), slow.lambda);
    gr.dt = e.step_time_us - slow.eval.step_time_us;
    gr.dm = static_cast<double>(e.peak_memory_bytes - slow.eval.peak_memory_bytes);
    if (gr.dt < 0) order.push_back(&gr);
  }
  std::sort(order.begin(), order.end(), [](const Group* a, const Group* b) {
    return a->dt / std::max(1.0, a->dm) < b->dt / std::max(1.0, b->dm);  // most time saved per byte first
  });
  std::vector<std::pair<int, int>> take;
  double room = limit - static_cast<double>(slow.eval.peak_memory_bytes);
  for (Group* gr : order)
    for (auto inst : gr->instances)
      if (gr->dm <= room) {
        take.push_back(inst);
        room -= std::max(0.0, gr->dm);
      }
  // Additivity is exact up to the choice between keeping and re-moving inputs; check, backing off.
  while (!take.empty()) {
    std::vector<int> x = swapped(take);
    for (double lambda : {slow.lambda, fast.lambda}) {
      PlanEval e = evaluate(*cm_, choices(x), lambda);
      if (e.peak_memory_bytes <= limit && e.step_time_us < slow.eval.step_time_us) {
        slow.x = std::move(x);
        slow.eval = std::move(e);
        slow.lambda = lambda;
        out->mixed = static_cast<int>(take.size());
        return;
      }
    }
    take.pop_back();
  }
}

std::vector<Baseline> Planner::compare(double limit, double beat, bool* cut) const {
  std::vector<Baseline> out;
  const bool to_beat = beat < std::numeric_limits<double>::infinity();
  if (cut) *cut = false;
  {
    auto finish = [&](Baseline& b) {
      if (!b.valid) return;
      b.eval = evaluate(*cm_, b.plan, b.lambda);
      b.fits = b.eval.peak_memory_bytes <= limit;
    };
    // A constrained baseline gets the same memory search: its best plan that fits, or its least memory.
    auto constrained = [&](const std::string& name, const Constraints& c, const std::string& note) {
      Baseline b;
      b.name = name;
      b.note = note;
      Search bs = lagrangian(&c, limit, beat);
      if (bs.stopped) {
        b.note = absl::StrCat("not priced: a plan of it that fits takes at least ",
                              absl::StrFormat("%.1f", bs.least.eval.step_time_us / 1e3), " ms, no faster than the search");
        if (cut) *cut = true;
        return b;
      }
      const Search::Found& f = bs.best.valid ? bs.best : bs.least;
      b.valid = f.valid;
      if (!b.valid && b.note.empty()) b.note = "no plan satisfies its constraints";
      if (b.valid) {
        b.plan = choices(f.x);
        b.lambda = f.lambda;
      }
      return b;
    };
    bool has_roles = false;
    for (int v = 0; v < g_.num_vertices(); ++v) has_roles |= !g_.node(v).role.empty();
    int tp = options_.tp_dim.empty() ? mesh_.index_of("tp") : mesh_.index_of(options_.tp_dim);
    if (tp < 0) tp = mesh_.ndim() - 1;
    if (has_roles) {
      std::string note;
      Constraints c = megatron_constraints(tp, &note);
      Baseline b = constrained("megatron", c, note);
      out.push_back(std::move(b));
    } else {
      Baseline b;
      b.name = "megatron";
      b.note = "the graph marks no column/row roles";
      out.push_back(std::move(b));
    }
    {
      std::string note;
      Constraints c = data_parallel_constraints(&note);
      out.push_back(constrained("data-parallel", c, note));
    }
    if (to_beat && !greedy_may_fit(*cm_, limit)) {  // replicated parameters and state do not fit
      Baseline b;
      b.name = "greedy";
      b.note = "not priced: every parameter and its optimizer state replicated does not fit";
      if (cut) *cut = true;
      out.push_back(std::move(b));
    } else {
      out.push_back(greedy());
    }
    for (Baseline& b : out) finish(b);
    // Megatron: say where a column-split output cannot stay split (heads not divisible by tp, ...).
    for (Baseline& b : out) {
      if (b.name != "megatron" || !b.valid) continue;
      std::vector<std::string> moved;
      for (int v = 0; v < g_.num_vertices(); ++v) {
        if (!takes_tensors(g_.node(v).kind) || g_.node(v).layer > 0) continue;
        const auto& ins = cm_->inputs(v);
        for (const CollectiveUse& c : b.eval.vertices[v].collectives) {
          if (c.phase != "forward" || c.input < 0 || c.mesh_dim != tp) continue;
          const Node& u = g_.node(ins[c.input].node);
          if (u.role == "column" && moved.size() < 3)
            moved.push_back(absl::StrCat(u.name, " -> ", g_.node(v).name, " (", g_.node(v).op, ")"));
        }
      }
      bool view = false;
      for (const std::string& m : moved) view |= m.find("(view)") != std::string::npos;
      if (!moved.empty())
        b.note += absl::StrCat(b.note.empty() ? "" : "; ", "column-split outputs moved before use: ",
                               absl::StrJoin(moved, ", "),
                               view ? absl::StrCat(" (for attention: the heads must divide by ", mesh_.names[tp], "=",
                                                   mesh_.shape[tp], ")")
                                    : "");
    }
  }
  return out;
}

PlanResult Planner::run() {
  const double t0 = now_ms();
  check_mesh_dims();
  PlanResult r;
  r.cost_model = cm_;
  const double memory_GB = options_.shares.cluster ? options_.shares.cluster->min_memory_GB() : hw_.memory_GB;
  r.memory_limit_bytes = options_.memory_limit_bytes > 0 ? options_.memory_limit_bytes : memory_GB * 1e9;
  r.templates = static_cast<int>(templates_.size());
  for (const Template& t : templates_) r.templated_layers += static_cast<int>(t.layers.size());
  const double limit = r.memory_limit_bytes;
  // The baselines on a second thread while the search runs (both only read the cost model and the
  // shared tables); a failing search waits for them in the future's destructor.
  double compare_ms = 0;
  std::future<std::vector<Baseline>> baselines;
  if (options_.compare && options_.parallel_baselines)
    baselines = std::async(std::launch::async, [this, limit, &compare_ms] {
      const double t1 = now_ms();
      std::vector<Baseline> out = compare(limit);
      compare_ms = now_ms() - t1;
      return out;
    });
  Search s = lagrangian(nullptr, limit);
  r.solves = s.solves;
  r.exact = s.exact;
  if (!s.best.valid) {
    const PlanEval& e = s.least.eval;
    const double need = static_cast<double>(e.peak_memory_bytes);
    const int64_t devices = mesh_.size();
    int64_t want = devices;
    while (static_cast<double>(want) < static_cast<double>(devices) * need / limit && want < (int64_t{1} << 40)) want *= 2;
    DT_FAIL("dtensor plan: no plan of ", g_.name, " on mesh ", mesh_.str(), " fits in ", gb(limit),
            " per device: the least memory a plan needs is ", gb(need), " (parameters ", gb(e.param_bytes),
            ", gradients ", gb(e.grad_bytes), ", optimizer state ", gb(e.state_bytes), ", activations ",
            gb(e.activation_bytes), "). Would fit: --memory-limit ", std::ceil(need / 1e9), ", or about ", want,
            " devices (a larger mesh), or a smaller --batch / --seq (activations scale with them)");
  }
  r.eval = s.best.eval;
  r.plan = choices(s.best.x);
  r.lambda = s.best.lambda;
  r.mixed_layers = s.mixed;
  r.plan_time_ms = build_ms_ + (now_ms() - t0);
  r.search_plan = r.plan;
  r.search_eval = r.eval;

  if (options_.compare) {
    if (options_.parallel_baselines) {
      r.baselines = baselines.get();
      r.compare_time_ms = compare_ms;
    } else {
      const double t1 = now_ms();
      // Baselines priced only to know that they cannot beat the search: later in full, through
      // this planner (held by a shared_ptr; else priced in full now).
      std::shared_ptr<const Planner> self = options_.baselines_to_beat ? weak_from_this().lock() : nullptr;
      bool cut = false;
      r.baselines = compare(limit, self ? r.eval.step_time_us * (1 - 1e-9) : std::numeric_limits<double>::infinity(), &cut);
      if (cut) r.full_baselines = [self, limit] { return self->compare(limit); };
      r.compare_time_ms = now_ms() - t1;
    }
    for (Baseline& b : r.baselines) {
      if (b.valid && b.fits && b.eval.step_time_us < r.eval.step_time_us * (1 - 1e-9)) {
        r.notes.push_back(absl::StrCat("the ", b.name, " baseline beat the search (", absl::StrFormat("%.1f", b.eval.step_time_us),
                                       " vs ", absl::StrFormat("%.1f", r.eval.step_time_us), " µs) and is returned"));
        r.eval = b.eval;
        r.plan = b.plan;
        r.owned = b.owned;
        r.lambda = b.lambda;
        r.source = b.name;
      }
    }
  }
  // Mesh dims the plan does not split at all.
  for (int i = 0; i < mesh_.ndim(); ++i) {
    if (mesh_.shape[i] == 1) continue;
    bool used = false;
    for (const Choice* c : r.plan) {
      if (!c) continue;
      for (const auto* group : {&c->strategy.outputs, &c->strategy.inputs})
        for (const Placements& p : *group) used |= p[i].is_shard();
    }
    if (!used)
      r.notes.push_back(absl::StrCat("mesh dim ", mesh_.names[i], " replicates all work: by the cost model splitting it is slower"));
  }
  return r;
}

int64_t memory_lower_bound(const CostModel& cm) {
  const ModelGraph& g = cm.graph();
  int64_t total = 0;
  for (int v = 0; v < g.num_vertices(); ++v) {
    const NodeKind kind = g.node(v).kind;
    if (kind == NodeKind::kConstant) continue;
    int64_t least = std::numeric_limits<int64_t>::max();
    for (const Choice& c : cm.info(v).choices) {
      switch (kind) {
        case NodeKind::kParam: least = std::min(least, c.param_bytes); break;
        case NodeKind::kOptimizer: least = std::min(least, c.grad_bytes + c.state_bytes); break;
        case NodeKind::kInput:
        case NodeKind::kOp:
        case NodeKind::kRedistribute: least = std::min(least, c.act_bytes); break;
        default: least = 0; break;
      }
    }
    if (least != std::numeric_limits<int64_t>::max()) total += least;
  }
  return total;
}

int64_t memory_lower_bound(const CostModel& cm, Recompute recompute, int recompute_layers) {
  if (recompute == cm.recompute() && recompute_layers == cm.recompute_layers()) return memory_lower_bound(cm);
  const ModelGraph& g = cm.graph();
  const std::vector<char> kept = cm.keeping(recompute, recompute_layers).kept;
  int64_t total = 0;
  for (int v = 0; v < g.num_vertices(); ++v) {
    const NodeKind kind = g.node(v).kind;
    if (kind == NodeKind::kConstant) continue;
    const VertexInfo& info = cm.info(v);
    // An op keeps its outputs as make_op_choice prices them under that mode; the rest is the mode's
    // own (parameters, optimizer state, data inputs) or nothing (redistributions).
    const bool keeps = kind == NodeKind::kOp && g.training && cm.requires_grad(v) && !info.view && !g.node(v).fused && kept[v];
    int64_t least = std::numeric_limits<int64_t>::max();
    for (const Choice& c : info.choices) {
      switch (kind) {
        case NodeKind::kParam: least = std::min(least, c.param_bytes); break;
        case NodeKind::kOptimizer: least = std::min(least, c.grad_bytes + c.state_bytes); break;
        case NodeKind::kInput: least = std::min(least, c.act_bytes); break;
        case NodeKind::kOp: least = std::min(least, keeps ? cm.activation_copies() * c.out_bytes : 0); break;
        case NodeKind::kRedistribute: least = std::min(least, c.act_bytes); break;
        default: least = 0; break;
      }
    }
    if (least != std::numeric_limits<int64_t>::max()) total += least;
  }
  return total;
}

bool greedy_may_fit(const CostModel& cm, double limit) {
  // Replicated is each parameter's and optimizer state's largest choice; the greedy plan needs more.
  const ModelGraph& g = cm.graph();
  double replicated = 0;
  for (int v = 0; v < g.num_vertices(); ++v) {
    const NodeKind kind = g.node(v).kind;
    if (kind != NodeKind::kParam && kind != NodeKind::kOptimizer) continue;
    double most = 0;
    for (const Choice& c : cm.info(v).choices)
      most = std::max(most, static_cast<double>(c.param_bytes + c.grad_bytes + c.state_bytes));
    replicated += most;
  }
  return replicated <= limit;
}

double time_lower_bound(const CostModel& cm) {
  const ModelGraph& g = cm.graph();
  const bool train = cm.training();
  const int n = g.num_vertices();
  CostModel::MoveTimes cache;
  // The least cost of a parameter's chain given its consumer's input class i and gradient class j
  // (row-major, i x j), per (consumer info, input, parameter meta): identical layers share them.
  std::map<std::tuple<const void*, int, int>, std::vector<double>> chains;
  std::vector<char> in_chain(n, 0);  // optimizer vertices priced inside a chain
  auto chain = [&](int v, int k, int param) -> const std::vector<double>& {
    const VertexInfo& vi = cm.info(v);
    const TensorMeta& m = g.meta({param, 0});
    const int meta = cm.meta_id(m);
    auto [it, fresh] = chains.try_emplace({&vi, k, meta});
    if (!fresh) return it->second;
    const auto& ins = vi.in_reps[k];
    const auto& grads = vi.grad_reps[k];
    const std::vector<Choice>& store = cm.info(param).choices;
    const int o = train ? cm.optimizer_of(param) : -1;
    // E[s][i]: storage s to the consumer's input i (again in backward when it moves data).
    std::vector<std::vector<double>> e(store.size(), std::vector<double>(ins.size()));
    for (size_t s = 0; s < store.size(); ++s)
      for (size_t i = 0; i < ins.size(); ++i) {
        const CostModel::MoveTime t = cm.move_time(store[s].placement(), ins[i].first, meta, cache, true);
        e[s][i] = train && t.comm ? 2 * t.us : t.us;
      }
    std::vector<double>& out = it->second;
    out.assign(ins.size() * grads.size(), kInf);
    if (o < 0) {
      for (size_t i = 0; i < ins.size(); ++i) {
        double least = kInf;
        for (size_t s = 0; s < store.size(); ++s) least = std::min(least, e[s][i]);
        for (size_t j = 0; j < grads.size(); ++j) out[i * grads.size() + j] = least;
      }
      return out;
    }
    const std::vector<Choice>& state = cm.info(o).choices;
    // H[x][i]: optimizer state x, input i: the least over storage of the update's move back and
    // the forward move; then the gradient's move to x and the update's compute.
    std::vector<std::vector<double>> h(state.size(), std::vector<double>(ins.size(), kInf));
    for (size_t x = 0; x < state.size(); ++x)
      for (size_t s = 0; s < store.size(); ++s) {
        const double up = cm.move_time(state[x].placement(), store[s].placement(), meta, cache, true).us;
        for (size_t i = 0; i < ins.size(); ++i) h[x][i] = std::min(h[x][i], up + e[s][i]);
      }
    for (size_t j = 0; j < grads.size(); ++j)
      for (size_t x = 0; x < state.size(); ++x) {
        const double gx = cm.move_time(grads[j], state[x].placement(), meta, cache, true).us + state[x].opt_us;
        for (size_t i = 0; i < ins.size(); ++i) {
          double& c = out[i * grads.size() + j];
          c = std::min(c, gx + h[x][i]);
        }
      }
    return out;
  };
  double total = 0;
  // Op vertices, with the parameters they alone use.
  for (int v = 0; v < n; ++v) {
    if (!takes_tensors(g.node(v).kind)) continue;
    const VertexInfo& vi = cm.info(v);
    std::vector<std::pair<int, const std::vector<double>*>> tied;  // (input, its chain)
    for (int k = 0; k < static_cast<int>(cm.inputs(v).size()); ++k) {
      const int u = cm.inputs(v)[k].node;
      if (g.node(u).kind != NodeKind::kParam || cm.param_uses(u).size() != 1) continue;
      tied.push_back({k, &chain(v, k, u)});
      if (train && cm.optimizer_of(u) >= 0) in_chain[cm.optimizer_of(u)] = 1;
    }
    double least = kInf;
    for (size_t s = 0; s < vi.choices.size(); ++s) {
      double t = unary_cost(cm, v, vi.choices[s], 0);
      for (auto [k, c] : tied)
        t += (*c)[static_cast<size_t>(vi.in_classes[k]->of[s]) * vi.grad_reps[k].size() + vi.grad_classes[k]->of[s]];
      least = std::min(least, t);
    }
    if (least < kInf) total += least;
  }
  // The other vertices: their own least (the optimizer's update of a shared parameter).
  for (int v = 0; v < n; ++v) {
    const NodeKind kind = g.node(v).kind;
    if (kind == NodeKind::kConstant || takes_tensors(kind) || in_chain[v]) continue;
    double least = kInf;
    for (const Choice& c : cm.info(v).choices) least = std::min(least, unary_cost(cm, v, c, 0));
    if (least < kInf) total += least;
  }
  return total;
}

PlanResult plan_model(const ModelGraph& g, const MeshSpec& mesh, const HardwareProfile& hw,
                      const PlanOptions& options) {
  return std::make_shared<Planner>(g, mesh, hw, options)->run();
}

}  // namespace dtensor::planner

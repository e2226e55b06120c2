#include "planner/devices.h"

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "dtensor/core/error.h"
#include "dtensor/core/limits.h"
#include "nlohmann/json.hpp"
#include "ops/flops.h"

namespace dtensor::planner {
namespace {

const char* const kNames[3][3] = {{"dp"}, {"dp", "tp"}, {"dp", "fsdp", "tp"}};

MeshSpec named(const Shape& shape) {
  MeshSpec m;
  m.shape = shape;
  for (size_t i = 0; i < shape.size(); ++i) m.names.push_back(kNames[shape.size() - 1][i]);
  return m;
}

void factor(int64_t rest, int dims_left, Shape& prefix, std::vector<Shape>& out) {
  if (dims_left == 1) {
    if (rest >= 2 && rest <= kMaxMeshDimSize) {
      prefix.push_back(rest);
      out.push_back(prefix);
      prefix.pop_back();
    }
    return;
  }
  for (int64_t d = 2; d * 2 <= rest; ++d) {
    if (rest % d != 0 || d > kMaxMeshDimSize) continue;
    prefix.push_back(d);
    factor(rest / d, dims_left - 1, prefix, out);
    prefix.pop_back();
  }
}

double seconds(double us) { return us * 1e-6; }

// Ends plan_model_recompute's note on a mode skipped by its memory bound (PlanOptions::bound_modes).
constexpr const char* kBoundNote = " (a lower bound; not searched)";

// plan_model's error, shortened to its measure when it is the memory limit's (the full message
// names remedies for one mesh; here the other meshes are the remedy).
std::string reason(const std::string& what) {
  const std::string key = "the least memory a plan needs is ";
  const size_t at = what.find(key);
  if (at == std::string::npos) return what;
  const size_t end = what.find(" (", at);
  const size_t limit = what.find(" fits in ");
  std::string s = "no plan fits: needs at least " + what.substr(at + key.size(), end - at - key.size()) + " per device";
  if (limit != std::string::npos) s += " (limit " + what.substr(limit + 9, what.find(" per device", limit) - limit - 9) + ")";
  return s;
}

}  // namespace

std::vector<MeshSpec> mesh_factorizations(int64_t devices, int max_dims) {
  DT_CHECK(devices >= 1 && devices <= kMaxMeshRanks, "plan --devices ", devices, ": accepted: 1 to ", kMaxMeshRanks,
           " devices");
  DT_CHECK(max_dims >= 1 && max_dims <= 3, "mesh factorizations: max_dims ", max_dims, "; accepted: 1 to 3");
  std::vector<MeshSpec> out;
  if (devices == 1) return {named({1})};
  if (devices <= kMaxMeshDimSize) out.push_back(named({devices}));
  for (int dims = 2; dims <= max_dims; ++dims) {
    std::vector<Shape> shapes;
    Shape prefix;
    factor(devices, dims, prefix, shapes);
    for (const Shape& s : shapes) out.push_back(named(s));
  }
  return out;
}

std::string topology_rejection(const MeshSpec& mesh, const HardwareProfile& hw) {
  if (mesh.ndim() < 2) return "";
  const int64_t inner = mesh.shape.back();
  if (hw.ranks_per_host % inner == 0) return "";
  return absl::StrCat(mesh.names.back(), "=", inner, " does not fit in one host's NVLink domain (", hw.ranks_per_host,
                      " devices per host on ", hw.name, "): the innermost dim must divide it");
}

namespace {

// f(vertex, forward FLOPs) for every contraction of the graph (what MFU counts).
template <typename F>
void for_each_contraction(const ModelGraph& g, F f) {
  for (int v = 0; v < g.num_vertices(); ++v) {
    const Node& n = g.node(v);
    if (n.kind != NodeKind::kOp || Registry::get().find(n.op).cost.cls != CostClass::kContraction) continue;
    f(n, forward_flops(bind_vertex(g, v, {1}), n.outputs));
  }
}

}  // namespace

double model_flops(const ModelGraph& g) {
  double total = 0;
  for_each_contraction(g, [&](const Node&, double flops) { total += flops; });
  return g.training ? 3 * total : total;
}

DType contraction_dtype(const ModelGraph& g) {
  double most = -1;
  DType dt = DType::kFloat32;
  for_each_contraction(g, [&](const Node& n, double flops) {
    if (flops > most) most = flops, dt = n.outputs.at(0).dtype;
  });
  return dt;
}

PlanResult plan_model_recompute(const ModelGraph& g, const MeshSpec& mesh, const HardwareProfile& hw,
                                const PlanOptions& options, const std::vector<Recompute>& modes, bool per_layer,
                                const PlanFn& plan) {
  DT_CHECK(!modes.empty(), "planner: no recomputation mode to plan with");
  const PlanFn run = plan ? plan : [&](const PlanOptions& o) { return plan_model(g, mesh, hw, o); };
  std::optional<PlanResult> best;
  std::vector<std::string> tried;
  std::string last_error;
  bool none_fits = false;
  auto fits = [](const PlanResult& p) { return static_cast<double>(p.eval.peak_memory_bytes) <= p.memory_limit_bytes; };
  // Most recomputation first: for any plan, full keeps no more memory than selective, selective no
  // more than none, so once a mode finds no plan that fits, the modes after it cannot either.
  std::vector<Recompute> order = modes;
  std::sort(order.begin(), order.end(), [](Recompute a, Recompute b) { return a > b; });
  // Recomputation changes no move: the modes share their move times (the same figures, less work).
  PlanOptions shared = options;
  if (!shared.move_times) shared.move_times = std::make_shared<CostModel::SharedMoveTimes>();
  for (Recompute mode : order) {
    if (best && !fits(*best)) break;
    PlanOptions o = shared;
    o.recompute = mode;
    std::shared_ptr<CostModel> cm;  // built once the bound admits the mode: the planner takes it over
    if (options.bound_modes && best) {
      // No plan of this mode fits when its least bytes exceed the limit: plan_model would throw.
      // The bound from the planned mode's cost model (the same graph, mesh and copies) when it has
      // one, else from this mode's.
      const CostModel* base = best->cost_model.get();
      if (!base || &base->graph() != &g || base->mesh().shape != mesh.shape ||
          base->activation_copies() != o.activation_copies) {
        cm = std::make_shared<CostModel>(g, mesh, hw, o.shares, mode, o.activation_copies, o.recompute_layers);
        base = cm.get();
      }
      const int64_t least = memory_lower_bound(*base, mode, o.recompute_layers);
      if (static_cast<double>(least) > best->memory_limit_bytes) {
        tried.push_back(absl::StrCat(recompute_name(mode), ": no plan fits: needs at least ",
                                     absl::StrFormat("%.1f", least / 1e9), " GB per device", kBoundNote));
        break;
      }
      if (!cm && !plan && !o.shares.cluster)
        cm = std::make_shared<CostModel>(g, mesh, hw, o.shares, mode, o.activation_copies, o.recompute_layers);
    }
    PlanResult p;
    try {
      p = plan || !cm || o.shares.cluster ? run(o) : std::make_shared<Planner>(g, mesh, hw, o, std::move(cm))->run();
    } catch (const Error& e) {
      last_error = e.what();
      tried.push_back(absl::StrCat(recompute_name(mode), ": ", reason(e.what())));
      break;  // no plan fits this mode's memory: the less-recomputing modes need more
    }
    tried.push_back(absl::StrCat(recompute_name(mode), ": ", absl::StrFormat("%.1f", p.eval.step_time_us / 1e3), " ms, ",
                                 absl::StrFormat("%.1f", p.eval.peak_memory_bytes / 1e9), " GB"));
    none_fits |= mode == Recompute::kNone && fits(p);
    const bool better = !best || (fits(p) && !fits(*best)) ||
                        (fits(p) == fits(*best) && (fits(p) ? p.eval.step_time_us < best->eval.step_time_us
                                                            : p.eval.peak_memory_bytes < best->eval.peak_memory_bytes));
    if (better) best = std::move(p);
  }
  if (!best) DT_FAIL(last_error, (modes.size() > 1 ? absl::StrCat(" (recomputation tried: ", absl::StrJoin(tried, "; "), ")") : ""));
  const int layers = g.num_layers();
  if (per_layer && fits(*best) && layers > 1 && std::find(modes.begin(), modes.end(), Recompute::kFull) != modes.end()) {
    auto partial = [&](int k) -> std::optional<PlanResult> {
      PlanOptions o = shared;
      o.recompute = Recompute::kFull;
      o.recompute_layers = k;
      try {
        PlanResult p = run(o);
        if (fits(p)) return p;
      } catch (const Error&) {
      }
      return std::nullopt;
    };
    auto consider = [&](int k, std::optional<PlanResult> p) {
      if (!p) return;
      tried.push_back(absl::StrCat("full on the first ", k, " of ", layers, " layers: ",
                                   absl::StrFormat("%.1f", p->eval.step_time_us / 1e3), " ms, ",
                                   absl::StrFormat("%.1f", p->eval.peak_memory_bytes / 1e9), " GB"));
      if (p->eval.step_time_us < best->eval.step_time_us) best = std::move(p);
    };
    if (!none_fits) {
      // The least k whose plan fits: k = layers fits (full did), k = 0 does not (none did not), and
      // fewer recomputed layers never need less memory: a bisection.
      int lo = 0, hi = layers;
      std::optional<PlanResult> at_hi;
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        std::optional<PlanResult> p = partial(mid);
        if (p) {
          hi = mid;
          at_hi = std::move(p);
        } else {
          lo = mid;
        }
      }
      consider(hi, std::move(at_hi));
    } else {
      // Every k fits: a quarter, half and three quarters of the layers, where the memory freed may
      // buy a faster layout than none's (the time is not monotone in k).
      for (int k : {layers / 4, layers / 2, 3 * layers / 4})
        if (k > 0 && k < layers) consider(k, partial(k));
    }
  }
  if (modes.size() > 1) {
    const CostModel& cm = *best->cost_model;
    const std::string chosen = cm.recompute_layers() >= 0
                                   ? absl::StrCat(recompute_name(cm.recompute()), " on the first ", cm.recompute_layers(),
                                                  " of ", layers, " layers")
                                   : recompute_name(cm.recompute());
    best->notes.push_back(absl::StrCat("activation recomputation: ", chosen, " (tried ", absl::StrJoin(tried, "; "), ")"));
  }
  return *std::move(best);
}

std::string DeviceCandidate::label() const {
  if (stages == 1) return mesh.str();
  return absl::StrCat("pp=", stages, ",", mesh.str(), " m=", micro_batches,
                      virtual_stages > 1 ? absl::StrCat(" v=", virtual_stages) : "", zero_bubble ? " zb-h1" : "");
}

namespace {

// One candidate of plan_devices: rejected when enumerated, or planned by a worker.
struct Slot {
  DeviceCandidate c;      // mesh, stages, micro-batches; rejected: why not planned
  bool pipeline = false;
  // plan_devices' keep > 0: the mesh's lower bounds (µs), without tables and, when that one did
  // not prune it, from its tables' first solves (Planner::lower_bound; NaN: not computed).
  bool bounded = false;
  double cheap_bound_us = 0, tables_bound_us = std::numeric_limits<double>::quiet_NaN();
  std::vector<DeviceCandidate> ranked;  // its plans (one, or one per virtual-stage count)
};

// The fastest plan found so far, kept whole (the others keep their figures only).
struct Best {
  std::mutex mu;
  double time = std::numeric_limits<double>::infinity();
  size_t slot = 0;
  MeshSpec mesh;
  std::shared_ptr<ModelGraph> graph;
  PlanResult plan;
  std::optional<PipelinePlan> pipeline;

  int virtual_stages = 1;
  bool zero_bubble = false;
  std::multiset<double> times;  // every ranked plan's step time so far

  // Ties go to the earlier slot, so the choice does not depend on the workers' order.
  bool offer(double t, size_t s) { return t < time || (t == time && s < slot); }
  // The keep-th fastest step time so far (+inf before keep plans are ranked).
  double kth(int keep) const {
    return keep > 0 && times.size() >= static_cast<size_t>(keep) ? *std::next(times.begin(), keep - 1)
                                                                   : std::numeric_limits<double>::infinity();
  }
};

std::string over_limit(int64_t peak, double limit) {
  return absl::StrCat("peak memory ", peak / 1e9, " GB per device exceeds the limit of ", limit / 1e9, " GB");
}

}  // namespace

DevicesResult plan_devices(int64_t devices, const std::function<ModelGraph(const MeshSpec&)>& build,
                           const HardwareProfile& hw, const PlanOptions& options, int64_t tokens_per_step,
                           const std::vector<Recompute>& modes, const PipelineSearch* pipeline, int keep,
                           bool one_graph) {
  const auto t0 = std::chrono::steady_clock::now();
  const double limit = options.memory_limit_bytes > 0 ? options.memory_limit_bytes : hw.memory_GB * 1e9;
  DevicesResult r;
  r.devices = devices;
  r.tokens_per_step = tokens_per_step;
  int model_layers = 0;
  std::shared_ptr<ModelGraph> shared_graph;  // one_graph: every mesh's
  {  // FLOPs, peak and layers from the whole model's graph (the same for every mesh and pipeline)
    auto whole = std::make_shared<ModelGraph>(build(mesh_factorizations(devices).front()));
    r.model_flops = model_flops(*whole);
    r.peak_flops = hw.peak_flops_per_us(contraction_dtype(*whole)) * 1e6;
    model_layers = pipeline && pipeline->model_layers > 0 ? pipeline->model_layers : whole->num_layers();
    if (one_graph) shared_graph = std::move(whole);
  }
  // Every candidate, in enumeration order: meshes, then pipelines by stages, inner mesh, micro-batches.
  std::vector<Slot> slots;
  for (const MeshSpec& mesh : mesh_factorizations(devices)) {
    Slot sl;
    sl.c.mesh = mesh;
    sl.c.rejected = topology_rejection(mesh, hw);
    slots.push_back(std::move(sl));
  }
  if (pipeline != nullptr) {
    for (int64_t p = 2; p <= std::min<int64_t>(devices, model_layers); ++p) {
      if (devices % p != 0) continue;
      for (const MeshSpec& inner : mesh_factorizations(devices / p, 2)) {
        for (int f : pipeline->micro_batch_factors) {
          Slot sl;
          sl.pipeline = true;
          DeviceCandidate& c = sl.c;
          c.mesh = inner;
          c.stages = static_cast<int>(p);
          c.micro_batches = static_cast<int>(f * p);
          c.rejected = topology_rejection(inner, hw);
          // Each data-parallel rank of a stage gets whole samples of every micro-batch: the batch
          // divides into m micro-batches, each into the dims outside the innermost (tp).
          const int64_t dp = inner.ndim() == 1 ? inner.shape[0] : inner.size() / inner.shape.back();
          if (c.rejected.empty() && (pipeline->global_batch % c.micro_batches != 0 ||
                                     (pipeline->global_batch / c.micro_batches) % dp != 0))
            c.rejected = absl::StrCat(c.micro_batches, " micro-batches of the batch of ", pipeline->global_batch,
                                      " do not split into whole samples over the ", dp, " data-parallel ranks");
          slots.push_back(std::move(sl));
        }
      }
    }
  }
  auto figures = [&](DeviceCandidate& c) {
    const double step_s = seconds(c.step_time_us);
    c.tokens_per_s = step_s > 0 ? tokens_per_step / step_s : 0;
    c.mfu = step_s > 0 && r.peak_flops > 0 ? r.model_flops / (step_s * devices * r.peak_flops) : 0;
  };
  // Baselines after each search, on the worker's own thread: the workers keep the cores busy.
  PlanOptions quick = options;
  quick.parallel_baselines = false;
  quick.baselines_to_beat = true;  // the chosen plan's priced in full at the end
  Best best;
  auto plan_slot = [&](size_t i) {
    Slot& sl = slots[i];
    DeviceCandidate& c = sl.c;
    if (!c.rejected.empty()) return;
    try {
      if (!sl.pipeline) {
        auto graph = shared_graph ? shared_graph : std::make_shared<ModelGraph>(build(c.mesh));
        // keep > 0: each mode's planner built and bounded first (the modes plan_model_recompute
        // may plan: the first, then those its memory bound admits); the search runs only when the
        // least bound is within the keep-th fastest so far, reusing the planners.
        std::map<Recompute, std::shared_ptr<Planner>> planners;
        if (keep > 0) {
          std::vector<Recompute> order = modes;
          std::sort(order.begin(), order.end(), [](Recompute a, Recompute b) { return a > b; });
          PlanOptions shared = quick;
          shared.move_times = std::make_shared<CostModel::SharedMoveTimes>();
          // First the bound without tables (time_lower_bound) over the modes that may be planned.
          size_t admitted = 0;
          double cheap = std::numeric_limits<double>::infinity();
          std::vector<std::shared_ptr<CostModel>> models;  // per admitted mode, for its planner
          for (; admitted < order.size(); ++admitted) {
            // A later mode's memory bound from the first's cost model (built only when admitted).
            if (admitted > 0 && options.bound_modes &&
                static_cast<double>(memory_lower_bound(*models[0], order[admitted], quick.recompute_layers)) > limit)
              break;
            auto cm = std::make_shared<CostModel>(*graph, c.mesh, hw, quick.shares, order[admitted],
                                                  quick.activation_copies, quick.recompute_layers);
            cheap = std::min(cheap, quick.compare && greedy_may_fit(*cm, limit) ? 0.0 : time_lower_bound(*cm));
            models.push_back(std::move(cm));
          }
          sl.bounded = true;
          sl.cheap_bound_us = cheap;
          c.lower_bound_us = cheap;
          {
            std::lock_guard<std::mutex> l(best.mu);
            if (cheap > best.kth(keep)) return;  // pruned: listed after the workers joined
          }
          double bound = std::numeric_limits<double>::infinity();
          for (size_t m = 0; m < admitted; ++m) {
            PlanOptions o = shared;
            o.recompute = order[m];
            try {
              auto planner = std::make_shared<Planner>(*graph, c.mesh, hw, o, std::move(models[m]));
              bool feasible = true;
              // The first mode's plan may not fit at all: then the search, not the bound, says why.
              bound = std::min(bound, planner->lower_bound(limit, m == 0 ? &feasible : nullptr));
              if (!feasible) bound = 0;
              planners.emplace(order[m], std::move(planner));
              if (!feasible) break;
            } catch (const Error&) {
              if (m == 0) bound = 0;  // the search throws the same, with the reason
              break;
            }
          }
          sl.tables_bound_us = bound;
          c.lower_bound_us = bound;
          double kth;
          {
            std::lock_guard<std::mutex> l(best.mu);
            kth = best.kth(keep);
          }
          if (bound > kth) return;  // pruned: listed after the workers joined
        }
        const PlanFn reuse = [&](const PlanOptions& o) {
          auto at = planners.find(o.recompute);
          if (at == planners.end() || o.recompute_layers != -1) return plan_model(*graph, c.mesh, hw, o);
          const std::shared_ptr<Planner> planner = std::move(at->second);
          planners.erase(at);
          return planner->run();
        };
        PlanResult plan = plan_model_recompute(*graph, c.mesh, hw, quick, modes, false, reuse);
        c.plan_time_ms = plan.plan_time_ms;
        c.recompute = plan.cost_model->recompute();
        c.step_time_us = plan.eval.step_time_us;
        c.compute_us = plan.eval.compute_us;
        c.comm_us = plan.eval.comm_us;
        c.peak_memory_bytes = plan.eval.peak_memory_bytes;
        if (static_cast<double>(plan.eval.peak_memory_bytes) > plan.memory_limit_bytes) {
          c.rejected = over_limit(plan.eval.peak_memory_bytes, plan.memory_limit_bytes);
          return;
        }
        figures(c);
        sl.ranked.push_back(c);
        std::lock_guard<std::mutex> l(best.mu);
        best.times.insert(c.step_time_us);
        if (best.offer(c.step_time_us, i)) {
          best.time = c.step_time_us, best.slot = i, best.mesh = c.mesh, best.graph = graph;
          best.plan = std::move(plan);
          best.pipeline.reset();
        }
        return;
      }
      PipelinePlan pp = plan_pipeline(pipeline->build, model_layers, pipeline->global_batch, c.mesh,
                                      PipelineSpec{c.stages, c.micro_batches, 1}, hw, quick, modes);
      if (static_cast<double>(pp.peak_memory_bytes) > pp.stage.memory_limit_bytes) {
        c.rejected = over_limit(pp.peak_memory_bytes, pp.stage.memory_limit_bytes);
        return;
      }
      // Each schedule re-prices the same stages: interleaved with v chunks (v = 1: 1F1B), and ZB-H1.
      std::vector<std::pair<int, bool>> schedules;
      for (int v : pipeline->virtual_stages) schedules.push_back({v, false});
      if (pipeline->zero_bubble) schedules.push_back({1, true});
      for (auto [v, zb] : schedules) {
        std::optional<PipelinePlan> pv =
            zb ? with_schedule(pp, Schedule::kZeroBubbleH1, 1) : with_virtual_stages(pp, model_layers, v);
        if (!pv) continue;
        DeviceCandidate cv = c;
        cv.virtual_stages = v;
        cv.zero_bubble = zb;
        cv.plan_time_ms = pv->stage.plan_time_ms;
        cv.recompute = pv->stage.cost_model->recompute();
        cv.step_time_us = pv->step_time_us;
        cv.compute_us = pv->compute_us;
        cv.comm_us = pv->comm_us;
        cv.peak_memory_bytes = pv->peak_memory_bytes;
        figures(cv);
        sl.ranked.push_back(cv);
        std::lock_guard<std::mutex> l(best.mu);
        best.times.insert(cv.step_time_us);
        if (best.offer(cv.step_time_us, i)) {
          best.time = cv.step_time_us, best.slot = i, best.mesh = c.mesh, best.graph = pv->stage_graph;
          best.plan = pv->stage;
          best.pipeline = std::move(*pv);
          best.virtual_stages = v;
          best.zero_bubble = zb;
        }
      }
    } catch (const Error& e) {
      c.rejected = reason(e.what());
    }
  };
  // Candidates are independent (each its own graph, cost model and tables): planned on worker
  // threads, merged in enumeration order.
  // With keep > 0 the pipelines first: the fastest plans early give the meshes' bounds a low mark.
  std::vector<size_t> order;
  for (int pass = keep > 0 ? 0 : 1; pass < 2; ++pass)
    for (size_t i = 0; i < slots.size(); ++i)
      if (keep <= 0 || slots[i].pipeline == (pass == 0)) order.push_back(i);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < order.size(); i = next++) plan_slot(order[i]);
  };
  const unsigned workers = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  std::vector<std::thread> pool;
  for (unsigned w = 1; w < workers; ++w) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  // A mesh whose bound exceeds the final keep-th fastest is pruned whether or not its search was
  // stopped (the mark it met depended on the workers' order); the keep fastest bound below it.
  r.keep = keep;
  r.kth_step_time_us = best.kth(keep);
  for (Slot& sl : slots) {
    // The tables' bound is computed whenever the first is within the final mark (it was within the
    // mark of its time, which only falls): the same bound in every run.
    if (sl.bounded) sl.c.lower_bound_us = sl.cheap_bound_us > r.kth_step_time_us ? sl.cheap_bound_us : sl.tables_bound_us;
    if (sl.bounded && sl.c.lower_bound_us > r.kth_step_time_us) {
      sl.c.rejected.clear();
      r.pruned.push_back(std::move(sl.c));
      continue;
    }
    if (!sl.c.rejected.empty()) r.rejected.push_back(std::move(sl.c));
    for (DeviceCandidate& c : sl.ranked) r.ranked.push_back(std::move(c));
  }
  std::stable_sort(r.ranked.begin(), r.ranked.end(),
                   [](const DeviceCandidate& a, const DeviceCandidate& b) { return a.step_time_us < b.step_time_us; });
  // The fastest planned again without bound_modes when its bound skipped a mode: the same plan and
  // figures, and its note on recomputation gives what that mode's search needs, not the bound.
  bool bounded = false;
  for (const std::string& n : best.plan.notes) bounded |= n.find(kBoundNote) != std::string::npos;
  PlanOptions exact = options;
  exact.bound_modes = false;
  if (bounded && !slots[best.slot].pipeline) {
    best.plan = plan_model_recompute(*best.graph, best.mesh, hw, exact, modes);
  } else if (bounded) {
    const DeviceCandidate& c = slots[best.slot].c;
    const PipelinePlan pp = plan_pipeline(pipeline->build, model_layers, pipeline->global_batch, c.mesh,
                                          PipelineSpec{c.stages, c.micro_batches, 1}, hw, exact, modes);
    best.pipeline = best.zero_bubble ? with_schedule(pp, Schedule::kZeroBubbleH1, 1)
                                     : with_virtual_stages(pp, model_layers, best.virtual_stages);
    best.graph = best.pipeline->stage_graph;
    best.plan = best.pipeline->stage;
  }
  if (best.plan.full_baselines) {  // the chosen plan's baselines, every one priced
    const auto t1 = std::chrono::steady_clock::now();
    best.plan.baselines = best.plan.full_baselines();
    best.plan.full_baselines = nullptr;
    best.plan.compare_time_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  }
  r.best_mesh = best.mesh;
  r.best_graph = best.graph;
  r.best = std::move(best.plan);
  r.best_pipeline = std::move(best.pipeline);
  r.search_time_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (r.ranked.empty()) {
    std::vector<std::string> why;
    for (const DeviceCandidate& c : r.rejected) why.push_back(absl::StrCat(c.label(), ": ", c.rejected));
    DT_FAIL("dtensor plan --devices ", devices, ": no mesh is admitted and fits; ", absl::StrJoin(why, "; "));
  }
  return r;
}

std::string devices_table(const DevicesResult& r, int top) {
  std::string s = absl::StrCat(r.devices, " devices: ", r.ranked.size() + r.rejected.size() + r.pruned.size(), " meshes, ",
                               r.ranked.size(), " ranked, ", r.rejected.size(), " rejected",
                               r.keep > 0 ? absl::StrCat(", ", r.pruned.size(), " pruned") : "", "; model ",
                               r.model_flops / 1e12,
                               " TFLOP per step, ", r.tokens_per_step, " tokens per step; search ", r.search_time_ms,
                               " ms\n\n");
  char line[256];
  std::snprintf(line, sizeof line, "%-4s  %-28s %-10s %12s %12s %12s %14s %7s %10s\n", "rank", "mesh", "recompute",
                "step ms", "compute ms", "comm ms", "tokens/s", "MFU", "memory GB");
  s += line;
  const int n = std::min<int>(top, static_cast<int>(r.ranked.size()));
  for (int i = 0; i < n; ++i) {
    const DeviceCandidate& c = r.ranked[i];
    std::snprintf(line, sizeof line, "%-4d  %-28s %-10s %12.2f %12.2f %12.2f %14.0f %6.1f%% %10.2f\n", i + 1,
                  c.label().c_str(), recompute_name(c.recompute), c.step_time_us / 1e3, c.compute_us / 1e3, c.comm_us / 1e3, c.tokens_per_s,
                  100 * c.mfu, c.peak_memory_bytes / 1e9);
    s += line;
  }
  s += "\nwhy the others lost:\n";
  const DeviceCandidate& best = r.ranked.front();
  for (size_t i = n; i < r.ranked.size(); ++i) {
    const DeviceCandidate& c = r.ranked[i];
    std::snprintf(line, sizeof line, "  %-28s %.2fx the best's step time (compute %.1f ms vs %.1f, communication %.1f ms vs %.1f)\n",
                  c.label().c_str(), c.step_time_us / best.step_time_us, c.compute_us / 1e3, best.compute_us / 1e3,
                  c.comm_us / 1e3, best.comm_us / 1e3);
    s += line;
  }
  for (const DeviceCandidate& c : r.rejected) s += absl::StrCat("  ", c.label(), ": ", c.rejected, "\n");
  for (const DeviceCandidate& c : r.pruned) {
    std::snprintf(line, sizeof line,
                  "  %-28s pruned: a plan of it that fits takes at least %.1f ms (a lower bound), more than the %d fastest "
                  "(at most %.1f ms)\n",
                  c.label().c_str(), c.lower_bound_us / 1e3, r.keep, r.kth_step_time_us / 1e3);
    s += line;
  }
  if (r.ranked.size() <= static_cast<size_t>(n) && r.rejected.empty() && r.pruned.empty()) s += "  (none)\n";
  return s;
}

std::string devices_json(const DevicesResult& r) {
  nlohmann::json j;
  j["devices"] = r.devices;
  j["tokens_per_step"] = r.tokens_per_step;
  j["model_flops"] = r.model_flops;
  j["peak_flops"] = r.peak_flops;
  j["search_time_ms"] = r.search_time_ms;
  j["candidates"] = nlohmann::json::array();
  for (const DeviceCandidate& c : r.ranked)
    j["candidates"].push_back({{"mesh", c.label()}, {"stages", c.stages}, {"micro_batches", c.micro_batches},
                               {"recompute", recompute_name(c.recompute)},
                               {"step_time_us", c.step_time_us}, {"compute_us", c.compute_us},
                               {"comm_us", c.comm_us}, {"peak_memory_bytes", c.peak_memory_bytes},
                               {"tokens_per_s", c.tokens_per_s}, {"mfu", c.mfu}, {"plan_time_ms", c.plan_time_ms}});
  j["rejected"] = nlohmann::json::array();
  for (const DeviceCandidate& c : r.rejected) j["rejected"].push_back({{"mesh", c.label()}, {"reason", c.rejected}});
  j["pruned"] = nlohmann::json::array();
  for (const DeviceCandidate& c : r.pruned) j["pruned"].push_back({{"mesh", c.label()}, {"lower_bound_us", c.lower_bound_us}});
  j["keep"] = r.keep;
  if (r.keep > 0) j["kth_step_time_us"] = r.kth_step_time_us;
  return j.dump(2);
}

}  // namespace dtensor::planner

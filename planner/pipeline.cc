#include "planner/pipeline.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "dtensor/core/error.h"
#include "planner/devices.h"
#include "propagation/cost_model.h"

namespace dtensor::planner {

Schedule effective_schedule(const PipelineSpec& s) {
  if (s.virtual_stages > 1) return Schedule::kInterleaved;
  return s.schedule == Schedule::kInterleaved ? Schedule::k1F1B : s.schedule;
}

namespace {

// Per vertex: an op outside the repeated layers that depends on a repeated layer's output (the
// head's side; the others outside the layers are the embedding's).
std::vector<char> after_layers(const ModelGraph& g) {
  std::vector<char> after(g.num_vertices(), 0);
  for (int v : g.topological_order()) {
    const Node& nd = g.node(v);
    if (!takes_tensors(nd.kind) || nd.layer >= 0) continue;
    for (const TensorId& t : g.inputs(v)) after[v] |= g.node(t.node).layer >= 0 || after[t.node];
  }
  return after;
}

}  // namespace

ModelGraph stage_graph(const ModelGraph& whole, bool embedding, bool head) {
  const int n = whole.num_vertices();
  const std::vector<char> after = after_layers(whole);
  std::vector<char> keep(n, 0);
  for (int v = 0; v < n; ++v) {
    const Node& nd = whole.node(v);
    if (takes_tensors(nd.kind)) keep[v] = nd.layer >= 0 || (after[v] ? head : embedding);
  }
  // Leaves a kept op uses, and the optimizer vertices of kept parameters.
  for (int v = 0; v < n; ++v) {
    if (!keep[v] || !takes_tensors(whole.node(v).kind)) continue;
    for (const TensorId& t : whole.inputs(v))
      if (!takes_tensors(whole.node(t.node).kind)) keep[t.node] = 1;
  }
  for (int v = 0; v < n; ++v)
    if (whole.node(v).kind == NodeKind::kOptimizer) keep[v] = keep[whole.inputs(v).at(0).node];
  ModelGraph out;
  out.name = whole.name;
  const int layers = whole.num_layers();
  out.description = absl::StrCat(whole.description, "; pipeline stage: ", layers, layers == 1 ? " layer" : " layers",
                                 embedding ? ", the embedding" : "", head ? ", the head" : "");
  out.training = whole.training;
  out.optimizer = whole.optimizer;
  std::vector<int> map(n, -1);
  std::map<std::pair<int, int>, int> received;  // (cut producer, slot) -> stage input
  for (int v = 0; v < n; ++v) {
    if (!keep[v] || !takes_tensors(whole.node(v).kind)) continue;
    for (auto [it, end] = boost::in_edges(static_cast<Vertex>(v), whole.g); it != end; ++it) {
      const int t = static_cast<int>(boost::source(*it, whole.g));
      const Edge e = whole.g[*it];
      if (keep[t] || received.count({t, e.output})) continue;
      Node in;
      in.kind = NodeKind::kInput;
      in.op = "input";
      in.name = absl::StrCat("stage_input.", whole.node(t).name, e.output > 0 ? absl::StrCat(":", e.output) : "");
      in.block = "input";
      in.outputs = {whole.node(t).outputs.at(e.output)};
      received[{t, e.output}] = static_cast<int>(boost::add_vertex(std::move(in), out.g));
    }
  }
  for (int v = 0; v < n; ++v)
    if (keep[v]) map[v] = static_cast<int>(boost::add_vertex(whole.node(v), out.g));
  for (int v = 0; v < n; ++v) {
    if (!keep[v]) continue;
    for (auto [it, end] = boost::in_edges(static_cast<Vertex>(v), whole.g); it != end; ++it) {
      const int u = static_cast<int>(boost::source(*it, whole.g));
      const Edge e = whole.g[*it];
      if (keep[u]) {
        boost::add_edge(static_cast<Vertex>(map[u]), static_cast<Vertex>(map[v]), e, out.g);
      } else {
        boost::add_edge(static_cast<Vertex>(received.at({u, e.output})), static_cast<Vertex>(map[v]), Edge{0, e.input},
                        out.g);
      }
    }
  }
  out.topological_order();  // rejects cycles (none: a subgraph)
  return out;
}

double once_per_step_us(const PlanResult& r) {
  const ModelGraph& g = r.cost_model->graph();
  double t = 0;
  for (int v = 0; v < g.num_vertices(); ++v)
    if (g.node(v).kind == NodeKind::kOptimizer) t += r.eval.vertices[v].compute_us + r.eval.vertices[v].comm_us;
  return t;
}

namespace {

// Figures for one micro-batch: times (µs), static bytes, and activations as planned (`copies`
// micro-batches' worth, see Split).
struct Parts {
  double f = 0, b = 0, w = 0, compute = 0, once = 0, once_compute = 0;
  double static_bytes = 0, act_bytes = 0;
  void add(const Parts& o, double k) {
    f += k * o.f, b += k * o.b, w += k * o.w, compute += k * o.compute, once += k * o.once;
    once_compute += k * o.once_compute, static_bytes += k * o.static_bytes, act_bytes += k * o.act_bytes;
  }
};

// A plan split into what precedes the repeated layers (the embedding side), the layers, and what
// follows them (the head side), with T_F, T_B, T_W as pipeline.h says. A parameter, optimizer vertex
// or input counts where the ops that use it are (a parameter in a repeated layer, in its layer; one
// the embedding and the head both use, a tied embedding, on both sides: both end stages hold it).
struct Split {
  Parts pre, layers, post, both;  // both: used on both sides (a tied embedding)
  int num_layers = 0;
  double copies = 1;  // micro-batches in flight the plan holds activations for
};

Split split_plan(const PlanResult& r, int copies) {
  const CostModel& cm = *r.cost_model;
  const ModelGraph& g = cm.graph();
  const int n = g.num_vertices();
  Split s;
  s.num_layers = g.num_layers();
  s.copies = copies;
  const std::vector<char> after = after_layers(g);
  auto sides = [&](int v) -> Parts* {  // where vertex v's figures go
    const Node& nd = g.node(v);
    const int leaf = nd.kind == NodeKind::kOptimizer ? cm.inputs(v)[0].node : v;
    if (g.node(leaf).layer >= 0) return &s.layers;
    if (takes_tensors(nd.kind)) return after[v] ? &s.post : &s.pre;
    bool pre = false, post = false;
    for (auto& [c, e] : g.consumers(leaf)) {
      if (!takes_tensors(g.node(c).kind)) continue;
      (g.node(c).layer < 0 && after[c] ? post : pre) = true;
    }
    if (pre && post) return &s.both;
    return post ? &s.post : &s.pre;
  };
  for (int v = 0; v < n; ++v) {
    const Node& nd = g.node(v);
    const VertexReport& rep = r.eval.vertices[v];
    Parts x;  // the vertex's figures
    switch (nd.kind) {
      case NodeKind::kInput: x.act_bytes = rep.memory_bytes; break;
      case NodeKind::kParam: x.static_bytes = rep.memory_bytes; break;
      case NodeKind::kOptimizer:
        x.static_bytes = rep.memory_bytes;
        x.once = rep.compute_us + rep.comm_us;
        x.once_compute = rep.compute_us;
        break;
      case NodeKind::kOp:
      case NodeKind::kRedistribute: {
        const Choice& c = *r.plan[v];
        const double bwd = g.training ? c.bwd_us : 0;
        bool weighted = false;
        for (const TensorId& t : cm.inputs(v)) weighted |= g.node(t.node).kind == NodeKind::kParam;
        x.w = weighted ? std::min(c.fwd_us, bwd) : 0;  // the weight gradient's product
        x.f = c.fwd_us;
        x.b = bwd - x.w;
        x.compute = c.fwd_us + bwd;
        for (const CollectiveUse& u : rep.collectives) (u.phase == "forward" ? x.f : x.b) += u.time_us;
        x.act_bytes = rep.memory_bytes;
        break;
      }
      default: continue;
    }
    sides(v)->add(x, 1);
  }
  return s;
}

// Bytes of the tensor entering the first repeated layer (what one stage sends the next).
int64_t boundary_bytes(const ModelGraph& g) {
  for (int v = 0; v < g.num_vertices(); ++v) {
    if (g.node(v).layer != 0 || !takes_tensors(g.node(v).kind)) continue;
    for (const TensorId& t : g.inputs(v)) {
      const Node& u = g.node(t.node);
      if (u.layer < 0 && (takes_tensors(u.kind) || u.kind == NodeKind::kInput) && is_floating(g.meta(t).dtype)) {
        const TensorMeta& m = g.meta(t);
        return numel(m.shape) * static_cast<int64_t>(itemsize(m.dtype));
      }
    }
  }
  return 0;
}

int min_layers(int stage, int p, int v) { return stage == 0 || stage == p - 1 ? std::max(1, v - 1) : v; }

// A stage's figures: its ends' part `fixed` (activations for `fixed_copies` micro-batches) and n
// repeated layers priced as `layer`'s.
void price_stage(PipelineStage& st, const Parts& fixed, double fixed_copies, const Split& layer, int n) {
  Parts x = fixed;
  double act = fixed.act_bytes / fixed_copies;  // per micro-batch
  if (layer.num_layers > 0) {
    const double k = static_cast<double>(n) / layer.num_layers;
    x.add(layer.layers, k);
    act += k * layer.layers.act_bytes / layer.copies;
  }
  st.layers = n;
  st.t = {x.f, x.b, x.w};
  st.compute_us = x.compute;
  st.once_us = x.once;
  st.once_compute_us = x.once_compute;
  st.static_bytes = std::llround(x.static_bytes);
  st.activation_bytes = act;
}

// A stage priced from its own plan.
void price_own(PipelineStage& st, const Split& own) {
  Parts fixed = own.pre;
  fixed.add(own.post, 1);
  fixed.add(own.both, 1);
  price_stage(st, fixed, own.copies, own, own.num_layers);
}

// A partition's stages under a schedule: each stage's in-flight count and memory, the slowest
// stage, the longest update, the step.
struct Priced {
  ScheduleTimes st;
  int slow = 0, once = 0;
  int64_t peak = 0;
};

Priced price_schedule(std::vector<PipelineStage>& stages, Schedule s, int m, int v, double p2p_us) {
  const int p = static_cast<int>(stages.size());
  Priced r;
  for (int i = 0; i < p; ++i) {
    PipelineStage& st = stages[i];
    st.in_flight = micro_batches_in_flight(s, p, m, v, i);
    st.memory_bytes = st.static_bytes + std::llround(st.in_flight * st.activation_bytes);
    r.peak = std::max(r.peak, st.memory_bytes);
    if (st.t.total() > stages[r.slow].t.total()) r.slow = i;
    if (st.once_us > stages[r.once].once_us) r.once = i;
  }
  r.st = schedule_times(s, p, m, v, stages[r.slow].t, stages[r.once].once_us, p2p_us);
  return r;
}

// The step's figures from the stages (slowest, optimizer, schedule), and the uniform partition's.
void reprice(PipelinePlan& out) {
  const int m = out.spec.micro_batches, v = out.spec.virtual_stages;
  out.schedule = effective_schedule(out.spec);
  const Priced r = price_schedule(out.stages, out.schedule, m, v, out.t_p2p_us);
  const PipelineStage &s = out.stages[r.slow], &o = out.stages[r.once];
  out.peak_memory_bytes = r.peak;
  out.slowest = r.slow;
  out.layers_per_stage = s.layers;
  out.t = s.t;
  out.t_mb_us = s.t.total();
  out.t_once_us = o.once_us;
  out.step_time_us = r.st.step_us;
  out.bubble_us = r.st.bubble_us;
  out.sends_us = r.st.sends_us;
  out.bubble_fraction = r.st.bubble_fraction();
  out.compute_us = m * s.compute_us + o.once_compute_us;
  out.comm_us = m * (out.t_mb_us - s.compute_us) + (o.once_us - o.once_compute_us) + r.st.sends_us;
  if (s.plan >= 0 && s.plan < static_cast<int>(out.plans.size())) {
    out.stage_graph = out.plans[s.plan].graph;
    out.stage = out.plans[s.plan].plan;
  }
  out.uniform_step_time_us = 0;
  if (!out.uniform.empty()) {
    const Priced u = price_schedule(out.uniform, out.schedule, m, v, out.t_p2p_us);
    if (out.memory_limit_bytes <= 0 || static_cast<double>(u.peak) <= out.memory_limit_bytes)
      out.uniform_step_time_us = u.st.step_us;
  }
}

// The schedule's figures from a plan without stages: a uniform pipeline whose stages all take the
// plan's t_mb_us (the legacy with_virtual_stages form).
void reprice_uniform(PipelinePlan& out) {
  const int p = out.spec.stages, m = out.spec.micro_batches, v = out.spec.virtual_stages;
  out.schedule = effective_schedule(out.spec);
  const StageTimes t{out.t_mb_us, 0, 0};
  const ScheduleTimes st = schedule_times(out.schedule, p, m, v, t, out.t_once_us, out.t_p2p_us);
  out.step_time_us = st.step_us;
  out.bubble_us = st.bubble_us;
  out.sends_us = st.sends_us;
  // The fraction does not depend on the micro-batch time (a stage taking none still has it).
  out.bubble_fraction = schedule_times(out.schedule, p, m, v, StageTimes{1, 0, 0}, 0, 0).bubble_fraction();
}

std::string layers_str(const std::vector<int>& n) { return absl::StrJoin(n, ","); }

}  // namespace

PipelinePlan plan_pipeline(const StageBuilder& build, int model_layers, int64_t global_batch, const MeshSpec& inner,
                           const PipelineSpec& spec, const HardwareProfile& hw, const PlanOptions& options,
                           const std::vector<Recompute>& modes) {
  const int p = spec.stages, m = spec.micro_batches, v = spec.virtual_stages, L = model_layers;
  DT_CHECK(p >= 1 && p <= L, "pipeline: ", p, " stages for ", L, " layers; accepted: 1 to the number of layers");
  DT_CHECK(v >= 1 && static_cast<int64_t>(p) * v <= L, "pipeline: ", v, " virtual stages x ", p,
           " stages exceed the ", L, " layers");
  DT_CHECK(m >= 1 && global_batch % m == 0, "pipeline: ", m, " micro-batches for a global batch of ", global_batch,
           "; accepted: a divisor of the batch");
  DT_CHECK(!(spec.schedule == Schedule::kZeroBubbleH1 && v > 1), "pipeline: zb-h1 with ", v,
           " virtual stages; accepted: zb-h1 with 1 (interleaving is the interleaved schedule)");
  if (!spec.layers.empty()) {
    DT_CHECK(static_cast<int>(spec.layers.size()) == p, "pipeline: ", spec.layers.size(), " layer counts for ", p,
             " stages; accepted: one per stage");
    int sum = 0;
    for (int i = 0; i < p; ++i) {
      DT_CHECK(spec.layers[i] >= min_layers(i, p, v) && spec.layers[i] <= L, "pipeline: stage ", i, " with ",
               spec.layers[i], " layers; accepted: ", min_layers(i, p, v), " to ", L,
               v > 1 ? absl::StrCat(" (", v, " chunks a device)") : "");
      sum += spec.layers[i];
    }
    DT_CHECK(sum == L, "pipeline: the stages' layers (", layers_str(spec.layers), ") sum to ", sum, ", not the model's ",
             L);
  }
  PipelinePlan out;
  out.spec = spec;
  out.schedule = effective_schedule(spec);
  out.inner = inner;
  out.stages.resize(p);
  for (int i = 0; i < p; ++i) {
    out.stages[i].embedding = i == 0;
    out.stages[i].head = i == p - 1;
  }
  const int64_t batch = global_batch / m;
  std::vector<double> in_flight(p);
  for (int i = 0; i < p; ++i) in_flight[i] = micro_batches_in_flight(out.schedule, p, m, v, i);
  // Plans a stage graph (its ends, n layers) holding `copies` micro-batches' activations.
  auto plan_stage = [&](const std::string& what, bool embedding, bool head, int n, double copies) -> int {
    StagePlan sp;
    sp.what = what;
    sp.layers = n;
    sp.embedding = embedding;
    sp.head = head;
    sp.copies = static_cast<int>(std::ceil(copies - 1e-9));
    const ModelGraph whole = build(inner, n, batch);
    sp.graph = std::make_shared<ModelGraph>(embedding && head ? whole : stage_graph(whole, embedding, head));
    PlanOptions o = options;
    o.activation_copies = sp.copies;
    sp.plan = plan_model_recompute(*sp.graph, inner, hw, o, modes);
    out.plans.push_back(std::move(sp));
    return static_cast<int>(out.plans.size()) - 1;
  };
  auto fits = [](const StagePlan& sp) {
    return static_cast<double>(sp.plan.eval.peak_memory_bytes) <= sp.plan.memory_limit_bytes;
  };
  auto split_of = [&](int k) { return split_plan(out.plans[k].plan, out.plans[k].copies); };
  if (p == 1) {
    const int k = plan_stage(absl::StrCat("the whole model, ", L, " layers"), true, true, L, in_flight[0]);
    price_own(out.stages[0], split_of(k));
    out.stages[0].plan = k;
    out.stages[0].recompute = out.plans[k].plan.cost_model->recompute();
    out.memory_limit_bytes = out.plans[k].plan.memory_limit_bytes;
    out.spec.layers = {L};
    reprice(out);
    return out;
  }
  // The probe: the model with a stage's share of the layers, its embedding and its head, holding
  // stage 0's micro-batches: a repeated layer's figures and each end's, split by side. The middle
  // and last stages' received activation is priced as its share per rank (its layout is the plan's).
  // Given layers planned exactly need no probe.
  const bool given_exact = spec.exact && !spec.layers.empty();
  int probe = -1;
  for (int n = std::max((L + p - 1) / p, min_layers(1, p, v)); !given_exact;) {
    // Holding stage 0's micro-batches; exact, when no plan fits: fewer layers (a layer is priced as
    // well; memory then caps the stages), then one micro-batch (the stages' own plans then say
    // what fits). Otherwise the pipeline is rejected as a plan of a stage's share would be.
    const double copies = n > 0 ? in_flight[0] : 1;
    try {
      probe = plan_stage(absl::StrCat("the model with ", std::max(n, 1), n > 1 ? " layers" : " layer",
                                      ", the embedding and the head (probe)"), true, true, std::max(n, 1), copies);
      break;
    } catch (const Error&) {
      if (n == 0 || !spec.exact) throw;
      n /= 2;
    }
  }
  out.memory_limit_bytes = options.memory_limit_bytes > 0 ? options.memory_limit_bytes : hw.memory_GB * 1e9;
  const double limit = out.memory_limit_bytes;
  const int64_t boundary = boundary_bytes(probe >= 0 ? *out.plans[probe].graph : build(inner, 1, batch));
  const int64_t per_rank = (boundary + inner.size() - 1) / inner.size();
  out.t_p2p_us = collective_time_us(CommKind::kSendRecv, per_rank, 2, hw.inter_host);
  const Split layer = probe >= 0 ? split_of(probe) : Split{};
  Parts received;
  received.act_bytes = static_cast<double>(per_rank);  // one micro-batch's (price_stage divides by 1)
  // The linear model of each stage: its ends' part and a layer's, from the probe or (exact) its plan.
  struct Model {
    Parts fixed;
    double copies = 1;
    Split layer;
  };
  std::vector<Model> model(p);
  for (int i = 0; i < p; ++i) {
    Parts f;
    if (i == 0) {
      f = layer.pre;
      f.add(layer.both, 1);
      f.act_bytes /= layer.copies;
    } else {
      f = received;
      if (i == p - 1) {
        Parts head = layer.post;
        head.add(layer.both, 1);
        head.act_bytes /= layer.copies;
        f.add(head, 1);
      }
    }
    model[i] = {f, 1, layer};
  }
  auto stage_models = [&](const std::vector<int>& cap) {
    std::vector<StageModel> s(p);
    for (int i = 0; i < p; ++i) {
      PipelineStage a, b;
      price_stage(a, model[i].fixed, model[i].copies, model[i].layer, 0);
      price_stage(b, model[i].fixed, model[i].copies, model[i].layer, 1);
      s[i].fixed_us = a.t.total();
      s[i].layer_us = b.t.total() - a.t.total();
      s[i].fixed_once_us = a.once_us;
      s[i].layer_once_us = b.once_us - a.once_us;
      s[i].fixed_bytes = a.static_bytes + in_flight[i] * a.activation_bytes;
      s[i].layer_bytes = (b.static_bytes - a.static_bytes) + in_flight[i] * (b.activation_bytes - a.activation_bytes);
      s[i].min_layers = min_layers(i, p, v);
      s[i].max_layers = std::min(L, cap[i]);
    }
    return s;
  };
  auto price_models = [&](std::vector<PipelineStage>& stages, const std::vector<int>& n) {
    for (int i = 0; i < p; ++i) {
      price_stage(stages[i], model[i].fixed, model[i].copies, model[i].layer, n[i]);
      stages[i].plan = probe;  // the plan its repeated layers are priced from: what the report shows
      stages[i].recompute = out.plans[probe].plan.cost_model->recompute();
    }
  };
  // The uniform partition, for comparison, priced from the probe.
  if (probe >= 0 && spec.layers.empty()) {
    std::vector<int> u(p, L / p);
    for (int i = 0; i < L % p; ++i) ++u[i];
    bool ok = true;
    for (int i = 0; i < p; ++i) ok &= u[i] >= min_layers(i, p, v);
    if (ok) {
      out.uniform = out.stages;
      price_models(out.uniform, u);
    }
  }
  std::vector<int> cap(p, L);
  std::vector<int> n = spec.layers.empty() ? balance_layers(stage_models(cap), L, limit) : spec.layers;
  if (!spec.exact) {
    price_models(out.stages, n);
    out.spec.layers = n;
    reprice(out);
    if (static_cast<double>(out.peak_memory_bytes) > limit) {
      std::vector<std::string> over;
      for (int i = 0; i < p; ++i)
        if (static_cast<double>(out.stages[i].memory_bytes) > limit)
          over.push_back(absl::StrFormat("stage %d (%d layers, %.3g micro-batches in flight) needs %.2f GB", i,
                                         out.stages[i].layers, out.stages[i].in_flight,
                                         out.stages[i].memory_bytes / 1e9));
      DT_FAIL("pipeline: the stages' layers ", layers_str(n), " do not fit the memory limit of ", limit / 1e9,
              " GB: ", absl::StrJoin(over, "; "));
    }
    out.notes.push_back(absl::StrCat("stages priced from one plan, ", out.plans[probe].what,
                                     ": a repeated layer's figures, the embedding's and the head's"));
    return out;
  }
  // Exact: each distinct stage of the partition planned on its own graph; the stages' own plans
  // then price them in the balance, until the partition repeats; then, for each group of stages
  // sharing a plan, the partition with a layer less on the stage holding the most micro-batches
  // (the group's plan holds that stage's: a lighter group may plan faster). The fastest partition
  // planned is kept. A stage whose plan does not fit caps its layers below the count tried.
  std::map<std::tuple<bool, bool, int, int>, int> planned;  // (embedding, head, layers, copies) -> plan
  std::optional<PipelinePlan> best;
  std::vector<std::vector<int>> seen;
  std::string last_error;
  auto same_group = [&](const std::vector<int>& n, int i, int j) {
    return (i == 0) == (j == 0) && (i == p - 1) == (j == p - 1) && n[i] == n[j];
  };
  auto try_partition = [&](const std::vector<int>& n) {
    seen.push_back(n);
    std::vector<int> k(p, -1);
    std::vector<std::string> over;
    for (int i = 0; i < p && over.empty(); ++i) {
      const bool e = i == 0, h = i == p - 1;
      double copies = 0;  // the most of the stages this plan serves
      for (int j = 0; j < p; ++j)
        if (same_group(n, i, j)) copies = std::max(copies, in_flight[j]);
      const auto key = std::make_tuple(e, h, n[i], static_cast<int>(std::ceil(copies - 1e-9)));
      const std::string what = absl::StrCat(e ? "first stage" : h ? "last stage" : "middle stages", ", ", n[i],
                                            n[i] == 1 ? " layer" : " layers");
      auto at = planned.find(key);
      if (at == planned.end()) {
        try {
          at = planned.emplace(key, plan_stage(what, e, h, n[i], copies)).first;
        } catch (const Error& x) {
          last_error = x.what();
          over.push_back(absl::StrCat(what, ": ", x.what()));
        }
      }
      if (at != planned.end() && !fits(out.plans[at->second]))
        over.push_back(absl::StrFormat("%s: %.2f GB", what, out.plans[at->second].plan.eval.peak_memory_bytes / 1e9));
      if (!over.empty()) {
        for (int j = 0; j < p; ++j)
          if (same_group(n, i, j)) cap[j] = n[i] - 1;
      } else {
        k[i] = at->second;
      }
    }
    if (!over.empty()) {
      DT_CHECK(spec.layers.empty(), "pipeline: the stages' layers ", layers_str(n), " do not fit: ",
               absl::StrJoin(over, "; "));
      out.notes.push_back(absl::StrCat("partition ", layers_str(n), " did not fit (", absl::StrJoin(over, "; "),
                                       "): chosen again"));
      return;
    }
    PipelinePlan cand = out;
    for (int i = 0; i < p; ++i) {
      const Split own = split_of(k[i]);
      price_own(cand.stages[i], own);
      cand.stages[i].plan = k[i];
      cand.stages[i].recompute = out.plans[k[i]].plan.cost_model->recompute();
      // The stage's own plan prices it in the next balance.
      model[i].fixed = own.pre;
      model[i].fixed.add(own.post, 1);
      model[i].fixed.add(own.both, 1);
      model[i].copies = own.copies;
      model[i].layer = own;
    }
    cand.spec.layers = n;
    reprice(cand);
    if (!best || cand.step_time_us < best->step_time_us) best = std::move(cand);
  };
  // The partition balance_layers gives under `bound` (nullopt: none, or one already planned).
  auto next = [&](const std::vector<int>& bound) -> std::optional<std::vector<int>> {
    try {
      std::vector<int> n = balance_layers(stage_models(bound), L, limit);
      if (std::find(seen.begin(), seen.end(), n) == seen.end()) return n;
    } catch (const Error&) {
      if (!best) throw;
    }
    return std::nullopt;
  };
  try_partition(n);
  for (int round = 0; spec.layers.empty() && round < 2 * p + 4; ++round) {
    std::optional<std::vector<int>> again = next(cap);
    if (!again) break;
    try_partition(*again);
  }
  if (spec.layers.empty() && best) {
    const std::vector<int> chosen = best->spec.layers;
    for (int i = 0; i < p; ++i) {
      int most = i;  // the stage of i's group holding the most micro-batches
      for (int j = 0; j < p; ++j)
        if (same_group(chosen, i, j) && in_flight[j] > in_flight[most]) most = j;
      if (most != i || chosen[i] <= min_layers(i, p, v)) continue;
      std::vector<int> bound = cap;
      bound[i] = std::min(bound[i], chosen[i] - 1);
      if (std::optional<std::vector<int>> lighter = next(bound)) try_partition(*lighter);
    }
  }
  if (!best)
    DT_FAIL("pipeline: no partition of ", L, " layers over ", p, " stages whose stage plans fit was found",
            last_error.empty() ? "" : absl::StrCat(" (last: ", last_error, ")"));
  best->plans = out.plans;
  best->notes = out.notes;
  // The plans' indices are the same in `out` (plans only grow); the reported plan is the slowest's.
  reprice(*best);
  return *best;
}

std::optional<PipelinePlan> with_schedule(const PipelinePlan& plan, Schedule schedule, int virtual_stages) {
  const int p = plan.spec.stages, v = virtual_stages;
  if (plan.stages.empty() || v < 1 || (schedule == Schedule::kZeroBubbleH1 && v > 1)) return std::nullopt;
  PipelinePlan out = plan;
  out.spec.virtual_stages = v;
  out.spec.schedule = v > 1 ? Schedule::kInterleaved : schedule;
  for (int i = 0; i < p; ++i)
    if (out.stages[i].layers < min_layers(i, p, v)) return std::nullopt;
  reprice(out);
  if (out.memory_limit_bytes > 0 && static_cast<double>(out.peak_memory_bytes) > out.memory_limit_bytes)
    return std::nullopt;
  return out;
}

std::optional<PipelinePlan> with_virtual_stages(const PipelinePlan& plan, int model_layers, int virtual_stages) {
  const int p = plan.spec.stages, v = virtual_stages;
  if (v < 1 || static_cast<int64_t>(p) * v > model_layers) return std::nullopt;
  if (!plan.stages.empty()) return with_schedule(plan, Schedule::kInterleaved, v);
  if ((model_layers + p * v - 1) / (p * v) * v != plan.layers_per_stage) return std::nullopt;
  PipelinePlan out = plan;
  out.spec.virtual_stages = v;
  reprice_uniform(out);
  return out;
}

}  // namespace dtensor::planner

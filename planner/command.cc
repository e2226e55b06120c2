#include "planner/command.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "dispatch/dispatch.h"
#include "dtensor/core/file_io.h"
#include "planner/cluster_plan.h"
#include "planner/devices.h"
#include "planner/pipeline.h"
#include "planner/graph_json.h"
#include "planner/models/zoo.h"
#include "planner/onnx_import.h"
#include "planner/report.h"
#include "nlohmann/json.hpp"

namespace dtensor::planner {
namespace {

// A graph file larger than this is not a model description (Llama-70B's graph is a few MB).
constexpr int64_t kMaxGraphFileBytes = int64_t{256} << 20;


void list_models(std::ostream& out) {
  out << absl::StrFormat("%-14s %-12s %-9s %-11s %s\n", "model", "parameters", "layers", "batch/rank", "description");
  for (const auto& m : models::zoo()) {
    models::ModelOptions o;
    o.batch = 1;
    o.seq = m.default_seq > 0 ? 16 : 1;
    o.training = false;
    ModelGraph g = m.build(o);
    out << absl::StrFormat("%-14s %-12s %-9d %-11d %s%s\n", m.name,
                           absl::StrFormat("%.2fB", static_cast<double>(g.num_parameters()) / 1e9), g.num_layers(),
                           m.micro_batch, m.description,
                           m.default_seq > 0 ? absl::StrFormat(", seq %d", m.default_seq) : "");
    if (!m.aliases.empty()) out << absl::StrFormat("%-14s aliases: %s\n", "", absl::StrJoin(m.aliases, ", "));
  }
  out << "Default batch: batch/rank x the mesh dims not named tp, cp, sp, ep or pp. Or --graph FILE.json.\n";
}

void list_hardware(std::ostream& out) {
  for (const std::string& n : hardware_profile_names()) {
    const HardwareProfile& h = hardware_profile(n);
    auto bf = h.peak_tflops.find("bfloat16");
    out << absl::StrFormat("%-16s %s\n%-16s %d ranks/host; intra-host %.0f GB/s %.1f us + %.1f us/step; inter-host %.0f "
                           "GB/s %.1f us + %.1f us/step; %.0f TFLOP/s bf16; HBM %.0f GB/s, %.0f GB\n",
                           n, h.description, "", h.ranks_per_host, h.intra_host.bandwidth_GBps,
                           h.intra_host.base_latency_us, h.intra_host.latency_us, h.inter_host.bandwidth_GBps,
                           h.inter_host.base_latency_us, h.inter_host.latency_us,
                           bf == h.peak_tflops.end() ? 0.0 : bf->second, h.memory_bandwidth_GBps, h.memory_GB);
  }
}

// The model graph of --graph or --onnx (notes: what the ONNX import planned opaque).
ModelGraph load_graph_file(const CommandOptions& o, std::vector<std::string>* notes) {
  ModelGraph g;
  if (!o.onnx_file.empty()) {
    OnnxImportOptions io;
    io.training = !o.inference;
    io.optimizer = o.optimizer;
    for (const std::string& d : o.onnx_dims) parse_onnx_dim(d, &io.dims);
    try {
      std::string base = o.onnx_file.substr(o.onnx_file.find_last_of('/') + 1);
      OnnxImport imp = import_onnx(read_file(o.onnx_file, kMaxGraphFileBytes), base, io);
      g = std::move(imp.graph);
      if (!imp.opaque.empty())
        notes->push_back(absl::StrCat("ONNX import: ", imp.opaque.size(),
                                      imp.opaque.size() == 1 ? " op" : " ops", " planned opaque (replicated, priced as copies): ",
                                      absl::StrJoin(imp.opaque, "; ")));
    } catch (const Error& e) {
      DT_FAIL("dtensor plan --onnx ", o.onnx_file, ": ", e.what());
    }
  } else {
    try {
      g = graph_from_json(read_file(o.graph_file, kMaxGraphFileBytes));
    } catch (const Error& e) {
      DT_FAIL("dtensor plan --graph ", o.graph_file, ": ", e.what());
    }
  }
  return g;
}

// A pipeline plan's schedule figures and its stages, then the slowest stage's plan follows.
std::string pipeline_summary(const PipelinePlan& p) {
  const int v = p.spec.virtual_stages;
  std::string s = absl::StrFormat(
      "pipeline: %d stages, %d micro-batches, schedule %s%s: step %.2f ms = %d x %.2f ms (the slowest stage's "
      "micro-batch: forward %.2f + input gradients %.2f + weight gradients %.2f) + %.2f ms bubble (%.1f%%) + %.2f ms "
      "optimizer + %.2f ms stage-to-stage sends\n",
      p.spec.stages, p.spec.micro_batches, schedule_name(p.schedule),
      v > 1 ? absl::StrFormat(" (%d virtual stages)", v) : "", p.step_time_us / 1e3, p.spec.micro_batches,
      p.t_mb_us / 1e3, p.t.f_us / 1e3, p.t.b_us / 1e3, p.t.w_us / 1e3, p.bubble_us / 1e3, 100 * p.bubble_fraction,
      p.t_once_us / 1e3, p.sends_us / 1e3);
  absl::StrAppend(&s, absl::StrFormat("  %-6s %-7s %-15s %-14s %-9s %-9s %-9s %-13s %-10s %-10s %s\n", "stage", "layers",
                                      "holds", "micro-batch ms", "F ms", "B ms", "W ms", "optimizer ms", "in flight",
                                      "memory GB", "recompute"));
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const PipelineStage& st = p.stages[i];
    const std::string holds = st.embedding && st.head ? "embedding+head" : st.embedding ? "embedding" : st.head ? "head" : "-";
    absl::StrAppend(&s, absl::StrFormat("  %-6s %-7d %-15s %-14.2f %-9.2f %-9.2f %-9.2f %-13.2f %-10.3g %-10.2f %s\n",
                                        absl::StrCat(i, static_cast<int>(i) == p.slowest ? "*" : ""), st.layers, holds,
                                        st.t.total() / 1e3, st.t.f_us / 1e3, st.t.b_us / 1e3, st.t.w_us / 1e3,
                                        st.once_us / 1e3, st.in_flight, st.memory_bytes / 1e9,
                                        recompute_name(st.recompute)));
  }
  std::vector<int> uniform;
  for (const PipelineStage& st : p.uniform) uniform.push_back(st.layers);
  absl::StrAppend(&s, "  (* the slowest) partition ", absl::StrJoin(p.spec.layers, ","),
                  p.uniform.empty() ? " (given)"
                  : p.uniform_step_time_us > 0
                      ? absl::StrFormat(", balanced; equal layers (%s) would take %.2f ms (priced from the probe)",
                                        absl::StrJoin(uniform, ","), p.uniform_step_time_us / 1e3)
                      : absl::StrFormat(", balanced; equal layers (%s) would not fit (priced from the probe)",
                                        absl::StrJoin(uniform, ",")),
                  "\n");
  for (const std::string& n : p.notes) absl::StrAppend(&s, "  note: ", n, "\n");
  const PipelineStage& slow = p.stages.at(p.slowest);
  absl::StrAppend(&s, "The slowest stage's plan for one micro-batch (stage ", p.slowest, ": ", slow.layers,
                  slow.layers == 1 ? " layer" : " layers", slow.embedding ? ", the embedding" : "",
                  slow.head ? ", the head" : "", p.spec.exact ? "" : "; priced from the probe of its repeated layers",
                  "):\n");
  return s;
}

// The report to --output (written atomically) or to `out`.
void emit(const CommandOptions& o, const std::string& report, std::ostream& out, std::ostream& err) {
  if (o.output.empty()) {
    out << report;
  } else {
    write_file_atomic(o.output, report);
    err << "wrote " << o.output << "\n";
  }
}

// The search's options from the command line: the memory limit (checked) and the baselines.
PlanOptions plan_options(const CommandOptions& o) {
  DT_CHECK(o.memory_limit_gb == 0 || (std::isfinite(o.memory_limit_gb) && o.memory_limit_gb > 0),
           "dtensor plan: --memory-limit ", o.memory_limit_gb, " GB is not accepted; give a positive number of GB");
  PlanOptions po;
  po.memory_limit_bytes = o.memory_limit_gb * 1e9;
  po.compare = o.compare;
  return po;
}

// A zoo model with `layers` repeated layers and global batch `batch` (the other options as given).
StageBuilder stage_builder(const std::string& name, const models::ModelOptions& mo) {
  return [name, mo](const MeshSpec& mesh, int layers, int64_t batch) {
    models::ModelOptions so = mo;
    so.layers = layers;
    so.batch = batch;
    return models::build_model(name, so, mesh);
  };
}

std::vector<Recompute> recompute_modes(const std::string& name, const std::string& fallback);

// A pipeline plan's schedule figures and stages as JSON (its slowest stage's plan is report_json's).
nlohmann::json pipeline_json(const PipelinePlan& p) {
  nlohmann::json stages = nlohmann::json::array(), uniform = nlohmann::json::array();
  for (const PipelineStage& st : p.stages)
    stages.push_back({{"layers", st.layers}, {"embedding", st.embedding}, {"head", st.head},
                      {"micro_batch_us", st.t.total()}, {"forward_us", st.t.f_us}, {"backward_input_us", st.t.b_us},
                      {"backward_weight_us", st.t.w_us}, {"optimizer_us", st.once_us}, {"in_flight", st.in_flight},
                      {"peak_memory_bytes", st.memory_bytes}, {"recompute", recompute_name(st.recompute)}});
  for (const PipelineStage& st : p.uniform) uniform.push_back(st.layers);
  return {{"stages", p.spec.stages}, {"micro_batches", p.spec.micro_batches}, {"virtual_stages", p.spec.virtual_stages},
          {"schedule", schedule_name(p.schedule)}, {"layers", p.spec.layers}, {"slowest_stage", p.slowest},
          {"layers_per_stage", p.layers_per_stage}, {"step_time_us", p.step_time_us}, {"micro_batch_us", p.t_mb_us},
          {"forward_us", p.t.f_us}, {"backward_input_us", p.t.b_us}, {"backward_weight_us", p.t.w_us},
          {"optimizer_us", p.t_once_us}, {"send_us", p.t_p2p_us}, {"bubble_us", p.bubble_us},
          {"bubble_fraction", p.bubble_fraction}, {"peak_memory_bytes", p.peak_memory_bytes},
          {"per_stage", stages}, {"uniform_layers", uniform}, {"uniform_step_time_us", p.uniform_step_time_us},
          {"exact", p.spec.exact}};
}

// `--mesh pp=P,...`: the layers in P pipeline stages over the rest of the mesh (planner/pipeline.h).
void plan_pipeline_command(const CommandOptions& o, const MeshSpec& mesh, std::ostream& out, std::ostream& err) {
  DT_CHECK(!o.model.empty(), "dtensor plan: a pp mesh dim (pipeline stages) needs a zoo model (--model): its layer "
           "count is what the stages split");
  DT_CHECK(o.cluster.empty() && o.dump_graph.empty() && o.dot.empty() && o.svg.empty(),
           "dtensor plan: with a pp mesh dim, --cluster, --dump-graph, --dot and --svg are not accepted");
  DT_CHECK(o.micro_batches >= 0 && o.virtual_stages >= 1, "dtensor plan: --micro-batches ", o.micro_batches,
           " / --virtual-stages ", o.virtual_stages, "; accepted: at least 1 each");
  const int pp = mesh.index_of("pp");
  MeshSpec inner;
  for (int i = 0; i < mesh.ndim(); ++i)
    if (i != pp) inner.shape.push_back(mesh.shape[i]), inner.names.push_back(mesh.names[i]);
  if (inner.shape.empty()) inner = MeshSpec::parse("dp=1");
  const int stages = static_cast<int>(mesh.shape[pp]);
  const int m = o.micro_batches > 0 ? o.micro_batches : 4 * stages;
  const models::ModelEntry& entry = models::find_model(o.model);
  int64_t batch = o.batch;
  if (batch == 0) batch = entry.micro_batch * models::data_parallel_size(inner) * m;
  models::ModelOptions mo;
  mo.seq = o.seq;
  mo.layers = o.layers;
  mo.training = !o.inference;
  mo.optimizer = o.optimizer;
  DT_CHECK(mo.training, "dtensor plan: a pp mesh dim plans a training pipeline; --inference is not accepted with it");
  DT_CHECK(batch % m == 0, "pipeline: ", m, " micro-batches for a global batch of ", batch,
           "; accepted: a divisor of the batch");
  // One micro-batch's model: its layers, and the step's FLOPs (m times its own: the whole batch's
  // graph may hold tensors beyond the engine's size limit, e.g. attention scores at long sequences).
  mo.batch = batch / m;
  const ModelGraph whole = models::build_model(o.model, mo, inner);
  mo.batch = batch;
  const HardwareProfile& hw = hardware_profile(o.hardware);
  // The schedules to plan (--schedule; by default 1F1B, ZB-H1 and interleaved 1F1B with
  // --virtual-stages chunks, 2 when not given), each partition balanced and every distinct stage
  // planned; the fastest that fits is reported. ZB-H1 keeps 1F1B's in-flight counts, so it re-prices
  // 1F1B's stages; interleaving holds more and is planned on its own.
  const bool chunks_given = o.virtual_stages > 1;
  std::vector<std::pair<Schedule, int>> schedules;
  if (o.schedule.empty()) {
    schedules = {{Schedule::k1F1B, 1}, {Schedule::kZeroBubbleH1, 1},
                 {Schedule::kInterleaved, chunks_given ? o.virtual_stages : 2}};
  } else {
    const Schedule s = schedule_from_name(o.schedule);
    DT_CHECK(s == Schedule::kInterleaved || !chunks_given, "dtensor plan: --virtual-stages ", o.virtual_stages,
             " with --schedule ", o.schedule, "; accepted: --virtual-stages with --schedule interleaved");
    schedules = {{s, s == Schedule::kInterleaved ? (chunks_given ? o.virtual_stages : 2) : 1}};
  }
  const int layers = whole.num_layers();
  const std::vector<Recompute> modes = recompute_modes(o.recompute, "none");
  std::optional<PipelinePlan> one_f_one_b, best;
  std::vector<std::string> tried;
  std::string first_error;
  for (auto [s, v] : schedules) {
    std::optional<PipelinePlan> p;
    try {
      if (s != Schedule::kInterleaved && one_f_one_b) {
        p = with_schedule(*one_f_one_b, s, 1);
      } else {
        PipelineSpec spec{stages, m, s == Schedule::kInterleaved ? v : 1};
        spec.exact = true;
        // Interleaving needs v chunks per device: too few layers, and only the others are planned.
        if (s == Schedule::kInterleaved && schedules.size() > 1 && static_cast<int64_t>(stages) * v > layers) {
          tried.push_back(absl::StrCat("interleaved (", v, " virtual stages): ", stages, " x ", v,
                                       " chunks exceed the ", layers, " layers"));
          continue;
        }
        PipelinePlan planned = plan_pipeline(stage_builder(o.model, mo), layers, batch, inner, spec, hw,
                                             plan_options(o), modes);
        if (s == Schedule::k1F1B || s == Schedule::kZeroBubbleH1) one_f_one_b = planned;
        p = s == Schedule::kZeroBubbleH1 ? with_schedule(planned, s, 1) : std::optional<PipelinePlan>(planned);
      }
    } catch (const Error& e) {
      if (schedules.size() == 1) throw;
      if (first_error.empty()) first_error = e.what();
      tried.push_back(absl::StrCat(schedule_name(s), s == Schedule::kInterleaved ? absl::StrCat(" (", v, " virtual stages)") : "",
                                   ": ", e.what()));
      continue;
    }
    if (!p) continue;
    tried.push_back(absl::StrFormat("%s%s: %.2f ms, %.2f GB", schedule_name(s),
                                    s == Schedule::kInterleaved ? absl::StrCat(" (", v, " virtual stages)") : "",
                                    p->step_time_us / 1e3, p->peak_memory_bytes / 1e9));
    if (!best || p->step_time_us < best->step_time_us) best = std::move(p);
  }
  if (!best) DT_FAIL(first_error, " (schedules tried: ", absl::StrJoin(tried, "; "), ")");
  PipelinePlan p = std::move(*best);
  if (schedules.size() > 1)
    p.notes.push_back(absl::StrCat("schedules planned (the fastest that fits is reported): ", absl::StrJoin(tried, "; ")));
  const double flops = m * model_flops(whole);
  const double peak = hw.peak_flops_per_us(contraction_dtype(whole)) * 1e6;
  const double mfu = flops / (p.step_time_us * 1e-6 * mesh.size() * peak);
  std::string report;
  if (o.format == "json") {
    nlohmann::json j = nlohmann::json::parse(report_json(*p.stage.cost_model, p.stage, ReportOptions{o.ops, o.ops}));
    j["pipeline"] = pipeline_json(p);
    j["pipeline"]["notes"] = p.notes;
    j["pipeline"]["model_flops"] = flops;
    j["pipeline"]["mfu"] = mfu;
    j["pipeline"]["batch"] = batch;
    report = j.dump(2) + "\n";
  } else {
    report = absl::StrCat("dtensor plan: ", o.model, " on ", mesh.str(), " (", mesh.size(), " devices), batch ", batch,
                          "; MFU ", absl::StrFormat("%.1f%%", 100 * mfu), " (", absl::StrFormat("%.0f", flops / 1e12),
                          " TFLOP a step)\n", pipeline_summary(p), report_table(*p.stage.cost_model, p.stage, ReportOptions{o.ops}));
  }
  emit(o, report, out, err);
}

// The recomputation modes --recompute names (auto: all three); `fallback` when not given.
std::vector<Recompute> recompute_modes(const std::string& name, const std::string& fallback) {
  const std::string n = name.empty() ? fallback : name;
  if (n == "auto") return {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  try {
    return {recompute_from_name(n)};
  } catch (const Error&) {
    DT_FAIL("dtensor plan: --recompute '", n, "' is not accepted; accepted: none, selective, full, auto");
  }
}

// `--devices N`: every mesh of N devices planned and ranked (planner/devices.h), the same global
// batch for all (--batch, else the model's batch per rank x N), then the fastest one's plan.
void plan_devices_command(const CommandOptions& o, std::ostream& out, std::ostream& err) {
  DT_CHECK(o.mesh.empty(), "dtensor plan: give --mesh or --devices, not both");
  DT_CHECK(o.cluster.empty(), "dtensor plan --devices: accepted with --hardware; a mixed --cluster is planned on a "
           "mesh (--mesh)");
  DT_CHECK(o.dump_graph.empty() && o.dot.empty() && o.svg.empty(),
           "dtensor plan --devices: --dump-graph, --dot and --svg need a mesh (--mesh)");
  DT_CHECK(o.top >= 1, "dtensor plan --top ", o.top, ": accepted: at least 1");
  const HardwareProfile& hw = hardware_profile(o.hardware);
  PlanOptions po = plan_options(o);
  po.bound_modes = true;  // the same ranking, with fewer searches (planner/search.h)
  std::function<ModelGraph(const MeshSpec&)> build;
  StageBuilder stage_build;
  int64_t global_batch = 0;
  int64_t tokens = 0;
  std::vector<std::string> notes;
  if (!o.model.empty()) {
    const models::ModelEntry& entry = models::find_model(o.model);
    models::ModelOptions mo;
    int64_t batch = o.batch;
    DT_CHECK(batch > 0 || !__builtin_mul_overflow(entry.micro_batch, o.devices, &batch),
             "dtensor plan --devices ", o.devices, ": the default batch overflows; give --batch");
    mo.batch = batch;
    mo.seq = o.seq;
    mo.layers = o.layers;
    mo.training = !o.inference;
    mo.optimizer = o.optimizer;
    const int64_t seq = o.seq ? o.seq : entry.default_seq;
    DT_CHECK(!__builtin_mul_overflow(batch, std::max<int64_t>(seq, 1), &tokens), "dtensor plan: batch ", batch,
             " x seq ", seq, " overflows");
    const std::string name = o.model;
    build = [name, mo](const MeshSpec& mesh) { return models::build_model(name, mo, mesh); };
    stage_build = stage_builder(name, mo);
    global_batch = batch;
  } else {
    auto g = std::make_shared<ModelGraph>(load_graph_file(o, &notes));
    for (int v = 0; v < g->num_vertices() && tokens == 0; ++v)  // samples: the first input's dim 0
      if (g->node(v).kind == NodeKind::kInput && !g->node(v).outputs.at(0).shape.empty())
        tokens = g->node(v).outputs[0].shape[0];
    build = [g](const MeshSpec&) { return *g; };
  }
  PipelineSearch ps{stage_build, 0, global_batch};  // the layers: the whole graph's
  // Branch and bound: the --top fastest exactly, meshes that cannot be among them pruned.
  // The batch is given (or the graph read from a file): every mesh's graph is the same, built once.
  DevicesResult r = plan_devices(o.devices, build, hw, po, tokens, recompute_modes(o.recompute, "auto"),
                                 stage_build && o.pipeline ? &ps : nullptr, o.top, /*one_graph=*/true);
  r.best.notes.insert(r.best.notes.end(), notes.begin(), notes.end());
  std::string report;
  if (o.format == "json") {
    nlohmann::json j = nlohmann::json::parse(devices_json(r));
    j["best"] = nlohmann::json::parse(report_json(*r.best.cost_model, r.best, ReportOptions{o.ops, o.ops}));
    if (r.best_pipeline) j["best"]["pipeline"] = pipeline_json(*r.best_pipeline);  // "best" is then its stage's plan
    report = j.dump(2) + "\n";
  } else {
    report = absl::StrCat("dtensor plan --devices ", o.devices, " on ", hw.name, " (", hw.ranks_per_host,
                          " per host): ", devices_table(r, o.top), "\nthe fastest, ", r.ranked.front().label(), ":\n",
                          r.best_pipeline ? pipeline_summary(*r.best_pipeline) : "",
                          report_table(*r.best.cost_model, r.best, ReportOptions{o.ops}));
  }
  emit(o, report, out, err);
}

}  // namespace

void run_plan_command(const CommandOptions& o, std::ostream& out, std::ostream& err) {
  init_ops();  // every family, the planned one included
  if (o.list_models || o.list_hardware || o.list_ops) {
    if (o.list_models) list_models(out);
    if (o.list_hardware) list_hardware(out);
    if (o.list_ops) {
      for (const std::string& n : Registry::get().names()) {
        const OpDef& d = Registry::get().find(n);
        out << d.schema.text << (d.rules ? "" : "   [no sharding rules: replicated]") << "\n";
      }
    }
    return;
  }
  DT_CHECK(o.model.empty() + o.graph_file.empty() + o.onnx_file.empty() == 2,
           "dtensor plan: give one of --model NAME (dtensor plan --list-models), --graph FILE.json or --onnx FILE.onnx");
  DT_CHECK(o.onnx_dims.empty() || !o.onnx_file.empty(), "dtensor plan: --onnx-dim needs --onnx FILE.onnx");
  DT_CHECK(o.format == "table" || o.format == "json", "dtensor plan: --format '", o.format,
           "' is not supported; accepted: table, json");
  DT_CHECK(o.schedule.empty() || o.devices == 0, "dtensor plan: --schedule with --devices; accepted with a pp mesh "
           "dim (--mesh pp=P,...): --devices tries the schedules itself");
  if (o.devices > 0) return plan_devices_command(o, out, err);
  MeshSpec mesh = MeshSpec::parse(o.mesh.empty() && !o.dump_graph.empty() ? "1" : o.mesh);
  if (mesh.index_of("pp") >= 0) return plan_pipeline_command(o, mesh, out, err);
  DT_CHECK(o.schedule.empty(), "dtensor plan: --schedule ", o.schedule, " needs a pp mesh dim (--mesh pp=P,...)");
  std::optional<Cluster> cluster;
  if (!o.cluster.empty()) {
    cluster = Cluster::load(o.cluster);
    if (!o.mesh.empty()) cluster->check_mesh(mesh.shape, mesh.str());
  }
  const HardwareProfile& hw = cluster ? *cluster->hosts.front().profile : hardware_profile(o.hardware);
  ModelGraph g;
  std::vector<std::string> onnx_notes;
  if (!o.model.empty()) {
    models::ModelOptions mo;
    mo.batch = o.batch;
    mo.seq = o.seq;
    mo.layers = o.layers;
    mo.training = !o.inference;
    mo.optimizer = o.optimizer;
    g = models::build_model(o.model, mo, mesh);
  } else {
    g = load_graph_file(o, &onnx_notes);
  }
  if (!o.dump_graph.empty()) {
    write_file_atomic(o.dump_graph, graph_to_json(g) + "\n");
    err << "wrote " << o.dump_graph << " (" << g.num_vertices() << " vertices)\n";
    return;
  }
  DT_CHECK(!o.mesh.empty(), "dtensor plan: give a mesh, e.g. --mesh dp=8,tp=8, or a device count, --devices 64");
  PlanOptions po = plan_options(o);
  po.tp_dim = o.tp_dim;
  DT_CHECK(o.tp_dim.empty() || mesh.index_of(o.tp_dim) >= 0, "dtensor plan: --tp-dim '", o.tp_dim,
           "' is not a dim of the mesh ", mesh.str());
  const std::vector<Recompute> modes = recompute_modes(o.recompute, "none");
  po.recompute = modes.front();
  PlanResult r = cluster ? plan_cluster(g, mesh, *cluster, po)
                 : modes.size() > 1 ? plan_model_recompute(g, mesh, hw, po, modes, /*per_layer=*/true)
                                    : plan_model(g, mesh, hw, po);
  r.notes.insert(r.notes.end(), onnx_notes.begin(), onnx_notes.end());
  const CostModel& cm = *r.cost_model;
  const std::string report = o.format == "json" ? report_json(cm, r, ReportOptions{o.ops, o.ops}) + "\n"
                                                : report_table(cm, r, ReportOptions{o.ops});
  emit(o, report, out, err);
  if (!o.dot.empty() || !o.svg.empty()) {
    const std::string dot_path = !o.dot.empty() ? o.dot : o.svg + ".dot";
    write_file_atomic(dot_path, report_dot(cm, r, o.dot_layers));
    err << "wrote " << dot_path << "\n";
    std::string svg = o.svg;
    if (svg.empty()) {
      svg = dot_path;
      if (svg.size() > 4 && svg.substr(svg.size() - 4) == ".dot") svg.resize(svg.size() - 4);
      svg += ".svg";
    }
    std::string why;
    if (render_svg(dot_path, svg, &why)) err << "wrote " << svg << "\n";
    else err << "no SVG: " << why << "\n";
  }
}

}  // namespace dtensor::planner

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

// One paragraph on a pipeline plan: its schedule's figures, then the stage's plan follows.
std::string pipeline_summary(const PipelinePlan& p) {
  return absl::StrFormat(
      "pipeline: %d stages (%d repeated layers on the slowest, with the embedding and head), %d micro-batches, "
      "%d virtual stages, 1F1B: step %.2f ms = %.4g slots x %.2f ms per micro-batch + %.2f ms optimizer + %.2f ms "
      "stage-to-stage sends; bubble %.1f%%; stage memory %.2f GB with %d micro-batches in flight. The stage's "
      "plan for one micro-batch:\n",
      p.spec.stages, p.layers_per_stage, p.spec.micro_batches, p.spec.virtual_stages, p.step_time_us / 1e3,
      p.spec.micro_batches + static_cast<double>(p.spec.stages - 1) / p.spec.virtual_stages, p.t_mb_us / 1e3,
      p.t_once_us / 1e3, 2.0 * (p.spec.stages - 1) * p.spec.virtual_stages * p.t_p2p_us / 1e3,
      100 * p.bubble_fraction, p.peak_memory_bytes / 1e9, std::min(p.spec.stages, p.spec.micro_batches));
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

// A pipeline plan's schedule figures as JSON (its stage's plan is report_json's).
nlohmann::json pipeline_json(const PipelinePlan& p) {
  return {{"stages", p.spec.stages}, {"micro_batches", p.spec.micro_batches}, {"virtual_stages", p.spec.virtual_stages},
          {"layers_per_stage", p.layers_per_stage}, {"step_time_us", p.step_time_us}, {"micro_batch_us", p.t_mb_us},
          {"optimizer_us", p.t_once_us}, {"send_us", p.t_p2p_us}, {"bubble_fraction", p.bubble_fraction},
          {"peak_memory_bytes", p.peak_memory_bytes}};
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
  mo.batch = batch;
  const ModelGraph whole = models::build_model(o.model, mo, inner);  // its layers and FLOPs
  const HardwareProfile& hw = hardware_profile(o.hardware);
  PipelinePlan p = plan_pipeline(stage_builder(o.model, mo), whole.num_layers(), batch, inner,
                                 PipelineSpec{stages, m, o.virtual_stages}, hw, plan_options(o),
                                 recompute_modes(o.recompute, "none"));
  const double flops = model_flops(whole);
  const double peak = hw.peak_flops_per_us(contraction_dtype(whole)) * 1e6;
  const double mfu = flops / (p.step_time_us * 1e-6 * mesh.size() * peak);
  std::string report;
  if (o.format == "json") {
    nlohmann::json j = nlohmann::json::parse(report_json(*p.stage.cost_model, p.stage, ReportOptions{o.ops, o.ops}));
    j["pipeline"] = pipeline_json(p);
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
  DevicesResult r = plan_devices(o.devices, build, hw, po, tokens, recompute_modes(o.recompute, "auto"),
                                 stage_build && o.pipeline ? &ps : nullptr, o.top);
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
  if (o.devices > 0) return plan_devices_command(o, out, err);
  MeshSpec mesh = MeshSpec::parse(o.mesh.empty() && !o.dump_graph.empty() ? "1" : o.mesh);
  if (mesh.index_of("pp") >= 0) return plan_pipeline_command(o, mesh, out, err);
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

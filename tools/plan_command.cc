// `dtensor plan`: the offline whole-model sharding planner (planner/command.h).
#include <iostream>
#include <map>
#include <memory>

#include "dtensor/core/error.h"
#include "dtensor/core/limits.h"
#include "planner/command.h"
#include "planner/mesh.h"
#include "planner/onnx_import.h"
#include "tools/subcommands.h"

namespace dtensor::tools {

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<planner::CommandOptions>();
  CLI::App* sub = app.add_subcommand(
      "plan", "Plan a whole model's sharding offline: a strategy per op minimizing step time under a memory limit");
  sub->add_option("--model", o->model, "model of the zoo (--list-models)");
  sub->add_option("--graph", o->graph_file, "model graph JSON file (format: planner/graph_json.h)");
  sub->add_option("--onnx", o->onnx_file, "ONNX model file (static shapes; planner/onnx_import.h)");
  sub->add_option("--onnx-dim", o->onnx_dims, "bind a symbolic ONNX input dim, NAME=SIZE (repeatable)");
  CLI::Option* mesh_opt =
      sub->add_option("--mesh", o->mesh, "named mesh, 1 to 3 dims (4 with pp: pipeline stages), e.g. dp=8,tp=8");
  sub->add_option("--devices", o->devices,
                  "plan every mesh of this many devices (1 to 3 dims, the innermost within a host), ranked by step "
                  "time; the fastest one's plan follows (planner/devices.h)")
      ->check(CLI::Range(int64_t{1}, kMaxMeshRanks))
      ->excludes(mesh_opt);
  sub->add_option("--recompute", o->recompute,
                  "activation recomputation of the repeated layers: none, selective (keep contraction outputs), full "
                  "(keep each layer's input), auto (the fastest that fits); default none with --mesh, auto with --devices")
      ->check(CLI::IsMember({"none", "selective", "full", "auto"}));
  sub->add_option("--micro-batches", o->micro_batches,
                  "with a pp mesh dim: micro-batches per step (default 4 x the stages)")
      ->check(CLI::Range(1, 1 << 20));
  CLI::Option* chunks = sub->add_option("--virtual-stages", o->virtual_stages,
                                        "with a pp mesh dim: model chunks per device, interleaved 1F1B (default 1; "
                                        "the interleaved schedule takes 2 when not given)")
                            ->capture_default_str()
                            ->check(CLI::Range(1, 64));
  CLI::Option* schedule =
      sub->add_option("--schedule", o->schedule,
                      "with a pp mesh dim: the pipeline schedule, 1f1b, interleaved or zb-h1 (default: the fastest "
                      "that fits of the three)")
          ->check(CLI::IsMember({"1f1b", "interleaved", "zb-h1"}));
  sub->add_flag("!--no-pipeline", o->pipeline, "with --devices: no pipeline candidates");
  sub->add_option("--top", o->top, "with --devices: candidates listed")->capture_default_str()->check(CLI::Range(1, 1000));
  CLI::Option* hardware =
      sub->add_option("--hardware", o->hardware, "hardware profile: a name (--list-hardware) or a JSON file (dtensor calibrate --out)")
          ->capture_default_str();
  sub->add_option("--cluster", o->cluster,
                  "mixed cluster JSON: {\"hosts\": [{\"profile\": NAME|FILE, \"ranks\": N, \"count\": N?}, ...]} "
                  "(propagation/cluster.h); searches the ranks' shares with the placements")
      ->excludes(hardware);
  sub->add_option("--batch", o->batch, "global batch (sequences or images); default: batch/rank x data-parallel dims")
      ->check(CLI::Range(int64_t{1}, kMaxPlanBatch));
  sub->add_option("--seq", o->seq, "sequence length (default: the model's)")->check(CLI::Range(int64_t{1}, kMaxPlanSeq));
  sub->add_option("--layers", o->layers, "number of layers (default: the published depth)")
      ->check(CLI::Range(1, kMaxPlanLayers));
  sub->add_option("--memory-limit", o->memory_limit_gb, "GB per device (default: the hardware's memory)")
      ->check(kPositiveFinite);
  sub->add_flag("--inference", o->inference, "plan the forward pass only");
  sub->add_option("--optimizer", o->optimizer, "adamw or sgd")
      ->capture_default_str()
      ->check(CLI::IsMember({"adamw", "sgd"}));
  sub->add_option("--format", o->format, "table or json")->capture_default_str()->check(CLI::IsMember({"table", "json"}));
  sub->add_flag("--ops", o->ops, "table: one row per op as well; json: each baseline's ops as well");
  sub->add_option("--output", o->output, "write the report to FILE");
  sub->add_option("--dot", o->dot, "write a Graphviz picture of the plan (and FILE.svg when dot is installed)");
  sub->add_option("--svg", o->svg, "write the picture as SVG (through dot)");
  sub->add_option("--dot-layers", o->dot_layers, "repeated layers drawn in the picture")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxPlanLayers));
  sub->add_option("--dump-graph", o->dump_graph, "write the model graph as JSON and stop");
  sub->add_option("--tp-dim", o->tp_dim, "mesh dim of the Megatron baseline's tensor parallelism (default: tp, else the last)");
  sub->add_flag("!--no-compare", o->compare, "skip the Megatron, data-parallel and greedy baselines");
  sub->add_flag("--list-models", o->list_models, "list the model zoo");
  sub->add_flag("--list-hardware", o->list_hardware, "list the hardware profiles");
  sub->add_flag("--list-ops", o->list_ops, "list the ops a graph may use");
  sub->callback([o, mesh_opt, chunks, schedule] {
    bool pipeline = false;
    if (!o->mesh.empty() || mesh_opt->count() > 0) {  // --mesh '' is a usage error too
      try {
        pipeline = planner::MeshSpec::parse(o->mesh).index_of("pp") >= 0;
      } catch (const Error& e) {  // a mesh that is not accepted: a usage error (exit 2)
        throw CLI::ValidationError("--mesh", e.what());
      }
    }
    if (schedule->count() > 0 && !pipeline)
      throw CLI::ValidationError("--schedule", "accepted with a pp mesh dim (--mesh pp=P,...) only");
    if (chunks->count() > 0 && o->virtual_stages > 1 && !o->schedule.empty() && o->schedule != "interleaved")
      throw CLI::ValidationError("--virtual-stages", "model chunks per device are interleaved 1F1B's; accepted "
                                                     "with --schedule interleaved (or no --schedule), not " + o->schedule);
    for (const std::string& d : o->onnx_dims) {
      std::map<std::string, int64_t> dims;
      try {
        planner::parse_onnx_dim(d, &dims);
      } catch (const Error& e) {  // a usage error (exit 2), like a bad mesh
        throw CLI::ValidationError("--onnx-dim", e.what());
      }
    }
    try {
      planner::run_plan_command(*o, std::cout, std::cerr);
    } catch (const Error& e) {
      std::cerr << "dtensor: error: " << e.what() << "\n";
      throw CLI::RuntimeError(kRuntimeExit);
    }
  });
}

}  // namespace dtensor::tools

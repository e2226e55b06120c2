// `dtensor plan` (tools/plan_command.cc parses the command line into CommandOptions and calls
// run_plan_command):
//
//   dtensor plan --model llama3-8b --mesh dp=8,tp=8 [--hardware h100-nvlink|FILE.json] [--batch N] [--seq N]
//                [--layers N] [--memory-limit GB] [--inference] [--optimizer adamw|sgd]
//                [--format table|json] [--ops] [--output FILE] [--dot FILE.dot] [--svg FILE.svg]
//                [--dot-layers N] [--no-compare] [--tp-dim NAME] [--cluster CLUSTER.json]
//   --cluster: a mixed cluster (propagation/cluster.h) instead of --hardware; its ranks must add up
//   to the mesh size; the plan's shares are searched with its placements (planner/cluster_plan.h).
//   dtensor plan --graph my_model.json --mesh tp=4        (planner/graph_json.h)
//   dtensor plan --onnx model.onnx --mesh tp=4 [--onnx-dim batch=8]   (planner/onnx_import.h)
//   dtensor plan --model gpt2 --dump-graph gpt2.json      (writes the model graph, plans nothing)
//   dtensor plan --list-models | --list-hardware | --list-ops
//   dtensor plan --model llama3-70b --devices 512 [--top K]   (planner/devices.h: every mesh the
//   devices factor into, with pipeline stages too, planned and ranked; the fastest one's plan follows)
//   dtensor plan --model llama3-405b --mesh pp=16,dp=64,tp=8 --micro-batches 32 [--schedule
//                1f1b|interleaved|zb-h1] [--virtual-stages V]   (a pipeline, planner/pipeline.h: the
//   layers balanced over the stages, each distinct stage planned; without --schedule the fastest of
//   1F1B, ZB-H1 and interleaved 1F1B that fits; the stage mesh may have 3 dims: pp=16,dp=8,cp=16,tp=8)
//
// Errors are dtensor::Error with a message saying what would be accepted: unknown model, hardware or
// op, a malformed mesh, a mesh dim nothing can split, a memory limit no plan meets, unreadable files,
// a malformed cluster file or one whose ranks are not the mesh size.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace dtensor::planner {

struct CommandOptions {
  std::string model, graph_file, onnx_file, mesh, hardware = "h100-nvlink";
  std::string cluster;  // cluster JSON file; when set, `hardware` is not used
  int64_t devices = 0;  // plan every mesh of this many devices instead of --mesh (planner/devices.h)
  int top = 5;          // --devices: candidates listed
  // Activation recomputation of the repeated layers (planner/cost.h): none, selective, full, or
  // auto (each tried, the fastest plan that fits kept). Default: none with --mesh, auto with --devices.
  std::string recompute;
  // Pipeline parallelism (planner/pipeline.h): a mesh dim named pp splits the layers into stages;
  // micro-batches per step (0: 4 x stages) and virtual stages per device (interleaved 1F1B).
  int micro_batches = 0, virtual_stages = 1;
  // The pipeline schedule (planner/pipeline.h): 1f1b, interleaved, zb-h1; "": the fastest that fits.
  std::string schedule;
  bool pipeline = true;  // --devices: pipeline candidates too (zoo models)
  int64_t batch = 0, seq = 0;
  int layers = 0;
  double memory_limit_gb = 0;  // 0: the hardware's memory
  bool inference = false;
  std::string optimizer = "adamw";
  std::string format = "table";  // table | json
  bool ops = false;  // table: a row per op; json: each baseline's "ops" too
  std::string output, dot, svg, dump_graph;
  int dot_layers = 1;
  bool compare = true;
  std::string tp_dim;
  std::vector<std::string> onnx_dims;  // NAME=SIZE: symbolic ONNX input dims
  bool list_models = false, list_hardware = false, list_ops = false;
};

// Runs the command: the report goes to `out` (or --output), remarks (files written) to `err`.
void run_plan_command(const CommandOptions& o, std::ostream& out, std::ostream& err);

}  // namespace dtensor::planner

// Output of `dtensor plan`: a readable table, JSON, and a Graphviz picture of the plan.
//
// JSON (report_json): {
//   "model", "description", "mesh": {"shape", "names"}, "hardware", "training", "optimizer",
//   "ops": [ {"name", "layer" (-1 outside repeated layers), "block", "kind" (input|param|op|optimizer),
//             "op", "placements": {"outputs": ["[S(0), S(2)]", ...], "inputs": [...]} (on weighted mesh dims
//             as priced: "[S(0)[317:100], S(2)]"),
//             "collectives": [ {"kind", "mesh_dim", "mesh_dim_name", "bytes", "time_us",
//                               "phase" (forward|backward|optimizer), "what"} ],
//             "compute_us", "memory_bytes"} ],
//   "layers": [ {"part", "layer", "comm_bytes", "comm_us", "compute_us", "memory_bytes",
//                "collectives": {"forward": {"all_reduce@tp": n, ...}, "backward": ..., "optimizer": ...}} ],
//   "totals": {"step_time_us", "compute_us", "comm_us", "comm_bytes", "peak_memory_bytes",
//              "param_bytes", "grad_bytes", "optimizer_bytes", "activation_bytes"},
//   "memory_limit_bytes", "plan_time_ms", "compare_time_ms", "exact", "solves", "lambda", "source",
//   "search": {"step_time_us", "comm_bytes", "peak_memory_bytes", "layers"} (the search's own plan,
//              before a baseline that beat it replaced it; equal to the totals when "source" is "search"),
//   "templates", "templated_layers", "mixed_layers",
//   "baselines": [ {"name", "valid", "fits", "note", "step_time_us", "comm_bytes", "peak_memory_bytes",
//                   "layers" (as above), "ops" (as above, with ReportOptions::baseline_ops)} ],
//   "notes": [...],
//   "cluster" (only with --cluster, planner/cluster_plan.h): {"hosts": [{"profile", "ranks"}],
//             "weights": {MESH_DIM_NAME: [w, ...]} (weighted mesh dims of the returned plan; {} = even),
//             "even_step_time_us", "options": [{"basis", "weights", "searched", "valid", "step_time_us",
//             "peak_memory_bytes", "plan_time_ms", "error" (when not valid)}] } }
// "hardware" is the profile's name, or "cluster " + Cluster::str() on a mixed cluster.
// Bytes are what each rank sends (collectives) or holds (memory); times in µs per training step.
//
// DOT (report_dot): vertices for inputs, parameters and ops outside repeated layers plus the first
// `layers` repeated layers (the rest folded into one box); labels name the op and its output
// placement, edges that move data are red and labelled with their forward collectives. Written with
// Boost.Graph's write_graphviz.
#pragma once

#include <string>

#include "planner/search.h"

namespace dtensor::planner {

struct ReportOptions {
  bool ops = false;           // table: one row per op as well
  bool baseline_ops = false;  // JSON: each baseline's "ops" as well (to compare a plan op by op)
};

std::string report_table(const CostModel& cm, const PlanResult& r, const ReportOptions& o = {});
std::string report_json(const CostModel& cm, const PlanResult& r, const ReportOptions& o = {});
std::string report_dot(const CostModel& cm, const PlanResult& r, int layers = 1);
// Renders DOT to SVG with Graphviz's `dot` when it is installed; false (and *why) otherwise.
bool render_svg(const std::string& dot_path, const std::string& svg_path, std::string* why);

}  // namespace dtensor::planner

#include "planner/pipeline.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "dtensor/core/error.h"
#include "planner/devices.h"
#include "propagation/cost_model.h"

namespace dtensor::planner {

double once_per_step_us(const PlanResult& r) {
  const ModelGraph& g = r.cost_model->graph();
  double t = 0;
  for (int v = 0; v < g.num_vertices(); ++v)
    if (g.node(v).kind == NodeKind::kOptimizer) t += r.eval.vertices[v].compute_us + r.eval.vertices[v].comm_us;
  return t;
}

namespace {

// Bytes of the tensor entering the first repeated layer (what one stage sends the next).
int64_t boundary_bytes(const ModelGraph& g) {
  for (int v = 0; v < g.num_vertices(); ++v) {
    if (g.node(v).layer != 0 || !takes_tensors(g.node(v).kind)) continue;
    for (const TensorId& t : g.inputs(v)) {
      const Node& u = g.node(t.node);
      if (u.layer < 0 && takes_tensors(u.kind)) {
        const TensorMeta& m = g.meta(t);
        return numel(m.shape) * static_cast<int64_t>(itemsize(m.dtype));
      }
    }
  }
  return 0;
}

// The schedule's figures from the stage's: step time, bubble, compute and communication.
void schedule(PipelinePlan& out) {
  const int p = out.spec.stages, m = out.spec.micro_batches, v = out.spec.virtual_stages;
  const PlanEval& e = out.stage.eval;
  const double slots = m + static_cast<double>(p - 1) / v;
  out.bubble_fraction = (static_cast<double>(p - 1) / v) / slots;
  const double p2p = 2.0 * (p - 1) * v * out.t_p2p_us;
  out.step_time_us = slots * out.t_mb_us + out.t_once_us + p2p;
  // Split as the stage's: compute and communication of m micro-batches and the update, the sends.
  const double share = e.step_time_us > 0 ? e.compute_us / e.step_time_us : 0;
  out.compute_us = (m * out.t_mb_us + out.t_once_us) * share;
  out.comm_us = (m * out.t_mb_us + out.t_once_us) * (1 - share) + p2p;
}

}  // namespace

PipelinePlan plan_pipeline(const StageBuilder& build, int model_layers, int64_t global_batch, const MeshSpec& inner,
                           const PipelineSpec& spec, const HardwareProfile& hw, const PlanOptions& options,
                           const std::vector<Recompute>& modes) {
  const int p = spec.stages, m = spec.micro_batches, v = spec.virtual_stages;
  DT_CHECK(p >= 1 && p <= model_layers, "pipeline: ", p, " stages for ", model_layers,
           " layers; accepted: 1 to the number of layers");
  DT_CHECK(v >= 1 && static_cast<int64_t>(p) * v <= model_layers, "pipeline: ", v, " virtual stages x ", p,
           " stages exceed the ", model_layers, " layers");
  DT_CHECK(m >= 1 && global_batch % m == 0, "pipeline: ", m, " micro-batches for a global batch of ", global_batch,
           "; accepted: a divisor of the batch");
  PipelinePlan out;
  out.spec = spec;
  out.inner = inner;
  out.layers_per_stage = (model_layers + p * v - 1) / (p * v) * v;  // the slowest stage's layers
  out.stage_graph = std::make_shared<ModelGraph>(build(inner, out.layers_per_stage, global_batch / m));
  PlanOptions o = options;
  o.activation_copies = std::min(p, m);
  out.stage = plan_model_recompute(*out.stage_graph, inner, hw, o, modes);
  const PlanEval& e = out.stage.eval;
  out.t_once_us = once_per_step_us(out.stage);
  out.t_mb_us = e.step_time_us - out.t_once_us;
  const int64_t per_rank = (boundary_bytes(*out.stage_graph) + inner.size() - 1) / inner.size();
  out.t_p2p_us = p > 1 ? collective_time_us(CommKind::kSendRecv, per_rank, 2, hw.inter_host) : 0;
  out.peak_memory_bytes = e.peak_memory_bytes;
  schedule(out);
  return out;
}

std::optional<PipelinePlan> with_virtual_stages(const PipelinePlan& plan, int model_layers, int virtual_stages) {
  const int p = plan.spec.stages, v = virtual_stages;
  if (v < 1 || static_cast<int64_t>(p) * v > model_layers) return std::nullopt;
  if ((model_layers + p * v - 1) / (p * v) * v != plan.layers_per_stage) return std::nullopt;
  PipelinePlan out = plan;
  out.spec.virtual_stages = v;
  schedule(out);
  return out;
}

}  // namespace dtensor::planner

// Pipeline parallelism in the planner: the repeated layers split into `stages` stages over the
// outermost factor of the devices, each stage planned on the inner mesh (dp, tp, ...) with the
// search of planner/search.h for one micro-batch, and the step priced by the schedule.
//
// The stage planned is the slowest one: ceil(layers / stages) repeated layers with the embedding
// and the head (the first stage holds the embedding, the last the head; counting both in one stage
// bounds either from above). It holds min(stages, micro_batches) micro-batches' activations (1F1B:
// the first stage runs that many forwards before its first backward), priced through
// PlanOptions::activation_copies so the search itself trades them against time.
//
// Step time, 1F1B (PipeDream-flush, Narayanan et al., "Efficient Large-Scale Language Model
// Training on GPU Clusters Using Megatron-LM", SC'21, section 2.2):
//   (m + (p - 1) / v) * t_mb + t_once + 2 (p - 1) * v * t_p2p
// with m micro-batches, p stages, v virtual stages per device (interleaved 1F1B; 1: plain 1F1B),
// t_mb the stage's forward and backward for one micro-batch (its planned step time less t_once),
// t_once the optimizer update and its collectives (gradients accumulate over the micro-batches and
// are reduced once a step), t_p2p one activation of the stage boundary sent over the inter-host
// link (each rank its share; the fill and drain sends are on the critical path, steady-state sends
// overlap compute). The bubble is (p - 1) / v micro-batch times of m + (p - 1) / v.
// Not counted: interleaving's extra activations in flight (the first device holds about
// (1 + (p - 1) / (p v)) times more than plain 1F1B: min(p, m) micro-batches are counted for any v).
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "planner/graph.h"
#include "planner/mesh.h"
#include "planner/search.h"

namespace dtensor::planner {

struct PipelineSpec {
  int stages = 1;
  int micro_batches = 1;
  int virtual_stages = 1;  // interleaved 1F1B: model chunks per device
};

struct PipelinePlan {
  PipelineSpec spec;
  MeshSpec inner;           // the mesh of one stage
  int layers_per_stage = 0;
  std::shared_ptr<ModelGraph> stage_graph;
  PlanResult stage;         // one micro-batch on the inner mesh
  double t_mb_us = 0, t_once_us = 0, t_p2p_us = 0;
  double step_time_us = 0;
  double compute_us = 0, comm_us = 0;  // of the step, bubble included in neither
  double bubble_fraction = 0;          // (p - 1) / v over m + (p - 1) / v
  int64_t peak_memory_bytes = 0;       // the stage's, with its micro-batches in flight
};

// Builds the model with `layers` repeated layers and global batch `batch` for a mesh.
using StageBuilder = std::function<ModelGraph(const MeshSpec& mesh, int layers, int64_t batch)>;

// The once-per-step part of a plan: its optimizer vertices' compute and collectives (µs).
double once_per_step_us(const PlanResult& r);

// Plans a pipeline (see above): model_layers and global_batch of the whole model; `modes` the
// recomputation modes tried (planner/devices.h: plan_model_recompute). Throws dtensor::Error for
// stages < 1 or > model_layers, micro_batches < 1 or not dividing global_batch, virtual_stages
// < 1 or stages * virtual_stages > model_layers, and when no stage plan fits (the reason).
PipelinePlan plan_pipeline(const StageBuilder& build, int model_layers, int64_t global_batch, const MeshSpec& inner,
                           const PipelineSpec& spec, const HardwareProfile& hw, const PlanOptions& options,
                           const std::vector<Recompute>& modes);

// The same pipeline with `virtual_stages` model chunks per device when its slowest stage holds the
// same layers (ceil(layers / (p v)) v unchanged): only the schedule's figures change; nullopt
// otherwise (the stage must be planned again) or when p v exceeds the layers.
std::optional<PipelinePlan> with_virtual_stages(const PipelinePlan& plan, int model_layers, int virtual_stages);

}  // namespace dtensor::planner

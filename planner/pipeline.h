// Pipeline parallelism in the planner: the repeated layers split into `stages` stages over the
// outermost factor of the devices, each stage planned on the inner mesh (dp, tp, ...) with the
// search of planner/search.h for one micro-batch, and the step priced by the schedule.
//
// Stages. Stage 0 holds the embedding (and everything before the first repeated layer), the last
// stage the head (everything after the last one), and the layer counts may differ: they are chosen
// so that the slowest stage's predicted time is least among the partitions whose every stage fits
// the memory limit (balance_layers below; Megatron-LM's zero-bubble fork and the Llama 3 run give
// the first and last stages a layer less for the same reason: Qi et al.'s README, "--num-layers
// k * p - 2"; The Llama 3 Herd of Models, section 3.3.2). The stage graphs are cut from the model's
// own graph (stage_graph): the middle and last stages take the previous stage's activation as a
// graph input. Pricing:
//   - the probe: the model with ceil(layers / stages) layers, its embedding and its head, planned
//     holding stage 0's micro-batches in flight (PlanOptions::activation_copies: the search trades
//     them against time; the most any stage holds), split by side: a repeated layer's figures, the
//     embedding side's (the first stage's) and the head side's (the last stage's). The middle and
//     last stages' received activation counts its per-rank share of memory.
//   - each stage i with n layers is priced linearly from it: its ends' part + n x a layer's, for each
//     of the forward time, the backward's two parts (below), the once-a-step optimizer part, the
//     parameters with their gradients and optimizer state, and one micro-batch's activations, of
//     which it holds c_i (the schedule's in-flight count). balance_layers chooses the partition.
//   - PipelineSpec::exact (dtensor plan --mesh pp=...): then each distinct stage of the partition
//     (the first, the last, the middle stages by layer count) is planned on its own graph at its
//     layers, holding the most micro-batches of the stages it serves, and the stages take those
//     plans' figures; the stages' own plans then price them in the balance again, until a partition
//     repeats (the fastest planned is kept). A stage whose plan does not fit caps its layers below
//     the count tried. When even the probe finds no plan, exact planning probes fewer layers, then
//     one micro-batch in flight, before giving up.
// The step is priced from the slowest stage (its micro-batch time t = T_F + T_B + T_W), the
// optimizer from the longest stage's update (the stages update at once), each stage's memory from its
// own in-flight count.
//
// Schedules, their step time and the micro-batches each stage holds: planner/pipeline_schedule.h.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "planner/graph.h"
#include "planner/mesh.h"
#include "planner/pipeline_schedule.h"
#include "planner/search.h"

namespace dtensor::planner {

struct PipelineSpec {
  int stages = 1;
  int micro_batches = 1;
  int virtual_stages = 1;  // model chunks per device: > 1 is interleaved 1F1B
  Schedule schedule = Schedule::k1F1B;  // with virtual_stages > 1: interleaved
  // Repeated layers per stage (device), first to last; empty: chosen by balance_layers.
  std::vector<int> layers;
  bool exact = false;  // plan each distinct stage of the partition (see above)
};

// The schedule a spec runs: interleaved when virtual_stages > 1, else its schedule (interleaved with
// one chunk is 1F1B).
Schedule effective_schedule(const PipelineSpec& s);

// The graph of one stage cut from `whole` (the model with its embedding, the stage's repeated layers
// and its head): every repeated layer, with what precedes the first repeated layer when `embedding`,
// with what follows the last when `head` (an op follows when it depends on a repeated layer's
// output). A tensor a kept op takes from a cut vertex becomes a graph input
// "stage_input.<producer>" of the same shape (the activation received from the previous stage; its
// gradient's move back to the previous stage's layout is not priced, the send is); parameters,
// constants, inputs and optimizer vertices are kept when a kept op uses them (a tied embedding is in
// both end stages).
ModelGraph stage_graph(const ModelGraph& whole, bool embedding, bool head);

struct PipelineStage {
  int layers = 0;  // repeated layers (all its chunks)
  bool embedding = false, head = false;
  double in_flight = 0;   // micro-batches' activations held at the peak
  StageTimes t;           // one micro-batch
  double compute_us = 0;  // of t: compute (the rest is collectives)
  double once_us = 0;     // optimizer update and the gradients' reductions, once a step
  double once_compute_us = 0;
  int64_t static_bytes = 0;      // parameters, gradients, optimizer state
  double activation_bytes = 0;   // one micro-batch's activations
  int64_t memory_bytes = 0;      // static + in_flight x activations
  Recompute recompute = Recompute::kNone;
  int plan = -1;  // PipelinePlan::plans: the plan its figures come from (its end's, when priced)
};

// A stage graph planned: a probe, or with PipelineSpec::exact one distinct stage.
struct StagePlan {
  std::string what;  // "first stage, 1 layer (probe)", "middle stages, 8 layers", ...
  int layers = 0;
  bool embedding = false, head = false;
  int copies = 1;  // micro-batches in flight it was planned with
  std::shared_ptr<ModelGraph> graph;
  PlanResult plan;
};

struct PipelinePlan {
  PipelineSpec spec;  // spec.layers: the partition
  Schedule schedule = Schedule::k1F1B;
  MeshSpec inner;  // the mesh of one stage
  std::vector<PipelineStage> stages;
  std::vector<StagePlan> plans;
  int slowest = 0;           // the stage whose micro-batch time prices the step
  int layers_per_stage = 0;  // the slowest stage's layers
  // The slowest stage's graph and plan (priced: the probe its repeated layers come from).
  std::shared_ptr<ModelGraph> stage_graph;
  PlanResult stage;
  StageTimes t;  // the slowest stage's
  double t_mb_us = 0, t_once_us = 0, t_p2p_us = 0;
  double step_time_us = 0, bubble_us = 0, sends_us = 0;
  double compute_us = 0, comm_us = 0;  // of the step, bubble included in neither
  double bubble_fraction = 0;          // bubble over busy + bubble
  int64_t peak_memory_bytes = 0;       // the stage that needs most
  double memory_limit_bytes = 0;
  // The partition with equal layers (the first L mod p stages one more), priced from the same
  // probes (empty when the spec gave the layers); its step time under the plan's schedule, 0 when
  // some stage of it does not fit the memory limit.
  std::vector<PipelineStage> uniform;
  double uniform_step_time_us = 0;
  std::vector<std::string> notes;
};

// Builds the model with `layers` repeated layers and global batch `batch` for a mesh.
using StageBuilder = std::function<ModelGraph(const MeshSpec& mesh, int layers, int64_t batch)>;

// The once-per-step part of a plan: its optimizer vertices' compute and collectives (µs).
double once_per_step_us(const PlanResult& r);

// Plans a pipeline (see above): model_layers and global_batch of the whole model; `modes` the
// recomputation modes tried (planner/devices.h: plan_model_recompute). Throws dtensor::Error for
// stages < 1 or > model_layers, micro_batches < 1 or not dividing global_batch, virtual_stages
// < 1 or stages * virtual_stages > model_layers, zb-h1 with virtual stages, given layers that are
// not one count per stage summing to the model's (or fewer than a stage takes), and when no
// partition fits (each stage's reason).
PipelinePlan plan_pipeline(const StageBuilder& build, int model_layers, int64_t global_batch, const MeshSpec& inner,
                           const PipelineSpec& spec, const HardwareProfile& hw, const PlanOptions& options,
                           const std::vector<Recompute>& modes);

// The same stages under another schedule (and virtual stages), re-priced: the in-flight counts, the
// memory and the step; nullopt when a stage then needs more memory than the limit, holds fewer
// layers than v chunks need (v, or v - 1 on the first and last stages, whose chunk may hold only
// the embedding or the head), or for zb-h1 with v > 1.
std::optional<PipelinePlan> with_schedule(const PipelinePlan& plan, Schedule schedule, int virtual_stages);
// with_schedule(plan, interleaved, v) (v = 1: 1F1B). A plan without stages (only its spec,
// layers_per_stage and times: a schedule's figures for a uniform pipeline) is re-priced when its
// slowest stage holds the same layers (ceil(layers / (p v)) v).
std::optional<PipelinePlan> with_virtual_stages(const PipelinePlan& plan, int model_layers, int virtual_stages);

}  // namespace dtensor::planner

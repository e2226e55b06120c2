// Planning for a device count instead of a mesh (`dtensor plan --devices N`): every way N devices
// factor into 1 to 3 mesh dims, outermost first, named "dp"; "dp,tp"; "dp,fsdp,tp" (labels only:
// each plan's placements say what a dim shards), the ones the topology admits each planned with
// plan_model on the same model graph and global batch, and ranked by predicted step time among
// those within the memory limit.
//
// Topology (HardwareProfile::links_for_mesh lays the innermost dims within a host): the innermost
// dim of a 2- or 3-dim mesh ("tp", where tensor and expert parallelism exchange activations every
// layer) must lie within one host's NVLink domain: its size divides ranks_per_host. Meshes that
// break the rule are listed as rejected with the reason, as are those no plan fits in memory.
//
// MFU is model FLOPs per step (the forward FLOPs of the graph's contractions, ops/flops.h, times 3
// in training: forward, and backward's two products) over (step time x devices x the profile's peak
// FLOP/s for the contractions' dtype), the usual definition (no recomputation counted).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "planner/graph.h"
#include "planner/mesh.h"
#include "planner/pipeline.h"
#include "planner/search.h"
#include "propagation/hardware.h"

namespace dtensor::planner {

// Every mesh of 1 to `max_dims` dims (each of size >= 2; the 1-dim mesh of `devices`) whose sizes
// multiply to `devices`, ordered by number of dims, then by sizes (outermost first). Throws
// dtensor::Error for devices < 1 or > kMaxMeshRanks, or a mesh dim that would exceed kMaxMeshDimSize
// (those are left out: a 1-dim mesh of 2^17 devices is not listed, its 2-dim factorizations are).
std::vector<MeshSpec> mesh_factorizations(int64_t devices, int max_dims = 3);

// "" when the topology admits the mesh on this hardware, else why not.
std::string topology_rejection(const MeshSpec& mesh, const HardwareProfile& hw);

// Model FLOPs of one step of the graph (see above), and the dtype of its largest contraction (whose
// peak FLOP/s MFU divides by).
double model_flops(const ModelGraph& g);
DType contraction_dtype(const ModelGraph& g);

// plan_model with each recomputation mode of `modes` (options.recompute ignored); returns the
// fastest plan within the memory limit, else the one closest to it, with a note naming the mode
// and what the others gave. With `per_layer`, when full recomputation fits and none does, also the
// plan that recomputes only the first k repeated layers for the least k that fits (a bisection:
// about log2(layers) more plans). Throws dtensor::Error when every mode's planning throws (the last
// mode's error, with the others' reasons).
// `plan` plans one mode (default: plan_model on g, mesh, hw).
using PlanFn = std::function<PlanResult(const PlanOptions&)>;
PlanResult plan_model_recompute(const ModelGraph& g, const MeshSpec& mesh, const HardwareProfile& hw,
                                const PlanOptions& options, const std::vector<Recompute>& modes,
                                bool per_layer = false, const PlanFn& plan = nullptr);

struct DeviceCandidate {
  MeshSpec mesh;  // with pipeline stages: the mesh of one stage
  int stages = 1, micro_batches = 1, virtual_stages = 1;  // pipeline parallelism (planner/pipeline.h)
  bool zero_bubble = false;  // the ZB-H1 schedule (planner/pipeline_schedule.h)
  // "dp=64,tp=8", "pp=16,dp=64,tp=8 m=32", "pp=16,dp=64,tp=8 m=32 v=2" or "pp=16,dp=64,tp=8 m=32 zb-h1"
  std::string label() const;
  Recompute recompute = Recompute::kNone;  // the mode of its plan
  std::string rejected;  // why not ranked (topology, memory, an error planning it); "" when ranked
  double step_time_us = 0, compute_us = 0, comm_us = 0;
  int64_t peak_memory_bytes = 0;
  double tokens_per_s = 0;  // global tokens (or images) per second
  double mfu = 0;           // 0..1
  double plan_time_ms = 0;
  double lower_bound_us = 0;  // pruned: every plan of it that fits takes at least this
};

struct DevicesResult {
  int64_t devices = 0;
  int64_t tokens_per_step = 0;  // what tokens_per_s counts per step
  double model_flops = 0;       // per step, the same graph for every mesh
  double peak_flops = 0;        // FLOP/s per device (the contractions' dtype)
  std::vector<DeviceCandidate> ranked;    // fastest first
  std::vector<DeviceCandidate> rejected;  // in enumeration order
  // keep > 0: meshes whose lower bound exceeds the keep-th fastest's step time (in enumeration
  // order), and that time (µs).
  std::vector<DeviceCandidate> pruned;
  int keep = 0;
  double kth_step_time_us = 0;
  double search_time_ms = 0;
  // The fastest mesh's full plan, its graph kept alive (the plan's cost model refers to it).
  MeshSpec best_mesh;
  std::shared_ptr<ModelGraph> best_graph;
  PlanResult best;
  std::optional<PipelinePlan> best_pipeline;  // when the fastest is a pipeline (best is its stage)
};

// Pipeline candidates for plan_devices: stages p >= 2 dividing the devices (at most the model's
// layers), each inner mesh of devices / p in 1 or 2 dims the topology admits, m = f x p
// micro-batches for each factor f that divides the global batch, the layers balanced over the
// stages, and each schedule the same stages admit (planner/pipeline.h with_schedule: interleaved
// with v chunks when every stage holds them and the memory in flight fits, ZB-H1), priced from the
// same stage plan.
struct PipelineSearch {
  StageBuilder build;
  int model_layers = 0;  // 0: the whole graph's
  int64_t global_batch = 0;
  std::vector<int> micro_batch_factors = {1, 2, 4};
  std::vector<int> virtual_stages = {1, 2, 4};  // interleaved 1F1B (each stage holding v chunks)
  bool zero_bubble = true;                       // ZB-H1 too (1F1B's stages and memory)
};

// Plans `devices` devices: build(mesh) gives the model graph for a mesh (the same global batch for
// every mesh), `tokens_per_step` the tokens (or samples) one step processes; each mesh with each
// recomputation mode of `modes` (plan_model_recompute). Throws dtensor::Error when no mesh is
// admitted and fits, naming each mesh's reason.
//
// Branch and bound, with `keep` > 0: the `keep` fastest candidates (and every candidate within
// their step times) are exactly those of keep = 0, with the same figures; the pipelines are planned
// first, then each mesh's search stops, after its edge tables and first solves, when its lower
// bound (Planner::lower_bound over its recomputation modes) exceeds the keep-th fastest step time
// found so far. A mesh whose bound exceeds the final keep-th fastest's is listed in `pruned` with
// its bound, whether or not it was stopped, so that the result does not depend on the threads.
//
// `one_graph`: build gives the same graph for every mesh (a zoo model whose batch is given, a graph
// file): it is built once and every mesh is planned on it (read-only, by every worker).
DevicesResult plan_devices(int64_t devices, const std::function<ModelGraph(const MeshSpec&)>& build,
                           const HardwareProfile& hw, const PlanOptions& options, int64_t tokens_per_step,
                           const std::vector<Recompute>& modes = {Recompute::kNone},
                           const PipelineSearch* pipeline = nullptr, int keep = 0, bool one_graph = false);

// The ranking as a table (top `top` rows, then why the others lost) and as JSON:
// {"devices", "tokens_per_step", "model_flops", "peak_flops", "search_time_ms",
//  "candidates": [{"mesh", "recompute", "step_time_us", "compute_us", "comm_us", "peak_memory_bytes",
//                  "tokens_per_s", "mfu", "plan_time_ms"}] (fastest first),
//  "rejected": [{"mesh", "reason"}], "pruned": [{"mesh", "lower_bound_us"}], "keep",
//  "kth_step_time_us"}.
std::string devices_table(const DevicesResult& r, int top);
std::string devices_json(const DevicesResult& r);

}  // namespace dtensor::planner

// The planner's cost model: for every vertex of a ModelGraph on a mesh, its choices (an op's
// strategies from the registry's rules expanded by propagation/expand_strategies, less two kinds the
// planner does not consider: Partial(avg/max/min) placements, and Partial factors of matrix products;
// a placement for inputs, parameters and optimizer state) and what each costs. The same model prices the search, the
// baselines and the report.
//
// Time (µs), per training step:
//   - compute: roofline per op, max(FLOPs / peak FLOP/s of the dtype, bytes / memory bandwidth), on
//     the rank with the largest block (FLOPs shrink by the smallest local/global ratio of the op's
//     tensors). On a mixed cluster (ClusterShares below) each rank is priced on its own profile's
//     peak and memory bandwidth with its own block (ranks grouped by profile and coordinates on the
//     weighted mesh dims, each group on its largest block), and the op takes the slowest rank's time: ranks
//     meet at every collective, so a step is the sum over ops of each op's slowest rank (an upper
//     bound of the slowest rank's own sum; equal when one rank is slowest throughout, as under even
//     shards). Weighted shares: every Shard on a mesh dim given weights is priced as the weighted
//     shard S(d)[w...] (dtensor/placement.h weighted_range), so a rank's work follows its share and
//     every collective moves the heaviest rank's block (dtensor/redistribute.h). Under weights an
//     op keeps only the strategies whose split tensors hold equal fractions on each rank (a view
//     that merges the weighted dim with another does not: the plan must move the tensor first,
//     and pays for it) and carry no distributed step (DESIGN §6) on a weighted mesh dim; view ops
//     are free; backward is 2x forward (two matmuls per matmul); attention
//     internals marked `fused` are compute-only (flash attention). Optimizer: memory-bound update.
//     An output dim only the data sizes (OpDef::data_dependent: nonzero's row count) is priced at
//     meta's upper bound (nonzero: every element nonzero), as are the ops that consume it.
//   - collectives: every redistribution is the engine's plan (dtensor/redistribute.h
//     plan_redistribute) timed by propagation/cost_model.h plan_time_us on
//     HardwareProfile::links_for_mesh (Cluster::links_for_mesh on a mixed cluster); a rule's own step (DESIGN §6) is timed like propagate() does.
//     Backward (DESIGN §5): an op's backward runs under the dual of its forward strategy: per mesh
//     dim, the gradient of an input placed S(d) is S(d); of an input placed P it is R (the backward
//     of P -> R is the identity); of an input placed R it is P(sum) when the op's work is split over
//     that mesh dim (some tensor of the strategy is not R there) and R otherwise. The gradient
//     arriving at a producer must be in the producer's output layout with P read as R. So an edge
//     whose forward moves src -> dst costs, in backward, the move grad_in -> dual(src): all_reduce
//     forward / identity backward (P -> R), reduce_scatter <-> all_gather (sequence parallelism).
//     A step's collective is counted again in backward. The search admits no redistribution of a
//     fused op's output (inside flash attention or a rotary kernel it never exists in memory).
//   - a tensor used by several ops passes a redistribution vertex (NodeKind::kRedistribute): moved
//     once to its placement x for all of them (each consumer then moves it further only if it
//     wants another layout), and their gradients summed in its chosen layout g (dual_out(x), or
//     Partial where x is Replicate) before one move back: Megatron-LM gathers a norm's output once
//     for q, k and v and reduce-scatters the sum of their input gradients once. Free otherwise.
//   - parameters: storage placement p, consumed as placement c: forward move p -> c; when it moves
//     data (FSDP's all_gather) it is repeated in backward (the gathered weight is freed after use).
//     The weight gradient moves from the consumer's grad layout to the optimizer-state placement o
//     (DP: P -> R all_reduce; ZeRO/FSDP: P -> S reduce_scatter), phase "backward"; after the update
//     the new weights move o -> p (ZeRO's all_gather), phase "optimizer". Parameter and gradient
//     collectives are bucketed (25 MB, as DDP/FSDP): latency is charged per bucket, not per tensor.
// Memory (bytes per device, the rank with the largest blocks):
//   parameters (their dtype) + gradients (param dtype, in the optimizer placement) + optimizer state
//   (adamw: fp32 master + 2 fp32 moments = 12 B/element; sgd: master + momentum = 8 B) + activations
//   kept for backward: the outputs some backward needs (matmuls, norms, non-linear pointwise ops,
//   losses and pooling save their inputs; softmax and relu their output; add, views and scalar ops
//   nothing; a view's saved tensor is its base's), once each, in the producer's layout; an input that
//   reached a saving op through a collective is a new buffer and counts again; fused ops' outputs
//   are recomputed, never saved; the data inputs. In inference: parameters + data inputs + the largest working set
//   of one op (its inputs and outputs).
// Errors: dtensor::Error from the registry when a vertex does not bind (names the op and shapes).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "planner/graph.h"
#include "planner/mesh.h"
#include "planner/solver.h"
#include "propagation/cluster.h"
#include "propagation/cost_model.h"
#include "propagation/hardware.h"

namespace dtensor::planner {

// Per mesh dim: empty = even shards (torch.chunk), else one integer weight in [1, kMaxShardWeight]
// per coordinate of that mesh dim.
using MeshWeights = std::vector<std::vector<int64_t>>;

// A mixed cluster and the shares a plan gives its ranks. The cluster (and the profiles it points
// to) must outlive the cost model.
struct ClusterShares {
  const Cluster* cluster = nullptr;  // null: every rank has the CostModel's profile
  MeshWeights weights;               // empty: every mesh dim even
};

// One choice of a vertex, priced.
struct Choice {
  // Op vertices: the strategy (placements of outputs and inputs per mesh dim). Other vertices:
  // outputs[0] is the tensor's placement (parameter storage, optimizer state, data input).
  Strategy strategy;
  double fwd_us = 0;      // forward compute
  double bwd_us = 0;      // backward compute (training)
  bool has_step = false;  // the rule's own collective step (forward; again in backward)
  CollectiveRecord step;
  int64_t act_bytes = 0;    // activations kept for backward (training) or data input bytes
  int64_t param_bytes = 0;  // parameter storage
  int64_t grad_bytes = 0;   // optimizer vertices: gradient
  int64_t state_bytes = 0;  // optimizer vertices: optimizer state
  double opt_us = 0;        // optimizer update compute
  int64_t work_bytes = 0;   // op inputs + outputs (inference working set)
  int64_t out_bytes = 0;    // op vertices: outputs on the largest rank (act_bytes, per copy, when kept)
  std::vector<Placements> grad_in;  // per tensor input: layout of the gradient the backward produces
  // Redistributions: the layout the consumers' gradients are summed in (may hold Partial where the
  // tensor is Replicate). Empty for every other vertex: there it is dual_out of each output.
  std::vector<Placements> grad_out;
  const Placements& placement() const { return strategy.outputs.at(0); }
};

// The choices of a vertex and, for the solver, their classes per port.
struct VertexInfo {
  std::vector<Choice> choices;
  bool view = false;  // a view op: free, keeps nothing
  // Per output slot: classes by (output placement, gradient layout taken for it), with a
  // representative of each per class.
  std::vector<ClassMapPtr> out_classes;
  std::vector<std::vector<Placements>> out_reps;
  std::vector<std::vector<Placements>> out_grad_reps;
  // Per tensor input: classes by (input placement, gradient placement).
  std::vector<ClassMapPtr> in_classes;
  std::vector<std::vector<std::pair<Placements, Placements>>> in_reps;
  // Per tensor input: classes by gradient placement.
  std::vector<ClassMapPtr> grad_classes;
  std::vector<std::vector<Placements>> grad_reps;
};

// A redistribution and its price.
struct Move {
  double us = 0;
  int64_t bytes = 0;  // sent per rank, all steps
  bool comm = false;  // some step is a collective
  std::vector<CollectiveRecord> records;
};

// Activation recomputation of the repeated layers (Node::layer >= 0) in training, as activation
// checkpointing does it:
//   kNone: backward keeps what each op saves.
//   kSelective: each layer keeps its input and the outputs of its contractions (matmuls,
//     attention); its other ops (elementwise, norms, softmax, ...) run again in backward from them,
//     as torchtitan's "selective op" checkpointing keeps matmul outputs.
//   kFull: each layer keeps its input only; the whole layer's forward runs again in backward (its
//     compute, its forward moves and steps): Megatron-LM's full recomputation.
// Not counted: the transient memory of one layer's recomputed activations during its backward.
// CostModel's recompute_layers limits the mode to the first layers (a per-layer choice).
enum class Recompute : uint8_t { kNone, kSelective, kFull };
const char* recompute_name(Recompute r);  // "none", "selective", "full"
// Throws dtensor::Error naming the accepted values.
Recompute recompute_from_name(const std::string& name);

class MoveSkeletons;  // cost.cc

class CostModel {
 public:
  // Binds every op vertex on the mesh and prices its choices. Vertices with the same op, arguments
  // and input shapes share their VertexInfo.
  // With `shares`, ranks are priced on the cluster's per-rank profiles and links
  // (Cluster::links_for_mesh) and Shards on weighted mesh dims as weighted shards; `hw` then only
  // names the plan and serves the greedy baseline's engine. Throws dtensor::Error when the cluster's
  // rank count is not the mesh size or a weight list does not have one weight in [1,
  // kMaxShardWeight] per coordinate of its mesh dim.
  // `activation_copies`: activations are held this many times over (a pipeline stage keeps that
  // many micro-batches in flight, planner/pipeline.h); every kept tensor's bytes are multiplied.
  // `recompute_layers`: the recomputation applies to the repeated layers 0 .. recompute_layers - 1
  // only (the others keep what their ops save); -1: to every repeated layer.
  CostModel(const ModelGraph& g, const MeshSpec& mesh, const HardwareProfile& hw, ClusterShares shares = {},
            Recompute recompute = Recompute::kNone, int activation_copies = 1, int recompute_layers = -1);

  const ModelGraph& graph() const { return g_; }
  const MeshSpec& mesh() const { return mesh_; }
  const HardwareProfile& hardware() const { return hw_; }
  const std::vector<LinkModel>& links() const { return links_; }
  const ClusterShares& shares() const { return shares_; }
  // p with every even Shard on a weighted mesh dim made the weighted shard it is priced as.
  Placements weigh(const Placements& p) const;
  bool training() const { return g_.training; }
  // Constants have no choices (they are materialized in whatever layout a consumer takes).
  const VertexInfo& info(int v) const { return *info_[v]; }
  std::shared_ptr<const VertexInfo> info_ptr(int v) const { return info_[v]; }
  bool requires_grad(int v) const { return rg_[v] != 0; }
  Recompute recompute() const { return recompute_; }
  int recompute_layers() const { return recompute_layers_; }  // -1: every repeated layer
  int activation_copies() const { return copies_; }
  // The vertex's forward runs again in backward (Recompute); its input k's forward move too when
  // replayed(v, k) (the producer is in the same layer: the layer's input is kept, not moved again).
  bool recomputed(int v) const { return recomputed_[v] != 0; }
  // What backward keeps under a recomputation mode (this cost model's: kept_, saves_in_,
  // recomputed_; another's: what a cost model of this graph under it would hold).
  struct Keeping {
    std::vector<char> kept;          // per vertex: its output is saved for backward
    std::vector<uint64_t> saves_in;  // per vertex: bit k = it saves tensor input k
    std::vector<char> recomputed;    // per vertex: its forward runs again in backward
  };
  Keeping keeping(Recompute recompute, int recompute_layers) const;
  bool replayed(int v, int k) const;
  const std::vector<TensorId>& inputs(int v) const { return inputs_[v]; }
  int optimizer_of(int param) const { return opt_of_[param]; }
  // (consumer, input index) of each parameter's op consumers.
  const std::vector<std::pair<int, int>>& param_uses(int param) const { return param_uses_[param]; }

  // Redistribution of a tensor of meta `m` from src to dst (cached; thread-safe). `bucketed`: a
  // parameter's or gradient's move, coalesced with others into kBucketBytes buckets as DDP and FSDP
  // do, so each collective pays its latency only in proportion to its share of a bucket.
  const Move& move(const Placements& src, const Placements& dst, const TensorMeta& m, bool bucketed = false) const;
  static constexpr double kBucketBytes = 25e6;  // torch DDP's bucket_cap_mb default
  // Op vertex v priced under an arbitrary strategy (baselines built by propagate()).
  Choice op_choice(int v, const Strategy& s) const;

  // Edge producer u -> consumer v (tensor input k) with the producer's output placement `src` and
  // the gradient layout it takes for it `src_grad` (grad_target), the consumer's input placement `in`
  // and gradient placement `grad`.
  struct EdgeCost {
    const Move* fwd = nullptr;  // forward move
    const Move* bwd = nullptr;  // backward move (null: none)
    // An input that reached a saving op through a collective is either kept for backward
    // (act_bytes) or dropped and moved again in backward (fwd once more, as Megatron-LM's sequence
    // parallelism re-gathers); the plan takes the cheaper at its memory price lambda.
    int64_t act_bytes = 0;
    bool regather(double lambda) const {
      return act_bytes > 0 && lambda * static_cast<double>(act_bytes) > fwd->us;
    }
  };
  EdgeCost edge_cost(int u, int v, int k, const Placements& src, const Placements& src_grad, const Placements& in,
                     const Placements& grad) const;
  // The same prices without collective records, for building the solver's tables fast: moves
  // cached in a caller-owned (per-thread) MoveTimes; `meta` from meta_id().
  struct MoveTime {
    double us = 0;
    bool comm = false;
  };
  struct MoveTimes {
    absl::flat_hash_map<std::tuple<uint64_t, uint64_t, int>, MoveTime> map;
    absl::flat_hash_map<std::pair<uint64_t, int>, int64_t> local_bytes;  // (placement key, meta)
    // Per meta: the time of each collective step a move can take (its placements before the step,
    // mesh dim, collective, bucketed), priced once; NaN until then (see move_time).
    std::vector<std::vector<double>> step_us;
  };
  int meta_id(const TensorMeta& m) const;  // every tensor of the graph is interned at construction
  // The same figures as compute_redistribute_plan priced by plan_time_us (bucketed: each record's
  // latency shared by its bucket), without planning each move: the engine's plan of src -> dst (which
  // mesh dim moves at each step, in what order, with which collective) depends on the placements
  // alone, so its steps are planned once per pair of placements for every mesh of that many dims
  // and every tensor of that rank (process-wide, MoveSkeletons in cost.cc), and each step's
  // time once per cost model, tensor and placements before the step (MoveTimes::step_us). Weighted
  // shards, and placements outside R, P(sum) and even S(d), are planned as before.
  // src_ix, dst_ix: their placement_index when the caller has them (kNoIndex: looked up here).
  static constexpr int kNoIndex = -2;
  MoveTime move_time(const Placements& src, const Placements& dst, int meta, MoveTimes& cache,
                     bool bucketed = false, int src_ix = kNoIndex, int dst_ix = kNoIndex) const;
  // p's index among the placements whose moves are planned once (see move_time), -1 when p is not
  // among them (its moves are planned each).
  int placement_index(const Placements& p, int meta) const;
  // Move times shared by the cost models of one graph on one mesh, hardware and shares (the
  // recomputation modes of planner/devices.h plan_model_recompute: recomputation and activation
  // copies change no move's time). A move's time is a pure function of those, so sharing changes
  // no figure, only the work. Read without a lock (a lock per move cost more than the sharing
  // saved): written only through keep_move_times, which the Planner calls once its tables are
  // built, when none of its threads prices moves; cost models sharing one run one after another.
  struct SharedMoveTimes {
    std::mutex mu;  // keep_move_times and share_move_times
    // The kept caches, each whole (moved in: merging them cost more than looking in each).
    std::vector<absl::flat_hash_map<std::tuple<uint64_t, uint64_t, int>, MoveTime>> maps;
    // What the times hold for (set by the first cost model to share it; null: not yet).
    const ModelGraph* graph = nullptr;
    Shape mesh;
    const HardwareProfile* hw = nullptr;
    const Cluster* cluster = nullptr;
    MeshWeights weights;
  };
  // Attaches `s` (before any move is priced); throws dtensor::Error when it was filled for another
  // graph, mesh, hardware or shares.
  void share_move_times(std::shared_ptr<SharedMoveTimes> s);
  // Moves a caller's move times into the shared ones (none attached: nothing).
  void keep_move_times(MoveTimes&& cache) const;
  struct EdgeTime {
    double time = 0;       // forward + backward moves
    int64_t act_bytes = 0;  // as EdgeCost::act_bytes
    double again = 0;      // the forward move's time, when act_bytes > 0
  };
  // A row of edge u -> v's (input k) table, the prices edge_cost gives without collective records:
  // forward part (backward_part false): from the producer's output placement `src` to each consumer
  // input placement to[i] (the forward move, again when replayed or re-gathered, and the kept bytes);
  // backward part: from each consumer gradient placement to[i] to the producer's gradient layout
  // `src`. src_ix, to_ix: their placement_index.
  void edge_time_row(int u, int v, int k, const Placements& src, int src_ix, const std::vector<const Placements*>& to,
                     const std::vector<int>& to_ix, int meta, MoveTimes& cache, bool backward_part,
                     EdgeTime* out) const;
  // Gradient layout a producer expects for output placement p: P read as R.
  static Placements dual_out(const Placements& p);
  // Gradient layout choice c takes for its output `slot`: Choice::grad_out, else dual_out.
  static Placements grad_target(const Choice& c, int slot);
  // A redistribution vertex's choice: tensor placement x, gradient layout g.
  static Choice redistribute_choice(const Placements& x, const Placements& g);
  // Local (largest block, over ranks) element count of a tensor of `shape` under placements p.
  int64_t local_numel(const Shape& shape, const Placements& p) const;
  // Every placement of a tensor without Partial (parameter storage, optimizer state, data inputs)
  // that splits no dim into more pieces than it has elements.
  std::vector<Placements> storage_placements(const Shape& shape) const;

 private:
  std::shared_ptr<VertexInfo> build_op(int v, const OpCall& call) const;
  std::shared_ptr<VertexInfo> build_leaf(int v) const;
  std::vector<Placements> redistribute_placements(int v) const;
  std::shared_ptr<VertexInfo> build_redistribute(int v, std::vector<Placements> xs) const;
  Choice make_op_choice(int v, const OpCall& call, const std::vector<TensorMeta>& out_meta,
                        const Strategy& s) const;
  void classify(int v, VertexInfo& info) const;

  int64_t block_numel(const Shape& shape, const Placements& weighed, size_t block) const;
  // Whether strategy s can run with the weights: every tensor a weighted mesh dim splits holds the
  // same fraction of itself on each rank (views that merge a weighted dim with others, e.g. [b*s]
  // -> [b, s], do not, and the engine would re-split there), and no distributed step runs on a
  // weighted mesh dim (the engine runs none on weighted rows). True when nothing is weighted.
  bool weights_align(const OpCall& call, const std::vector<TensorMeta>& out_meta, const Strategy& s) const;

  const ModelGraph& g_;
  MeshSpec mesh_;
  const HardwareProfile& hw_;
  ClusterShares shares_;
  std::vector<uint16_t> weight_ids_;  // per mesh dim: interned weights, 0 = even
  // Ranks grouped by (profile, coordinates on weighted mesh dims); a group is priced on its largest
  // block, at coordinate 0 of the even mesh dims (torch.chunk's largest chunks).
  std::vector<std::vector<int64_t>> block_coords_;  // distinct block coordinates
  struct RankClass {
    size_t block;  // index into block_coords_
    const HardwareProfile* hw;
  };
  std::vector<RankClass> classes_;
  std::vector<LinkModel> links_;
  std::vector<std::shared_ptr<VertexInfo>> info_;
  std::vector<std::shared_ptr<OpCall>> calls_;
  std::vector<std::vector<TensorId>> inputs_;
  std::vector<char> rg_;
  std::vector<int> opt_of_;
  std::vector<std::vector<std::pair<int, int>>> param_uses_;
  Recompute recompute_ = Recompute::kNone;
  int64_t copies_ = 1;
  int recompute_layers_ = -1;
  std::vector<char> recomputed_;       // per vertex: its forward runs again in backward
  std::vector<char> kept_;             // per vertex: its output is saved for backward
  std::vector<uint64_t> saves_in_;     // per vertex: bit k = it saves tensor input k for backward
  // Moves by (source placements, target placements, tensor meta id): placement_key codes.
  using MoveKey = std::tuple<uint64_t, uint64_t, int>;
  int intern(const TensorMeta& m);
  mutable std::mutex mu_;
  std::vector<TensorMeta> metas_;  // interned (shape, dtype), filled by the constructor
  // Per interned meta: the planned steps of moves between its placements (null: move_time plans each
  // move; weighted shares, or too many placements).
  std::vector<const MoveSkeletons*> skeletons_;
  double step_time(int meta, int cur, int dim, int kind, bool bucketed) const;
  // The move between planned placements a -> b (a != b); false: its plan did not pack (plan it).
  bool planned_move_time(int a, int b, int meta, MoveTimes& cache, bool bucketed, MoveTime* t) const;
  mutable absl::node_hash_map<MoveKey, Move> moves_;
  std::shared_ptr<SharedMoveTimes> shared_times_;  // null: each caller's MoveTimes only
};

// Hash of a placement list (for classes).
uint64_t placement_key(const Placements& p);

// ---- Evaluating a whole plan --------------------------------------------------------------------

struct CollectiveUse {
  CommKind kind = CommKind::kLocal;  // of a redistribution, or a step's collective
  int mesh_dim = 0;
  int64_t bytes = 0;  // sent per rank
  double time_us = 0;
  std::string phase;  // "forward", "backward", "optimizer"
  int input = -1;     // the op's tensor input it moves (-1: the op's own step; optimizer: see what)
  std::string what;   // "input 0 from layers.0.norm", "step", "grad from layers.0.qkv", "update"
};

struct VertexReport {
  double compute_us = 0;  // forward + backward + optimizer compute
  double comm_us = 0;
  int64_t comm_bytes = 0;
  int64_t memory_bytes = 0;  // parameter, gradient + state, or activations attributed to the vertex
  std::vector<CollectiveUse> collectives;
};

struct PlanEval {
  std::vector<VertexReport> vertices;  // per vertex
  double step_time_us = 0, compute_us = 0, comm_us = 0;
  int64_t comm_bytes = 0;
  int64_t peak_memory_bytes = 0;
  int64_t param_bytes = 0, grad_bytes = 0, state_bytes = 0, activation_bytes = 0, working_bytes = 0;
};

// Prices a plan: one choice per vertex (null for constants). `lambda` (µs per byte, the plan's memory
// price) decides, per moved input, between keeping it and moving it again in backward. Pure.
PlanEval evaluate(const CostModel& cm, const std::vector<const Choice*>& plan, double lambda = 0);

}  // namespace dtensor::planner

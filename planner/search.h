// Plan search: one choice per vertex of a ModelGraph (a strategy per op, a placement per
// parameter, optimizer state and data input) minimizing the estimated step time of planner/cost.h
// under a per-device memory limit.
//
// - Exact part: the plan is a pairwise min-sum problem (vertex costs + edge costs that depend on the
//   producer's output placement and the consumer's input/gradient placements), solved by
//   planner/solver.h: exact on chains, trees and series-parallel graphs (transformer and ResNet
//   blocks), cutset conditioning beyond, a heuristic only past the branching budget.
// - Repeated layers are solved once: layers (Node::layer) with the same vertices, shapes and inner
//   edges, entered through one tensor and left through one vertex, are reduced to one table
//   T[entry placement][exit choice]; the chain of layers is then a chain of these tables. This is
//   exact: it is the same elimination, shared.
// - Memory limit: Lagrangian relaxation. The objective is time + lambda * bytes; lambda = 0 first;
//   if the plan does not fit, lambda grows geometrically until one fits, then bisects; the fitting
//   plan with the least time is kept. (Exact without a binding limit; with one, the best plan found
//   on the lower convex hull of (memory, time); then, between the last plan that did not fit and the
//   one that does, as many identical layers as fit take the faster plan's inside.)
// - Baselines, priced by the same model: "megatron" (Megatron-LM: linears with role column/row split
//   as Shoeybi et al. 2019 on the tensor-parallel mesh dim, the rest searched, i.e. with or without
//   sequence parallelism; data parallel with a distributed optimizer on the other dims),
//   "data-parallel" (every parameter and optimizer state replicated, the batch split over the whole
//   mesh) and "greedy" (the engine's propagate() op by op in topological order from batch-split
//   inputs and replicated parameters, as eager DTensor would run). If a baseline fits and beats the
//   search (possible only through the Lagrangian's duality gap or the heuristic), it is returned.
//
// Errors (dtensor::Error): a mesh dim no rule of the model can split ("would fit: SIZE <= N"); no plan
// within the memory limit (names the least memory any plan needs, what it is made of, and what would
// fit).
#pragma once

#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "planner/cost.h"

namespace dtensor::planner {

struct PlanOptions {
  double memory_limit_bytes = 0;  // per device; 0: the hardware profile's memory_GB * 1e9
  bool compare = true;            // price the baselines
  int64_t branch_budget = 4096;   // solver conditioning budget
  bool use_templates = true;      // solve repeated layers once
  std::string tp_dim;             // Megatron baseline's tensor-parallel dim: "" = "tp" if named, else the last
  ClusterShares shares;           // a mixed cluster and its weights (planner/cost.h); default: one profile, even
  Recompute recompute = Recompute::kNone;  // activation recomputation of the repeated layers (planner/cost.h)
  int activation_copies = 1;  // activations held this many times over (pipeline micro-batches in flight)
  int recompute_layers = -1;  // recompute only the first this many repeated layers; -1: all
  // Price the baselines on a second thread while the search runs; false: after the search, and only
  // when it found a plan that fits (plan_devices, whose workers already keep every core busy).
  bool parallel_baselines = true;
  // With parallel_baselines false: a baseline is priced only as far as it takes to know it cannot
  // beat the search (its memory-free plan, less its price for the limit, is no faster; the greedy
  // one cannot fit), else in full; PlanResult::full_baselines then prices every one (plan_devices:
  // only the chosen plan's baselines are shown, every candidate's figures are the same).
  bool baselines_to_beat = false;
  // Move times shared with other cost models of the same graph, mesh, hardware and shares (null:
  // none; plan_model_recompute shares one between its modes). Changes no figure.
  std::shared_ptr<CostModel::SharedMoveTimes> move_times;
  // plan_model_recompute (planner/devices.h): once one mode is planned, a later (less recomputing)
  // mode whose memory_lower_bound exceeds the limit is not searched (its search could not fit).
  bool bound_modes = false;
};

// Bytes per device no plan of the cost model's choices can do with less than: each vertex's least
// parameter, gradient + optimizer state or kept-activation bytes over its choices, summed (what
// evaluate() adds up, less the kept moved inputs, which only add). Planner::run() fails on every
// memory limit below it.
int64_t memory_lower_bound(const CostModel& cm);
// The same bound for the cost model of cm's graph, mesh, hardware, shares and activation copies
// under another recomputation (what it keeps is all that changes), without building it.
int64_t memory_lower_bound(const CostModel& cm, Recompute recompute, int recompute_layers);

// Step time (µs) no plan of the cost model's choices can take less than, whatever the memory: per
// op vertex its least compute (and steps) over its choices, where its input k is a parameter used
// by that vertex alone taken together with that parameter's storage and optimizer state (the
// forward move and FSDP's re-gather, the gradient's move to the optimizer state, the update, and
// the move back to storage: what data parallelism must pay), summed; every other move counted as
// free. Cheap: no edge tables, no search.
double time_lower_bound(const CostModel& cm);

// Whether the greedy baseline (every parameter and its optimizer state replicated), whose choices
// lie outside the search's and so outside the bounds above, might fit `limit` bytes per device.
bool greedy_may_fit(const CostModel& cm, double limit);

// Allowed choices per vertex (empty vector: all).
struct Constraints {
  std::vector<std::vector<char>> allowed;
};

struct Baseline {
  std::string name;       // "megatron", "data-parallel", "greedy"
  bool valid = false;     // the constraints admit a plan
  bool fits = false;      // within the memory limit
  std::string note;       // why not valid, or what it is
  PlanEval eval;
  double lambda = 0;  // its memory price (µs per byte)
  std::vector<const Choice*> plan;
  std::shared_ptr<std::vector<Choice>> owned;  // choices not in the cost model (greedy)
};

struct PlanResult {
  // The cost model the plan's choices live in (kept alive by the result; it refers to the graph and
  // the hardware profile, which must outlive it).
  std::shared_ptr<const CostModel> cost_model;
  std::vector<const Choice*> plan;  // per vertex; null for constants
  std::shared_ptr<std::vector<Choice>> owned;
  PlanEval eval;
  double memory_limit_bytes = 0;
  double plan_time_ms = 0;     // cost model + search
  double compare_time_ms = 0;  // baselines
  bool exact = true;           // the solver never fell back to its heuristic
  int solves = 0;              // min-sum solves (Lagrangian steps)
  double lambda = 0;           // µs per byte at the returned plan
  int templates = 0;           // layer templates solved once
  int templated_layers = 0;
  int mixed_layers = 0;        // layers planned like the faster plan that did not fit as a whole
  std::string source = "search";  // or the baseline that beat it
  // The search's own plan, before any baseline replaced it (equal to plan/eval when source is
  // "search"): what tests hold against the baselines, since the returned plan can never be worse.
  std::vector<const Choice*> search_plan;
  PlanEval search_eval;
  std::vector<Baseline> baselines;
  // Set when PlanOptions::baselines_to_beat left a baseline unpriced (none of them could beat the
  // search): every baseline priced in full (it keeps its planner, and so its tables, alive).
  std::function<std::vector<Baseline>()> full_baselines;
  std::vector<std::string> notes;

  // Mixed clusters (planner/cluster_plan.h): the cluster, the weights of the returned plan, and
  // every weighting the search tried (the first is even sharding).
  struct WeightOption {
    std::string basis;  // "even", "peak FLOP/s", "memory bandwidth", "peak FLOP/s x 0.5", ...
    MeshWeights weights;  // batch rows per coordinate (searched), else the speed weights
    bool searched = true;  // false: the share cannot be given in whole batch rows (error says why)
    bool valid = false;    // a plan fits the memory limit
    double step_time_us = 0;
    int64_t peak_memory_bytes = 0;
    double plan_time_ms = 0;
    std::string error;  // why not valid
  };
  std::string cluster;  // Cluster::str(); empty: one hardware profile
  MeshWeights weights;  // of the returned plan (empty: even)
  std::vector<WeightOption> weight_options;
};

struct ProblemBuilder;

// Held by a shared_ptr (plan_model), run() lets its result price the baselines later
// (PlanOptions::baselines_to_beat).
class Planner : public std::enable_shared_from_this<Planner> {
 public:
  // `cm`: the cost model already built for these options (one profile, no cluster); null: built here.
  Planner(const ModelGraph& g, const MeshSpec& mesh, const HardwareProfile& hw, PlanOptions options = {},
          std::shared_ptr<CostModel> cm = nullptr);
  ~Planner();
  const CostModel& cost_model() const { return *cm_; }
  const PlanOptions& options() const { return options_; }

  // The whole plan as one min-sum problem over every non-constant vertex (no templates);
  // var_of[v] is v's variable (-1 for constants). Objective = time_us + lambda * bytes.
  MinSumProblem build_problem(double lambda, const Constraints* c, std::vector<int>* var_of) const;
  // Solves for one lambda (with templates when enabled): choice index per vertex (-1: constants);
  // *cost = objective (+inf when the constraints admit nothing).
  std::vector<int> solve(double lambda, const Constraints* c, double* cost, bool* exact) const;
  std::vector<const Choice*> choices(const std::vector<int>& index) const;

  Constraints megatron_constraints(int tp_dim, std::string* note) const;
  Constraints data_parallel_constraints(std::string* note) const;
  Baseline greedy() const;

  // Runs the search (and baselines); throws as described above.
  PlanResult run();

  // The Lagrangian memory search under constraints `c` (null: none): the fitting plan with the least
  // time (best.valid false when none fits) and the plan with the least memory seen.
  struct Search {
    struct Found {
      bool valid = false;
      std::vector<int> x;
      PlanEval eval;
      double lambda = 0;
      bool exact = true;
    };
    Found best, least;
    int solves = 0;
    bool exact = true;
    int mixed = 0;  // layers given the faster (non-fitting) plan's inside by mix_layers
    bool stopped = false;  // stop_above: no plan that fits can be faster than it (best not valid)
  };
  // stop_above: once the memory-free plan (exact) shows that no plan that fits takes less than
  // stop_above µs, stop (the bound of lower_bound()).
  Search lagrangian(const Constraints* c, double limit,
                    double stop_above = std::numeric_limits<double>::infinity()) const;

  // Branch and bound (planner/devices.h plan_devices): the memory search's first solves, kept for
  // run(), which then does not solve them again. Returns a step time (µs) no plan that fits `limit`
  // takes less than, among the search's and the baselines' (the memory-free plan's time less its
  // tie-breaking memory price, at most 1e-9 µs per byte of the limit), or 0 when there is none to
  // give (the solver fell back to its heuristic, or the greedy baseline, whose choices lie outside
  // the search's, might fit). With `feasible`: whether the search finds a plan that fits (one more
  // solve when the memory-free plan does not fit; false: run() throws). Throws as run() does for a
  // mesh dim the model cannot split.
  double lower_bound(double limit, bool* feasible = nullptr) const;

  struct Template;  // a repeated layer (search.cc)
  struct Tables;    // cached factor tables (search.cc)

 private:
  friend struct ProblemBuilder;
  void detect_templates();
  void prefetch_tables();  // fills every edge table, on several threads
  void mix_layers(const Search::Found& fast, double limit, Search* out) const;
  void check_mesh_dims() const;
  // The baselines, priced; with `beat` finite, each only until it is known to take at least `beat`
  // µs when it fits (*cut: some baseline was left unpriced).
  std::vector<Baseline> compare(double limit, double beat = std::numeric_limits<double>::infinity(),
                                bool* cut = nullptr) const;
  const ModelGraph& g_;
  MeshSpec mesh_;
  const HardwareProfile& hw_;
  PlanOptions options_;
  std::shared_ptr<CostModel> cm_;
  std::vector<Template> templates_;
  std::vector<int> template_of_;  // per vertex: template index or -1
  std::vector<int> instance_of_;  // per vertex: instance index within its template
  std::unique_ptr<Tables> tables_;
  double build_ms_ = 0;
  // lagrangian's unconstrained solves by lambda, for lower_bound and run() to share (one thread).
  mutable std::map<double, Search::Found> solved_;
};

PlanResult plan_model(const ModelGraph& g, const MeshSpec& mesh, const HardwareProfile& hw,
                      const PlanOptions& options = {});

}  // namespace dtensor::planner

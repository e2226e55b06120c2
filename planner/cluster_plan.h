// Planning on a mixed cluster: placements and data-/tensor-parallel shares
// chosen together.
//
// A mesh dim whose ranks differ in speed (propagation/cluster.h: some coordinate's slowest rank is
// slower than another's) gets weights; the others stay even. Candidate weightings, each a full
// placement search (planner/search.h) under planner/cost.h's per-rank model:
//   "even"                   every mesh dim even (torch.chunk), the reference;
//   "peak FLOP/s"            weight of a coordinate ∝ the peak FLOP/s, in the graph's compute dtype
//                            (its largest parameter's), of that coordinate's slowest rank;
//   "peak FLOP/s x a"        a = 0.25, 0.5, 0.75: the share moved that part of the way from even to
//                            the above (communication does not scale with a share, so the best share
//                            lies between even and compute-proportional);
//   "memory bandwidth"       ∝ memory bandwidth (memory-bound ops).
// Speed weights are integers, round(100 x speed / slowest speed) (speed_weights), then made whole
// units: on data-parallel mesh dims (not named tp, cp, sp, ep or pp) the batch rows (the graph's
// first input's dim 0), on the others 4 units per rank; each coordinate's units by the weighted
// shard's largest-remainder rounding (dtensor/placement.h weighted_range), and the plan's weights
// are those counts, so that the batch and the dims the model folds it into ([batch * seq] tokens)
// split with no remainder and the weights carry through the model's views (planner/cost.h drops
// strategies where they would not). A share that gives a coordinate no unit is not searched (listed
// with searched = false); shares with the same counts are searched once (their bases joined). The plan with the least predicted step time that fits the memory
// limit is returned, searched again with the baselines (PlanOptions::compare) under its weights;
// PlanResult::weight_options holds every candidate's step time, even's first.
// Memory limit: the smallest memory_GB of the cluster's profiles unless PlanOptions gives one.
//
// Errors: dtensor::Error when the cluster's ranks are not the mesh size (Cluster::check_mesh), or, when
// no weighting fits, the even plan's error (planner/search.h).
#pragma once

#include <string>
#include <vector>

#include "planner/search.h"
#include "propagation/cluster.h"

namespace dtensor::planner {

// Per mesh dim, the speed of each coordinate (its slowest rank's): peak FLOP/s of `dtype`
// (memory_bandwidth false) or memory bandwidth (true), and weights round(100 * s / min s), empty
// where every coordinate is equally fast.
MeshWeights speed_weights(const Cluster& cluster, const MeshSpec& mesh, DType dtype, bool memory_bandwidth,
                          double share = 1.0);

// The cheapest (weights, plan) over the candidates above. `cluster` must outlive the result;
// options.shares is ignored (set per candidate).
PlanResult plan_cluster(const ModelGraph& g, const MeshSpec& mesh, const Cluster& cluster, PlanOptions options);

}  // namespace dtensor::planner

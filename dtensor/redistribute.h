// Redistribution (DESIGN §3): moving a DTensor's local data from one placement to another.
//
// Per mesh dim (S(d) even or weighted; uneven counts travel as per-rank counts):
//                S(d)->R all_gather | P->R all_reduce | P->S(d) reduce_scatter | S(i)->S(j) all_to_all
//                (also S(d)[a]->S(d)[b], same dim other weights: all_to_all of the overlapping ranges)
//                R->S(d) local chunk | R->P(op) local (coordinate 0 keeps the value, the others hold
//                op's identity: 0 for sum, the value itself for avg/max/min) | S->P, P(a)->P(b) via R.
// A plan orders these per-mesh-dim steps so that nested shards (several mesh dims sharding one tensor
// dim, applied left to right) stay valid at every step: a shard is only removed from the innermost
// mesh dim holding it, and only added where no inner mesh dim shards that tensor dim yet and every
// outer mesh dim sharding it is already final. Among valid steps, local ones go first, then
// reduce_scatter, all_to_all, all_reduce, and all_gather last, so collectives move the smallest blocks.
#pragma once

#include <memory>
#include <vector>

#include "dtensor/collectives/comm_kind.h"
#include "dtensor/core/tensor.h"
#include "dtensor/dtensor_spec.h"

namespace dtensor {

struct RedistributeStep {
  int mesh_dim;
  Placement from, to;
  CommKind kind;  // kLocal, kAllGather, kAllReduce, kReduceScatter or kAllToAll
  // Bytes each rank sends: comm_bytes_sent(kind, bytes of the block the group of mesh_dim holds,
  // group size), the block taken at the coordinate of the largest parts (0 for even shards, the
  // heaviest rank of a weighted one).
  int64_t bytes;
};

struct RedistributePlan {
  Placements src, dst;
  std::vector<RedistributeStep> steps;
  int64_t total_bytes() const;
  std::string str() const;  // "S(0)->R all_gather on mesh dim 0 (96 B); ..."
};

// Plans src -> dst for a tensor of `shape` and `dtype` on a mesh of `mesh_shape`. Placements must be
// normalized (see DTensorSpec). Pure; never communicates.
RedistributePlan compute_redistribute_plan(const Shape& mesh_shape, const Placements& src,
                                           const Placements& dst, const Shape& shape, DType dtype);

// compute_redistribute_plan through a process-wide cache keyed by (mesh shape, src, dst, shape,
// dtype); the cache is bounded (cleared when it exceeds kPlanCacheCapacity entries).
std::shared_ptr<const RedistributePlan> plan_redistribute(const DTensorSpec& src,
                                                          const Placements& dst);
// The same cache without a mesh object (for the sharding engine and the offline planner); placements
// must be normalized.
std::shared_ptr<const RedistributePlan> plan_redistribute(const Shape& mesh_shape, const Placements& src,
                                                          const Placements& dst, const Shape& shape,
                                                          DType dtype);
inline constexpr size_t kPlanCacheCapacity = 4096;
size_t plan_cache_size();

// Runs `plan` on this rank's local block `local` of a tensor with spec `src`; returns this rank's
// block under plan.dst (contiguous). Collective over the mesh groups the steps use. Throws
// dtensor::CommError from the collectives on timeout or a dead peer.
Tensor redistribute_local(const Tensor& local, const DTensorSpec& src, const RedistributePlan& plan,
                          Timeout timeout);

}  // namespace dtensor

// Distributed steps of rows that keep an op's active dim sharded (DESIGN §6). Each is registered on
// its ops' OpDef::steps; strategies/ refer to them by name (step_id).
#pragma once

#include "dtensor/device_mesh.h"
#include "ops/defs/common.h"

namespace dtensor::ops {

// The 1-based id of the op's step called `name` (for Rule::step); throws if the op has none.
uint8_t step_id(const OpDef& op, const std::string& name);

// Scans (cumsum, cumprod, logcumsumexp, cummax, cummin) along a dim sharded over one mesh dim: local
// scan, all_gather of each shard's last element (one slab per rank), local fix-up with the carry of
// the earlier shards. Traffic: (n-1) slabs a rank instead of the whole dim.
StepDef carry_exchange_step();

// max.dim, min.dim, argmax, argmin with the reduced dim(s) sharded: each rank's (value, global index)
// candidates are all_gathered over each of `mesh_dims` in turn and every rank picks the winner by the
// single-device rule (NaN first, then the larger/smaller value, then the lower index). Index -1 marks
// a rank without candidates (an empty block). Values are compared in double.
std::pair<Tensor, Tensor> gather_candidates(Tensor values, Tensor indices, bool is_max,
                                            const std::vector<int>& mesh_dims, const DeviceMesh& mesh,
                                            Timeout timeout);

}  // namespace dtensor::ops

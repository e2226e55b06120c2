// Distributed steps of rows that keep an op's active dim sharded (DESIGN §6). Each is registered on
// its ops' OpDef::steps; strategies/ refer to them by name (step_id).
#pragma once

#include <algorithm>
#include <cstdint>

#include "dtensor/device_mesh.h"
#include "ops/common/defs.h"

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

// Halo exchange along one dim of `in` input rows, `out` output rows, split by torch.chunk over `n`
// ranks: the input rows that ranks send to others in all, where `need(olo, ohi)` gives the input rows
// [lo, hi) that output rows [olo, ohi) read. A rank's average is this / n.
template <typename Need>
int64_t halo_rows_sent(int64_t n, int64_t in, int64_t out, Need need) {
  int64_t rows = 0;
  for (int64_t q = 0; q < n; ++q) {
    auto [olo, olen] = chunk_range(out, n, q);
    auto [nlo, nhi] = need(olo, olo + olen);
    for (int64_t r = 0; r < n; ++r) {
      if (r == q) continue;
      auto [ilo, ilen] = chunk_range(in, n, r);
      rows += std::max<int64_t>(0, std::min(nhi, ilo + ilen) - std::max(nlo, ilo));
    }
  }
  return rows;
}

}  // namespace dtensor::ops

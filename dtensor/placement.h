// Placement of a tensor along one mesh dim (DESIGN §2): Shard(d), Replicate(), Partial(op).
#pragma once

#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"
#include "dtensor/collectives/process_group.h"

namespace dtensor {

struct Placement {
  enum Kind : uint8_t { kReplicate, kShard, kPartial };
  Kind kind = kReplicate;
  int32_t dim = 0;                 // tensor dim, for kShard (may be negative until normalized)
  ReduceOp reduce = ReduceOp::kSum;  // for kPartial

  bool is_replicate() const { return kind == kReplicate; }
  bool is_shard() const { return kind == kShard; }
  bool is_shard(int64_t d) const { return kind == kShard && dim == d; }
  bool is_partial() const { return kind == kPartial; }
  bool operator==(const Placement& o) const {
    return kind == o.kind && (kind != kShard || dim == o.dim) && (kind != kPartial || reduce == o.reduce);
  }
  bool operator!=(const Placement& o) const { return !(*this == o); }
  // "S(0)", "R", "P(sum)", "P(avg)", "P(max)", "P(min)".
  std::string str() const;
  // Parses str()'s spellings (also "Shard(1)", "Replicate()", "Partial()", "Partial(max)").
  // Throws dtensor::Error naming the accepted spellings.
  static Placement parse(const std::string& s);
};

inline Placement Shard(int32_t dim) { return {Placement::kShard, dim, ReduceOp::kSum}; }
inline Placement Replicate() { return {Placement::kReplicate, 0, ReduceOp::kSum}; }
inline Placement Partial(ReduceOp op = ReduceOp::kSum) { return {Placement::kPartial, 0, op}; }

// One placement per mesh dim.
using Placements = absl::InlinedVector<Placement, 4>;
std::string placements_str(const Placements& p);  // "[S(0), R]"

template <typename H>
H AbslHashValue(H h, const Placement& p) {
  return H::combine(std::move(h), p.kind, p.kind == Placement::kShard ? p.dim : 0,
                    p.kind == Placement::kPartial ? static_cast<int>(p.reduce) : 0);
}

}  // namespace dtensor

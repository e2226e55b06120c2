// Placement of a tensor along one mesh dim (DESIGN §2): Shard(d), Replicate(), Partial(op), and the
// weighted shard Shard(d, weights) (DESIGN §2 "weighted shards"): rank r of the mesh dim holds a part
// of dim d proportional to weights[r], sizes rounded by largest remainder (see shard_range).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "dtensor/collectives/process_group.h"

namespace dtensor {

// Weights of weighted shards are interned process-wide: a Placement holds a 16-bit id (0 = even,
// torch.chunk), so it stays 8 bytes and trivially copyable and the even placements cost nothing more.
// Weights are positive integers stored divided by their gcd, so [6:2] and [3:1] are one layout.
// Throws dtensor::Error for an empty list, a weight < 1 or > kMaxShardWeight, or more than 65535
// distinct weight lists in one process.
inline constexpr int64_t kMaxShardWeight = 1'000'000;
uint16_t intern_shard_weights(absl::Span<const int64_t> weights);
const std::vector<int64_t>& shard_weights(uint16_t id);  // id != 0

struct Placement {
  enum Kind : uint8_t { kReplicate, kShard, kPartial };
  Kind kind = kReplicate;
  ReduceOp reduce = ReduceOp::kSum;  // for kPartial
  uint16_t weights_id = 0;           // for kShard: 0 = even (torch.chunk), else intern_shard_weights
  int32_t dim = 0;                   // tensor dim, for kShard (may be negative until normalized)

  bool is_replicate() const { return kind == kReplicate; }
  bool is_shard() const { return kind == kShard; }
  bool is_shard(int64_t d) const { return kind == kShard && dim == d; }
  bool is_partial() const { return kind == kPartial; }
  bool is_weighted() const { return kind == kShard && weights_id != 0; }
  const std::vector<int64_t>& weights() const { return shard_weights(weights_id); }  // is_weighted()
  bool operator==(const Placement& o) const {
    return kind == o.kind && (kind != kShard || (dim == o.dim && weights_id == o.weights_id)) &&
           (kind != kPartial || reduce == o.reduce);
  }
  bool operator!=(const Placement& o) const { return !(*this == o); }
  // "S(0)", "S(0)[3:2:2:1]", "R", "P(sum)", "P(avg)", "P(max)", "P(min)".
  std::string str() const;
  // Parses str()'s spellings (also "Shard(1)", "Shard(1)[3:1]", "Replicate()", "Partial()",
  // "Partial(max)"). Throws dtensor::Error naming the accepted spellings.
  static Placement parse(const std::string& s);
};

inline Placement Shard(int32_t dim) { return {Placement::kShard, ReduceOp::kSum, 0, dim}; }
// Weighted shard: one weight per rank of the mesh dim it is placed on (checked by DTensorSpec).
inline Placement Shard(int32_t dim, absl::Span<const int64_t> weights) {
  return {Placement::kShard, ReduceOp::kSum, intern_shard_weights(weights), dim};
}
inline Placement Replicate() { return {Placement::kReplicate, ReduceOp::kSum, 0, 0}; }
inline Placement Partial(ReduceOp op = ReduceOp::kSum) { return {Placement::kPartial, op, 0, 0}; }

// Start and length of chunk `idx` of a dim of size `n` split over `k` ranks (torch.chunk): chunk size
// ceil(n/k), the last ranks get the short or empty chunks.
inline std::pair<int64_t, int64_t> chunk_range(int64_t n, int64_t k, int64_t idx) {
  int64_t c = (n + k - 1) / k;
  int64_t start = n < c * idx ? n : c * idx;
  return {start, (n < start + c ? n : start + c) - start};
}

// Start and length of rank idx's part of a dim of size n split over k = weights.size() ranks by
// weight: rank r first gets floor(n * w_r / W) (W the sum), and the n - sum(floor) elements left go
// one each to the ranks with the largest remainders n * w_r mod W, ties to the lower rank (the
// largest-remainder, or Hamilton, method). Parts are consecutive in rank order and sum to n.
std::pair<int64_t, int64_t> weighted_range(int64_t n, const std::vector<int64_t>& weights, int64_t idx);

// Rank idx's range of a dim of size n under shard placement p over k ranks: chunk_range for an even
// shard, weighted_range for a weighted one (whose weight count must be k; checked).
std::pair<int64_t, int64_t> shard_range(const Placement& p, int64_t n, int64_t k, int64_t idx);

// One placement per mesh dim.
using Placements = absl::InlinedVector<Placement, 4>;
std::string placements_str(const Placements& p);  // "[S(0), R]"

// Throws dtensor::Error naming `what` when a weighted shard at mesh dim i has not mesh_shape[i]
// weights.
void check_shard_weights(const Placements& p, absl::Span<const int64_t> mesh_shape, const char* what);

template <typename H>
H AbslHashValue(H h, const Placement& p) {
  return H::combine(std::move(h), p.kind, p.kind == Placement::kShard ? p.dim : 0,
                    p.kind == Placement::kShard ? p.weights_id : 0,
                    p.kind == Placement::kPartial ? static_cast<int>(p.reduce) : 0);
}

}  // namespace dtensor

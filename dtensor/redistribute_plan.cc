// The redistribution planner: pure placement logic, no data.
#include <algorithm>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_join.h"
#include "dtensor/redistribute.h"

namespace dtensor {

int64_t RedistributePlan::total_bytes() const {
  int64_t b = 0;
  for (const auto& s : steps) b += s.bytes;
  return b;
}

std::string RedistributePlan::str() const {
  if (steps.empty()) return "no-op";
  return absl::StrJoin(steps, "; ", [](std::string* out, const RedistributeStep& s) {
    absl::StrAppend(out, s.from.str(), "->", s.to.str(), " ", comm_kind_name(s.kind),
                    " on mesh dim ", s.mesh_dim, " (", s.bytes, " B)");
  });
}

namespace {

CommKind kind_of(const Placement& from, const Placement& to) {
  if (from.is_shard() && to.is_replicate()) return CommKind::kAllGather;
  if (from.is_partial() && to.is_replicate()) return CommKind::kAllReduce;
  if (from.is_partial() && to.is_shard()) return CommKind::kReduceScatter;
  if (from.is_shard() && to.is_shard()) return CommKind::kAllToAll;
  return CommKind::kLocal;  // R->S, R->P
}

// Lower runs first: local moves, then collectives that shrink or keep data, growing ones last.
int priority(CommKind k) {
  switch (k) {
    case CommKind::kLocal: return 0;
    case CommKind::kReduceScatter: return 1;
    case CommKind::kAllToAll: return 2;
    case CommKind::kAllReduce: return 3;
    case CommKind::kAllGather: return 4;
    case CommKind::kBroadcast:
    case CommKind::kSendRecv:
    case CommKind::kBarrier: break;  // never a redistribution step
  }
  return 5;
}

class Planner {
 public:
  Planner(const Shape& mesh, const Placements& src, const Placements& dst, const Shape& shape,
          DType dtype)
      : mesh_(mesh), cur_(src), dst_(dst), shape_(shape), dtype_(dtype), n_(static_cast<int>(mesh.size())) {}

  RedistributePlan run() {
    RedistributePlan plan{cur_, dst_, {}};
    for (int iter = 0; cur_ != dst_; ++iter) {
      DT_CHECK(iter < 8 * n_ + 8, "redistribute: internal planner error from ",
               placements_str(plan.src), " to ", placements_str(dst_));
      int best = -1;
      for (int i = 0; i < n_; ++i) {
        if (cur_[i] == dst_[i] || !direct_ok(i, dst_[i])) continue;
        if (best < 0 || priority(kind_of(cur_[i], dst_[i])) < priority(kind_of(cur_[best], dst_[best])))
          best = i;
      }
      if (best >= 0) {
        emit(plan, best, dst_[best]);
        continue;
      }
      emit(plan, blocking_dim(), Replicate());
    }
    return plan;
  }

 private:
  bool inner_shards(int i, int d) const {
    for (int j = i + 1; j < n_; ++j)
      if (cur_[j].is_shard(d)) return true;
    return false;
  }
  // Adding Shard(e) at mesh dim i keeps nesting valid.
  bool can_add(int i, int e) const {
    if (inner_shards(i, e)) return false;
    for (int k = 0; k < i; ++k)
      if ((cur_[k].is_shard(e) || dst_[k].is_shard(e)) && cur_[k] != dst_[k]) return false;
    return true;
  }
  bool can_remove(int i) const { return !cur_[i].is_shard() || !inner_shards(i, cur_[i].dim); }

  bool direct_ok(int i, const Placement& to) const {
    const Placement& from = cur_[i];
    if (from.is_shard() && to.is_partial()) return false;                  // via R
    if (from.is_partial() && to.is_partial()) return false;                // P(a)->P(b) via R
    if (!can_remove(i)) return false;
    if (to.is_shard() && !can_add(i, to.dim)) return false;
    return true;
  }

  // A finished shard at mesh dim k that stands in the way of an unfinished outer mesh dim.
  bool blocks(int k) const {
    if (!cur_[k].is_shard()) return false;
    for (int i = 0; i < k; ++i)
      if (cur_[i] != dst_[i] && (cur_[i].is_shard(cur_[k].dim) || dst_[i].is_shard(cur_[k].dim)))
        return true;
    return false;
  }

  int blocking_dim() const {
    for (int k = n_ - 1; k >= 0; --k) {
      if (cur_[k].is_replicate()) continue;
      if (cur_[k] == dst_[k] && !blocks(k)) continue;
      if (!can_remove(k)) continue;
      return k;
    }
    DT_FAIL("redistribute: internal planner error: no step from ", placements_str(cur_), " to ",
            placements_str(dst_));
  }

  void emit(RedistributePlan& plan, int i, const Placement& to) {
    CommKind kind = kind_of(cur_[i], to);
    // The block the group of mesh dim i holds, at the coordinate of the largest parts: 0 for even
    // shards (torch.chunk's first chunks are the largest), the heaviest rank for weighted ones.
    std::vector<int64_t> at(n_, 0);
    for (int j = 0; j < n_; ++j)
      if (cur_[j].is_weighted()) {
        const auto& w = cur_[j].weights();
        at[j] = std::max_element(w.begin(), w.end()) - w.begin();
      }
    Shape block = local_block(shape_, cur_, mesh_, at, i).first;
    const int64_t bytes = numel(block) * static_cast<int64_t>(itemsize(dtype_));
    plan.steps.push_back({i, cur_[i], to, kind, comm_bytes_sent(kind, bytes, mesh_[i])});
    cur_[i] = to;
  }

  const Shape& mesh_;
  Placements cur_;
  const Placements& dst_;
  const Shape& shape_;
  DType dtype_;
  int n_;
};

struct PlanKey {
  Shape mesh;
  Placements src, dst;
  Shape shape;
  DType dtype;
  bool operator==(const PlanKey& o) const {
    return mesh == o.mesh && src == o.src && dst == o.dst && shape == o.shape && dtype == o.dtype;
  }
  template <typename H>
  friend H AbslHashValue(H h, const PlanKey& k) {
    return H::combine(std::move(h), k.mesh, k.src, k.dst, k.shape, k.dtype);
  }
};

std::mutex& cache_mu() {
  static std::mutex mu;
  return mu;
}
absl::flat_hash_map<PlanKey, std::shared_ptr<const RedistributePlan>>& cache() {
  static auto* c = new absl::flat_hash_map<PlanKey, std::shared_ptr<const RedistributePlan>>();
  return *c;
}

}  // namespace

RedistributePlan compute_redistribute_plan(const Shape& mesh_shape, const Placements& src,
                                           const Placements& dst, const Shape& shape, DType dtype) {
  DT_CHECK(src.size() == mesh_shape.size() && dst.size() == mesh_shape.size(),
           "redistribute: placements ", placements_str(src), " -> ", placements_str(dst),
           " for a ", mesh_shape.size(), "-d mesh; give one placement per mesh dim");
  check_shard_weights(src, mesh_shape, "redistribute");
  check_shard_weights(dst, mesh_shape, "redistribute");
  return Planner(mesh_shape, src, dst, shape, dtype).run();
}

std::shared_ptr<const RedistributePlan> plan_redistribute(const DTensorSpec& src,
                                                          const Placements& dst_in) {
  Placements dst = normalize_placements(dst_in, static_cast<int64_t>(src.shape.size()),
                                        src.mesh->ndim(), "redistribute");
  return plan_redistribute(src.mesh->shape(), src.placements, dst, src.shape, src.dtype);
}

std::shared_ptr<const RedistributePlan> plan_redistribute(const Shape& mesh_shape, const Placements& src,
                                                          const Placements& dst, const Shape& shape,
                                                          DType dtype) {
  PlanKey key{mesh_shape, src, dst, shape, dtype};
  {
    std::lock_guard<std::mutex> l(cache_mu());
    auto it = cache().find(key);
    if (it != cache().end()) return it->second;
  }
  auto plan = std::make_shared<const RedistributePlan>(
      compute_redistribute_plan(mesh_shape, src, dst, shape, dtype));
  std::lock_guard<std::mutex> l(cache_mu());
  if (cache().size() >= kPlanCacheCapacity) cache().clear();
  // Another rank may have planned the same key meanwhile: hand out the cached plan, so every caller
  // of one key shares one plan (the cache's promise; a rank seeing two plans was a race).
  return cache().emplace(std::move(key), std::move(plan)).first->second;
}

size_t plan_cache_size() {
  std::lock_guard<std::mutex> l(cache_mu());
  return cache().size();
}

}  // namespace dtensor

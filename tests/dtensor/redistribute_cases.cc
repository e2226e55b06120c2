#include "tests/dtensor/redistribute_cases.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace dtensor::testing {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
double unit(uint64_t h) { return static_cast<double>(h >> 11) / 9007199254740992.0; }  // [0,1)

Placement random_placement(std::mt19937_64& rng, int rank, ReduceOp op) {
  int r = static_cast<int>(rng() % 5);
  if (r <= 1) return Replicate();
  if (r <= 3 && rank > 0) return Shard(static_cast<int32_t>(rng() % rank));
  if (r == 4) return Partial(op);
  return Replicate();
}

// S(d) at a mesh dim of k ranks becomes S(d)[w...] with weights 1..4 two times in three.
Placement maybe_weighted(std::mt19937_64& rng, Placement p, int64_t k) {
  if (!p.is_shard() || rng() % 3 == 0) return p;
  std::vector<int64_t> w(k);
  for (auto& x : w) x = 1 + static_cast<int64_t>(rng() % 4);
  return Shard(p.dim, w);
}

}  // namespace

std::string RedistCase::str() const {
  return absl::StrCat("mesh ", shape_str(mesh), " tensor ", dtype_name(dtype), shape_str(shape), " ",
                      placements_str(src), " -> ", placements_str(dst), " seed ", seed);
}

RedistCase random_case(std::mt19937_64& rng, const Shape& mesh, bool weighted) {
  RedistCase c;
  c.mesh = mesh;
  int rank = 1 + static_cast<int>(rng() % 3);
  for (int d = 0; d < rank; ++d) c.shape.push_back(static_cast<int64_t>(rng() % 10));  // 0..9
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
  ReduceOp src_op = ops[rng() % 4], dst_op = ops[rng() % 4];
  for (size_t i = 0; i < mesh.size(); ++i) {
    c.src.push_back(random_placement(rng, rank, src_op));
    c.dst.push_back(random_placement(rng, rank, dst_op));
    if (weighted) {
      c.src.back() = maybe_weighted(rng, c.src.back(), mesh[i]);
      c.dst.back() = maybe_weighted(rng, c.dst.back(), mesh[i]);
    }
  }
  bool partial = false;
  for (size_t i = 0; i < mesh.size(); ++i) partial |= c.src[i].is_partial() || c.dst[i].is_partial();
  const DType exact[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt64};
  c.dtype = partial ? DType::kFloat64 : exact[rng() % 4];
  c.seed = rng();
  return c;
}

Tensor case_global(const RedistCase& c) {
  Tensor t = Tensor::empty(c.shape, DType::kFloat64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = std::round((unit(mix(c.seed ^ mix(i))) * 200.0 - 100.0) * 8.0) / 8.0;
  return t.to(c.dtype);
}

Tensor case_local(const RedistCase& c, const std::vector<int64_t>& coord) {
  auto [shape, offset] = local_block(c.shape, c.src, c.mesh, coord);
  Tensor x = case_global(c).to(DType::kFloat64);
  Tensor v = x;
  for (size_t d = 0; d < shape.size(); ++d) v = v.narrow(static_cast<int64_t>(d), offset[d], shape[d]);
  v = v.clone();
  // Global flat index of each local element, for per-element deterministic splits.
  std::vector<int64_t> gidx(v.numel());
  Shape gstr = contiguous_strides(c.shape);
  for (int64_t e = 0; e < v.numel(); ++e) {
    int64_t rem = e, g = 0;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      g += (rem % shape[d] + offset[d]) * gstr[d];
      rem /= shape[d];
    }
    gidx[e] = g;
  }
  double* p = v.data<double>();
  for (size_t i = 0; i < c.mesh.size(); ++i) {
    if (!c.src[i].is_partial()) continue;
    const int64_t k = c.mesh[i], me = coord[i];
    for (int64_t e = 0; e < v.numel(); ++e) {
      auto u = [&](int64_t j) { return unit(mix(c.seed ^ mix(gidx[e] * 131 + i * 17 + j))) * 60.0 - 30.0; };
      const int64_t star = static_cast<int64_t>(mix(c.seed + gidx[e] + i) % k);
      double val = p[e];
      switch (c.src[i].reduce) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: {
          double scale = c.src[i].reduce == ReduceOp::kAvg ? static_cast<double>(k) : 1.0;
          if (me < k - 1) {
            val = u(me);
          } else {
            val = val * scale;
            for (int64_t j = 0; j < k - 1; ++j) val -= u(j);
          }
          break;
        }
        case ReduceOp::kMax: val = me == star ? val : val - std::abs(u(me)); break;
        case ReduceOp::kMin: val = me == star ? val : val + std::abs(u(me)); break;
      }
      p[e] = val;
    }
  }
  return v.to(c.dtype);
}

std::string run_case(const RedistCase& c, MeshPtr mesh) {
  DTensorSpec spec(mesh, c.src, c.shape, c.dtype);
  DTensor src(spec, case_local(c, mesh->coordinate()));
  DTensor moved = src.redistribute(c.dst);
  if (moved.local_tensor().sizes() != moved.spec().local_shape())
    return absl::StrCat(c.str(), ": local shape ", shape_str(moved.local_tensor().sizes()));
  Tensor full = moved.full_tensor();
  Tensor want = case_global(c);
  bool partial = spec.has_partial() || moved.spec().has_partial();
  bool ok = partial ? allclose(full, want, 1e-9, 1e-9) : equal(full, want);
  if (ok) return "";
  return absl::StrCat(c.str(), ": max abs diff ", max_abs_diff(full, want), " plan ",
                      plan_redistribute(spec, c.dst)->str());
}

}  // namespace dtensor::testing

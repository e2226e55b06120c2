// The tiled pooling kernels' phases (kernels/cuda/pooling_tiles.h) run on the CPU the way the GPU
// runs them -- per tile: every thread's stage phase, then (after the barrier) every thread's compute
// phase -- and compared with the CPU kernels (kernels/cpu/pooling.h). Staged memory sits between
// guard zones of poison (NaN), and entries a phase does not stage hold poison too, so a read outside
// what a tile stages shows up as a wrong result. Runs on every machine: no GPU, no CUDA library.
#include "kernels/cuda/pooling_tiles.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/pooling.h"

namespace dtensor::kernels::cuda::tiles {
namespace {

using Ints = std::vector<int64_t>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct HostIo {
  template <typename T, typename S, typename I>
  static T ld(const S* p, I i) {
    return static_cast<T>(p[i]);
  }
  template <typename S, typename I, typename T>
  static void st(S* p, I i, T v) {
    p[i] = static_cast<S>(v);
  }
};

// The plane kernel's atomics, one thread at a time.
struct HostPlaneIo : HostIo {
  template <typename T>
  static void add(T* p, T v) {
    *p += v;
  }
  static void bad(int64_t* record, int64_t idx) {
    record[0] = 1;
    record[1] = idx;
  }
};

template <typename I>
struct HostDiv {
  I d;
  I div(I n) const { return n / d; }
};

// Shared memory of one block: `n` values between guard zones of poison.
// A phase that writes outside it leaves the guards changed (guards_intact); one that reads outside
// it reads poison.
template <typename V>
struct Guarded {
  explicit Guarded(int64_t n, V poison) : buf(3 * n + 64, poison), size(n), poison(poison) {}
  V* data() { return buf.data() + size + 32; }
  void reset() { std::fill(buf.begin(), buf.end(), poison); }
  bool guards_intact() const {
    auto same = [&](V v) { return v == poison || (v != v && poison != poison); };
    for (int64_t i = 0; i < size + 32; ++i)
      if (!same(buf[i])) return false;
    for (int64_t i = 2 * size + 32; i < static_cast<int64_t>(buf.size()); ++i)
      if (!same(buf[i])) return false;
    return true;
  }
  std::vector<V> buf;
  int64_t size;
  V poison;
};

// One pooling case over 1 or 2 spatial dims ([N, C, *spatial]); dilation only for max-pool.
struct Case {
  Shape shape;
  Ints kernel, stride, padding, dilation;
  bool ceil_mode = false, count_include_pad = true;
  std::optional<int64_t> divisor;
};

int dims_of(const Case& c) { return c.shape.size() <= 3 ? 1 : 2; }  // [N, C, W] / [C, W]: 1-d

Ints per_dim(const Ints& v, int dims, const Ints& dflt) {
  if (v.empty()) return dflt;
  if (v.size() == 1) return Ints(dims, v[0]);
  return v;
}

TileGeo geo_of(const Case& c, bool with_dilation) {
  const int dims = dims_of(c);
  const Shape spatial(c.shape.end() - dims, c.shape.end());
  const Ints k = per_dim(c.kernel, dims, {});
  const Ints s = per_dim(c.stride, dims, k);
  const Ints p = per_dim(c.padding, dims, Ints(dims, 0));
  const Ints d = with_dilation ? per_dim(c.dilation, dims, Ints(dims, 1)) : Ints(dims, 1);
  const Ints out = pool_output_size(spatial, k, s, p, d, c.ceil_mode);
  TileGeo g;
  g.planes = 1;
  for (size_t i = 0; i + dims < c.shape.size(); ++i) g.planes *= c.shape[i];
  const int a = dims == 2 ? 0 : -1;  // index of the H entries, -1 for 1-d
  if (a == 0) {
    g.H = spatial[0], g.OH = out[0], g.kH = k[0], g.sH = s[0], g.pH = p[0], g.dH = d[0];
  }
  const int b = dims - 1;
  g.W = spatial[b], g.OW = out[b], g.kW = k[b], g.sW = s[b], g.pW = p[b], g.dW = d[b];
  g.count_include_pad = c.count_include_pad;
  g.divisor_override = c.divisor.value_or(0);
  return g;
}

// Integers in [-3, 3] (ties for max-pool), with NaN and -inf sprinkled in when `specials`.
std::vector<double> values(int64_t n, uint64_t seed, bool specials) {
  std::vector<double> v(n);
  uint64_t x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const int r = static_cast<int>((x >> 33) % 100);
    v[i] = specials && r == 0 ? kNaN : specials && r < 4 ? -kInf : static_cast<double>(r % 7 - 3);
  }
  return v;
}

// Real values in [-1, 1) for sums that differ in the last bits when summed wrongly.
std::vector<double> reals(int64_t n, uint64_t seed) {
  std::vector<double> v(n);
  uint64_t x = seed * 40503u + 7;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = static_cast<double>(x >> 11) / 9007199254740992.0 * 2 - 1;
  }
  return v;
}

// Runs a forward plan of g on `in` as the GPU does: per tile, every thread's stage phase, then every
// thread's compute(tile, tid, stage); checks that no tile wrote outside its stage.
template <typename I, typename Compute>
void run_forward_tiles(const TileGeo& g, const std::vector<double>& in, const char* what, Compute compute) {
  TilePlan tp;
  EXPECT_TRUE(plan_forward(g, sizeof(double), &tp, 0));  // every case, however full its tiles
  // Poison: NaN spreads through a sum and beats any value in max-pool, so a read outside the stage
  // shows.
  Guarded<double> smem(tp.rh * tp.rw, kNaN);
  for (int64_t t = 0; t < tp.tiles; ++t) {
    const Tile<I> tile = tile_at<I>(tp, t);
    smem.reset();
    for (int tid = 0; tid < kTileThreads; ++tid)
      stage_forward<double, double, I, HostIo>(g, tp, tile, tid, in.data(), smem.data());
    for (int tid = 0; tid < kTileThreads; ++tid) compute(tp, tile, tid, smem.data());
    EXPECT_TRUE(smem.guards_intact()) << what << " tile " << t << " wrote outside its stage";
  }
}

template <typename I>
std::vector<double> tiled_avg(const TileGeo& g, const std::vector<double>& in) {
  std::vector<double> out(g.planes * g.OH * g.OW, kNaN);
  run_forward_tiles<I>(g, in, "avg_pool", [&](const TilePlan& tp, const Tile<I>& tile, int tid, const double* stage) {
    compute_avg_forward<double, double, I, HostIo>(g, tp, tile, tid, stage, out.data());
  });
  return out;
}

template <typename I>
std::pair<std::vector<double>, std::vector<int64_t>> tiled_max(const TileGeo& g,
                                                               const std::vector<double>& in) {
  std::vector<double> out(g.planes * g.OH * g.OW, 99);
  std::vector<int64_t> idx(out.size(), -7);
  run_forward_tiles<I>(g, in, "max_pool", [&](const TilePlan& tp, const Tile<I>& tile, int tid, const double* stage) {
    compute_max_forward<double, double, I, HostIo>(g, tp, tile, tid, stage, out.data(), idx.data());
  });
  return {out, idx};
}

template <typename I>
std::vector<double> tiled_avg_backward(const TileGeo& g, const std::vector<double>& grad_out) {
  TilePlan tp;
  EXPECT_TRUE(plan_avg_backward(g, sizeof(double), sizeof(I), &tp, 0));
  std::vector<double> grad_in(g.planes * g.H * g.W, kNaN);
  Guarded<double> smem(tp.rh * tp.rw, kNaN);
  const int64_t n_ranges = 2 * (tp.th + (int64_t{1} << tp.tw_log2));
  // Poison for ranges: an unset entry makes a loop run far outside the stage (caught by NaN).
  Guarded<I> ranges(n_ranges, I(-1000000));
  for (int64_t t = 0; t < tp.tiles; ++t) {
    const Tile<I> tile = tile_at<I>(tp, t);
    smem.reset();
    ranges.reset();
    for (int tid = 0; tid < kTileThreads; ++tid)
      stage_avg_backward_ranges<double, double, I, HostIo>(
          g, tp, tile, tid, HostDiv<I>{I(g.sH)}, HostDiv<I>{I(g.sW)}, ranges.data());
    for (int tid = 0; tid < kTileThreads; ++tid)
      stage_avg_backward_values<double, double, I, HostIo>(g, tp, tile, tid, ranges.data(),
                                                           grad_out.data(), smem.data());
    for (int tid = 0; tid < kTileThreads; ++tid)
      compute_avg_backward<double, double, I, HostIo>(g, tp, tile, tid, ranges.data(),
                                                      smem.data(), grad_in.data());
    EXPECT_TRUE(smem.guards_intact() && ranges.guards_intact())
        << "avg_pool_backward tile " << t << " wrote outside its stage";
  }
  return grad_in;
}

// Exact equality (NaN equal to NaN): the same values summed in the same order as the CPU kernel
// in double, or -- where the orders could differ -- within a few ulps (checked in double).
void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int shown = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = (std::isnan(got[i]) && std::isnan(want[i])) || got[i] == want[i] ||
                      std::abs(got[i] - want[i]) <= 1e-12 * (1 + std::abs(want[i]));
    if (!same && shown++ < 5) ADD_FAILURE() << what << ": element " << i << " got " << got[i]
                                            << ", want " << want[i];
  }
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      // 2-d: one tile, several tiles in both dims (the benchmark's 3x3 / 2 / pad 1), ceil_mode,
      // windows larger than the stride, gaps (stride > kernel), narrow and wide inputs.
      {{2, 3, 9, 8}, {3}, {1}, {}, {}, false, true, std::nullopt},
      {{2, 3, 9, 8}, {3, 2}, {2, 1}, {1, 1}, {1, 2}, true, false, std::nullopt},
      {{1, 2, 37, 70}, {3}, {2}, {1}, {}, false, true, std::nullopt},
      {{1, 2, 37, 70}, {3}, {2}, {1}, {}, true, false, std::nullopt},
      {{1, 1, 50, 33}, {4, 5}, {3, 2}, {2, 2}, {2, 1}, true, false, std::nullopt},
      {{1, 1, 100, 62}, {4, 5}, {3, 2}, {2, 2}, {2, 1}, true, false, std::nullopt},
      {{1, 2, 63, 130}, {3}, {2}, {1}, {}, false, true, std::nullopt},
      {{2, 1, 29, 41}, {2}, {3}, {1}, {3}, false, true, std::nullopt},
      {{1, 2, 11, 13}, {2}, {2}, {1}, {}, false, true, 3},
      {{1, 1, 70, 5}, {2, 1}, {1, 1}, {}, {}, false, true, std::nullopt},
      // 1-d: rows of up to 256 outputs a tile, over several tiles; dilation.
      {{2, 3, 600}, {3}, {2}, {1}, {2}, false, true, std::nullopt},
      {{1, 1, 1030}, {5}, {1}, {2}, {3}, true, false, std::nullopt},
      {{4, 7}, {4}, {}, {2}, {}, false, true, std::nullopt},
      {{3, 20, 3}, {3}, {1}, {1}, {}, true, true, std::nullopt},  // OW < 32
  };
  return c;
}

template <typename I>
void check_all(const std::string& index_type) {
  for (const Case& c : cases()) {
    const int dims = dims_of(c);
    std::string w = index_type + " shape [";
    for (int64_t s : c.shape) w += std::to_string(s) + ",";
    w += "] kernel " + std::to_string(c.kernel[0]) + " case " + std::to_string(&c - &cases()[0]);
    {  // avg_pool and its backward (no dilation)
      const TileGeo g = geo_of(c, false);
      const std::vector<double> x = reals(numel(c.shape), 3);
      const Tensor xt = Tensor::from_vector(x, c.shape);
      const Tensor want = avg_pool(xt, dims, c.kernel, c.stride, c.padding, c.ceil_mode,
                                   c.count_include_pad, c.divisor);
      expect_close(tiled_avg<I>(g, x), want.to_vector<double>(), "avg_pool " + w);
      const std::vector<double> go = reals(want.numel(), 5);
      const Tensor gt = Tensor::from_vector(go, want.sizes());
      expect_close(tiled_avg_backward<I>(g, go),
                   avg_pool_backward(gt, xt, dims, c.kernel, c.stride, c.padding, c.ceil_mode,
                                     c.count_include_pad, c.divisor)
                       .to_vector<double>(),
                   "avg_pool_backward " + w);
    }
    {  // max_pool with ties, NaN and -inf, dilation
      const TileGeo g = geo_of(c, true);
      const std::vector<double> x = values(numel(c.shape), 7, true);
      const auto want = max_pool_with_indices(Tensor::from_vector(x, c.shape), dims, c.kernel,
                                              c.stride, c.padding, c.dilation, c.ceil_mode);
      const auto got = tiled_max<I>(g, x);
      expect_close(got.first, want.first.to_vector<double>(), "max_pool values " + w);
      EXPECT_EQ(got.second, want.second.to_vector<int64_t>()) << "max_pool indices " << w;
    }
  }
}

TEST(PoolingTiles, MatchTheCpuKernelsInt64Indices) { check_all<int64_t>("int64"); }
TEST(PoolingTiles, MatchTheCpuKernelsInt32Indices) { check_all<int32_t>("int32"); }

TEST(PoolingTiles, PlansTheTileShapeAndTheStagedWindow) {
  TileGeo g;  // the benchmark's 3x3 / 2 / pad 1 over [32 x 64, 128, 128]
  g.planes = 2048, g.H = 128, g.W = 128, g.OH = 64, g.OW = 64;
  g.kH = g.kW = 3, g.sH = g.sW = 2, g.pH = g.pW = 1;
  TilePlan tp;
  ASSERT_TRUE(plan_forward(g, 4, &tp));
  EXPECT_EQ(tp.th, 8);
  EXPECT_EQ(tp.tw_log2, 5);
  EXPECT_EQ(tp.rh, 7 * 2 + 3);   // (th - 1) * s + k
  EXPECT_EQ(tp.rw, 31 * 2 + 3);  // (tw - 1) * s + k
  EXPECT_EQ(tp.tiles, 2048 * 8 * 2);
  EXPECT_EQ(tp.smem_bytes, 17 * 65 * 4);
  ASSERT_TRUE(plan_avg_backward(g, 4, 4, &tp));
  EXPECT_EQ(tp.rh, (8 + 3 - 2) / 2 + 2);
  EXPECT_EQ(tp.rw, (32 + 3 - 2) / 2 + 2);
  EXPECT_EQ(tp.tiles, 2048 * 16 * 4);
  // 1-d: a tile is a row of 256 results.
  TileGeo r;
  r.planes = 3, r.W = 1000, r.OW = 998, r.kW = 3;
  ASSERT_TRUE(plan_forward(r, 4, &tp));
  EXPECT_EQ(tp.th, 1);
  EXPECT_EQ(tp.tw_log2, 8);
  EXPECT_EQ(tp.tiles, 3 * 4);
  // Windows whose staged region exceeds kTileSmemBytes go to the per-element kernels.
  TileGeo big = r;
  big.kW = 100, big.dW = 100, big.OW = 1;
  big.W = 9901;
  EXPECT_FALSE(plan_forward(big, 4, &tp));
  TileGeo wide = g;
  wide.sH = wide.sW = 64, wide.kH = wide.kW = 64, wide.OH = wide.OW = 2;
  EXPECT_FALSE(plan_forward(wide, 4, &tp));
  // Planes too small to fill half a tile's slots, too: a 7x7 map pooled 3x3 / 2 / pad 1 (4x4
  // outputs in 4-column tiles of 64 rows, 1/4 filled), 19 x 35 outputs in 8 x 32 tiles (0.43).
  TileGeo small = g;
  small.H = small.W = 7, small.OH = small.OW = 4;
  EXPECT_FALSE(plan_forward(small, 4, &tp));
  EXPECT_FALSE(plan_avg_backward(small, 4, 4, &tp));
  EXPECT_TRUE(plan_forward(small, 4, &tp, 0));
  TileGeo odd = g;
  odd.H = 37, odd.W = 70, odd.OH = 19, odd.OW = 35;
  EXPECT_FALSE(plan_forward(odd, 4, &tp));
  EXPECT_TRUE(plan_avg_backward(odd, 4, 4, &tp));  // 37 x 70 inputs in 8 x 32 tiles: 0.67
}

// max-pool backward's plane kernel on the CPU: each block's group of planes zeroed, accumulated by
// 512 threads in turn, written; against the CPU kernel (within 1e-12: the sums' order differs).
template <typename I>
std::vector<double> plane_groups(const std::vector<double>& grad, const std::vector<int64_t>& indices,
                                 int64_t planes, int64_t in_plane, int64_t out_plane, int64_t smem_elems,
                                 int64_t* bad) {
  const int64_t group = plane_group(planes, in_plane, smem_elems);
  EXPECT_GT(group, 0);
  std::vector<double> grad_in(planes * in_plane, kNaN);
  Guarded<double> acc(group * in_plane, kNaN);
  for (int64_t p0 = 0; p0 < planes; p0 += group) {
    const int64_t n = std::min(group, planes - p0);
    acc.reset();
    for (int64_t i = 0; i < n * in_plane; ++i) acc.data()[i] = 0;
    for (int tid = 0; tid < 512; ++tid)
      plane_group_accumulate<double, double, I, HostPlaneIo>(I(p0), I(n), I(in_plane), I(out_plane),
                                                             HostDiv<I>{I(out_plane)}, tid, 512, grad.data(),
                                                             indices.data(), acc.data(), bad);
    for (int64_t i = 0; i < n * in_plane; ++i) grad_in[p0 * in_plane + i] = acc.data()[i];
    EXPECT_TRUE(acc.guards_intact()) << "plane group at " << p0 << " wrote outside its planes";
  }
  return grad_in;
}

TEST(PoolingTiles, MaxPoolBackwardPlaneGroupsMatchTheCpuKernel) {
  EXPECT_EQ(plane_group(10, 1000, 58112), 5);      // ceil(4096 / 1000) planes a block
  EXPECT_EQ(plane_group(3, 1000, 58112), 3);       // no more than there are
  EXPECT_EQ(plane_group(100, 16384, 58112), 1);    // 128 x 128 float32 planes: one each
  EXPECT_EQ(plane_group(100, 30000, 58112 / 2), 0);  // over the shared memory: the atomics kernel
  EXPECT_EQ(plane_group(100, 17, 40), 2);          // shared memory bounds the group too
  struct Shape4 {
    Shape shape;
    int64_t smem_elems;
  };
  // Groups of several planes (small planes), of one, a last group shorter than the others.
  for (const Shape4& c : {Shape4{{3, 5, 9, 8}, 58112}, Shape4{{2, 3, 70, 66}, 58112}, Shape4{{7, 11, 6}, 20}}) {
    const int dims = c.shape.size() == 3 ? 1 : 2;
    const Tensor x = Tensor::from_vector(values(numel(c.shape), 11, false), c.shape);
    const auto mp = max_pool_with_indices(x, dims, {3}, {2}, {1}, {}, false);
    const Tensor g = Tensor::from_vector(reals(mp.first.numel(), 13), mp.first.sizes());
    const int64_t in_plane = dims == 2 ? c.shape[2] * c.shape[3] : c.shape[2];
    const int64_t planes = numel(c.shape) / in_plane, out_plane = mp.first.numel() / planes;
    int64_t bad[2] = {0, 0};
    const std::vector<double> want = max_pool_backward(g, mp.second, x.sizes(), dims).to_vector<double>();
    expect_close(plane_groups<int32_t>(g.to_vector<double>(), mp.second.to_vector<int64_t>(), planes, in_plane,
                                       out_plane, c.smem_elems, bad),
                 want, "max_pool_backward planes int32");
    expect_close(plane_groups<int64_t>(g.to_vector<double>(), mp.second.to_vector<int64_t>(), planes, in_plane,
                                       out_plane, c.smem_elems, bad),
                 want, "max_pool_backward planes int64");
    EXPECT_EQ(bad[0], 0);
  }
  // An index outside its plane is reported and skipped.
  int64_t bad[2] = {0, 0};
  plane_groups<int64_t>({1, 2}, {0, 4}, 2, 4, 1, 100, bad);
  EXPECT_EQ(bad[0], 1);
  EXPECT_EQ(bad[1], 4);
}

}  // namespace
}  // namespace dtensor::kernels::cuda::tiles

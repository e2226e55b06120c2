// Tiled 1-d / 2-d pooling: each block stages one window of its source in shared memory, once, and
// its threads compute a tile of results from it. Host and device code: pooling_kernels.cu runs these
// functions as the kernels' two phases (stage, barrier, compute), and tests/cuda/pooling_tiles_test
// runs the same functions on the CPU, block by block and thread by thread, against the CPU kernels,
// so the tiles' index arithmetic is checked on machines without a GPU.
//
// Why tiles: the per-element kernels (one thread per result, reading its window from global memory)
// were instruction-bound on an H200 (Nsight: SM 85-87 %, DRAM 9-34 %; avg_pool2d 0.48 and its
// backward 0.15 of the device copy's bandwidth): each result decomposed its flat index with three
// divisions, recomputed window bounds, and the backward divided each gradient by its window's size
// once per input it covers. Staged, every source element is read from global memory about once (a
// tile's halo aside), flat indices are split per tile rather than per element, and the backward
// divides each output gradient once.
//
// The arithmetic is the per-element kernels' (and so kernels/cpu/pooling.h's): the same values summed
// in the same order, the same divisor as an integer product converted to T, the same max-pool
// comparisons in window order (first in-input position; NaN wins) and flat h * W + w indices.
#pragma once

#include <cstdint>
#include <limits>

#if defined(__CUDACC__)
#define DT_TILE_FN __host__ __device__ __forceinline__
#else
#define DT_TILE_FN inline
#endif

namespace dtensor::kernels::cuda::tiles {

inline constexpr int kTileThreads = 256;  // threads per block = results per tile
inline constexpr int kWarp = 32;
// Shared memory a tile may stage (bytes): small enough that 8 blocks of 256 threads fit an SM's
// 228 KiB (H100/H200), so staging never limits occupancy; windows needing more use the
// per-element kernels.
inline constexpr int64_t kTileSmemBytes = 24 * 1024;

// 2-d pooling geometry ([planes, H, W] -> [planes, OH, OW]); 1-d has H = OH = kH = sH = dH = 1.
struct TileGeo {
  int64_t planes = 0, H = 1, W = 1, OH = 1, OW = 1;
  int64_t kH = 1, kW = 1, sH = 1, sW = 1, pH = 0, pW = 0, dH = 1, dW = 1;
  bool count_include_pad = true;
  int64_t divisor_override = 0;  // 0: none
};

// How a result grid ([planes, rows, cols]: outputs forward, inputs backward) is cut into tiles of
// th x (1 << tw_log2) = kTileThreads results, and the staged window each tile needs (at most
// rh x rw elements).
struct TilePlan {
  int tw_log2 = 5, th = 8;
  int64_t tiles_h = 0, tiles_w = 0, tiles = 0;
  int64_t rh = 0, rw = 0;
  // Shared memory: rh * rw staged values, then (backward) the th + tw window ranges from byte
  // ranges_offset on.
  int64_t ranges_offset = 0, smem_bytes = 0;
};

// Helpers shared with pooling_kernels.cu's per-element kernels.
template <typename I>
DT_TILE_FN I imin(I a, I b) {
  return a < b ? a : b;
}
template <typename I>
DT_TILE_FN I imax(I a, I b) {
  return a > b ? a : b;
}

// One dim's factor of an average pool's divisor (the product over dims), for the window starting
// at s: with count_include_pad clipped at the right padding, else its in-input length.
template <typename I>
DT_TILE_FN I avg_extent(I s, I k, I x, I pad, bool include_pad) {
  const I e = imin(s + k, x + pad);
  return include_pad ? e - s : imin(e, x) - imax(s, I(0));
}

// The outputs [o0, o1] along one dim whose window [o * s - pad, o * s - pad + k) holds position x
// (o0 > o1: none). Div: division by s of non-negative numerators (.div(n)).
template <typename I, typename Div>
DT_TILE_FN void outputs_of(I x, I k, I s, const Div& by_s, I pad, I out, I* o0, I* o1) {
  const I n = x + pad - k + 1;
  *o0 = n <= 0 ? I(0) : by_s.div(n + s - 1);  // ceil(n / s)
  *o1 = imin(by_s.div(x + pad), out - 1);
}

// Tile columns (log2): the result columns rounded up to a power of two, at most 32 (one warp per
// tile row, which keeps a tile's staged halo small for square windows), or 256 for 1-row grids
// (1-d pooling).
inline int tile_cols_log2(int64_t rows, int64_t cols) {
  const int most = rows == 1 ? 8 : 5;
  int l = 0;
  while (l < most && (int64_t{1} << l) < cols) ++l;
  return l;
}

inline int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The least fraction of a plan's tile slots holding a result: below it (planes smaller than a tile,
// such as the 7x7 maps of a CNN's last stages) most threads of a tile would idle, and the
// per-element kernels (a thread a result) do better.
inline constexpr double kMinTileFill = 0.5;

// Cuts a [planes, rows, cols] result grid into p's tiles (tw_log2, th, the tile counts); false when
// they would be filled less than min_fill.
inline bool cut_into_tiles(int64_t planes, int64_t rows, int64_t cols, double min_fill, TilePlan* p) {
  p->tw_log2 = tile_cols_log2(rows, cols);
  p->th = kTileThreads >> p->tw_log2;
  p->tiles_h = ceil_div64(rows, p->th);
  p->tiles_w = ceil_div64(cols, int64_t{1} << p->tw_log2);
  p->tiles = planes * p->tiles_h * p->tiles_w;
  const double slots = static_cast<double>(p->tiles_h * p->th) * static_cast<double>(p->tiles_w << p->tw_log2);
  return static_cast<double>(rows) * static_cast<double>(cols) >= min_fill * slots;
}

// The plan of a forward pooling over outputs, or false when its staged window would exceed
// kTileSmemBytes (large kernels, strides or dilations) or its tiles would be filled less than
// min_fill, for the per-element kernels. elem_bytes: sizeof(T) of the compute type staged.
inline bool plan_forward(const TileGeo& g, int64_t elem_bytes, TilePlan* tp,
                         double min_fill = kMinTileFill) {
  TilePlan p;
  if (!cut_into_tiles(g.planes, g.OH, g.OW, min_fill, &p)) return false;
  const int64_t tw = int64_t{1} << p.tw_log2;
  const int64_t limit = kTileSmemBytes / elem_bytes;
  // Each factor below is at most 2^30 under the caller's index32 / int64 bounds; check as we go.
  if (g.sH > limit || g.sW > limit || g.kH > limit || g.kW > limit || g.dH > limit || g.dW > limit)
    return false;
  p.rh = (p.th - 1) * g.sH + (g.kH - 1) * g.dH + 1;
  p.rw = (tw - 1) * g.sW + (g.kW - 1) * g.dW + 1;
  if (p.rh > limit || p.rw > limit || p.rh * p.rw > limit) return false;
  p.smem_bytes = p.rh * p.rw * elem_bytes;
  *tp = p;
  return true;
}

// The plan of avg-pool's backward over inputs. A tile of th input rows meets at most
// (th + k - 2) / s + 2 output rows (outputs_of's first and last output of its first and last row),
// and likewise for columns. Refused as plan_forward refuses.
inline bool plan_avg_backward(const TileGeo& g, int64_t elem_bytes, int64_t index_bytes,
                              TilePlan* tp, double min_fill = kMinTileFill) {
  TilePlan p;
  if (!cut_into_tiles(g.planes, g.H, g.W, min_fill, &p)) return false;
  const int64_t tw = int64_t{1} << p.tw_log2;
  const int64_t limit = kTileSmemBytes / elem_bytes;
  if (g.kH > limit || g.kW > limit) return false;
  p.rh = imin((p.th + g.kH - 2) / g.sH + 2, g.OH);
  p.rw = imin((tw + g.kW - 2) / g.sW + 2, g.OW);
  if (p.rh * p.rw > limit) return false;
  // The ranges follow the staged values, aligned to their own size.
  p.ranges_offset = ceil_div64(p.rh * p.rw * elem_bytes, index_bytes) * index_bytes;
  p.smem_bytes = p.ranges_offset + 2 * (p.th + tw) * index_bytes;
  *tp = p;
  return true;
}

// One tile: its plane and the result coordinates of its first row and column.
template <typename I>
struct Tile {
  I plane, row0, col0;
};

template <typename I>
DT_TILE_FN Tile<I> tile_at(const TilePlan& tp, int64_t t) {
  const int64_t per_plane = tp.tiles_h * tp.tiles_w;
  const int64_t plane = t / per_plane, r = t - plane * per_plane;
  const int64_t ty = r / tp.tiles_w, tx = r - ty * tp.tiles_w;
  return {I(plane), I(ty * tp.th), I(tx << tp.tw_log2)};
}

// Where a forward tile's output for thread tid sits: its output (oh, ow), the start (hs, ws) of its
// window in the input, and the input position (h_org, w_org) of the tile's staged element 0; valid
// is false for threads past the output's last row or column.
template <typename I>
struct ForwardSite {
  I oh, ow, hs, ws, h_org, w_org;
  bool valid;
};

template <typename I>
DT_TILE_FN ForwardSite<I> forward_site(const TileGeo& g, const TilePlan& tp, const Tile<I>& tile, int tid) {
  ForwardSite<I> f;
  f.oh = tile.row0 + I(tid >> tp.tw_log2);
  f.ow = tile.col0 + I(tid & ((1 << tp.tw_log2) - 1));
  f.valid = f.oh < I(g.OH) && f.ow < I(g.OW);
  f.hs = f.oh * I(g.sH) - I(g.pH), f.ws = f.ow * I(g.sW) - I(g.pW);
  f.h_org = tile.row0 * I(g.sH) - I(g.pH), f.w_org = tile.col0 * I(g.sW) - I(g.pW);
  return f;
}

// Stage phase of the forward kernels: the input window of a tile of outputs, rows (tile row0 *
// sH - pH) on, columns (col0 * sW - pW) on, converted to T; positions outside the input hold 0 and
// are never read (the compute phase skips them as the per-element kernels do). Warp w stages rows
// w, w + warps, ...; its lanes consecutive columns (coalesced loads).
template <typename T, typename S, typename I, typename Io>
DT_TILE_FN void stage_forward(const TileGeo& g, const TilePlan& tp, const Tile<I>& tile, int tid,
                              const S* in, T* stage) {
  const I H = I(g.H), W = I(g.W), rw = I(tp.rw);
  const ForwardSite<I> f = forward_site(g, tp, tile, tid);
  const I h_org = f.h_org, w_org = f.w_org;
  const I base = tile.plane * H * W;
  const int warps = kTileThreads / kWarp, warp = tid / kWarp, lane = tid % kWarp;
  for (I r = warp; r < I(tp.rh); r += warps) {
    const I h = h_org + r;
    const bool row_in = h >= 0 && h < H;
    for (I c = lane; c < rw; c += kWarp) {
      const I w = w_org + c;
      stage[r * rw + c] = row_in && w >= 0 && w < W ? Io::template ld<T>(in, base + h * W + w) : T(0);
    }
  }
}

// Compute phase of avg_pool: thread tid's output, from the staged window (sum over the window's
// in-input part, h then w ascending; divisor as kernels/cpu/pooling.h).
template <typename T, typename S, typename I, typename Io>
DT_TILE_FN void compute_avg_forward(const TileGeo& g, const TilePlan& tp, const Tile<I>& tile,
                                    int tid, const T* stage, S* out) {
  const ForwardSite<I> f = forward_site(g, tp, tile, tid);
  if (!f.valid) return;
  const I H = I(g.H), W = I(g.W), kH = I(g.kH), kW = I(g.kW), rw = I(tp.rw);
  const I hs = f.hs, ws = f.ws, h_org = f.h_org, w_org = f.w_org;
  const I h0 = imax(hs, I(0)), h1 = imin(hs + kH, H);
  const I w0 = imax(ws, I(0)), w1 = imin(ws + kW, W);
  T sum = 0;
  for (I h = h0; h < h1; ++h) {
    const I row = (h - h_org) * rw - w_org;
    for (I w = w0; w < w1; ++w) sum += stage[row + w];
  }
  T v = 0;
  if (h1 > h0 && w1 > w0) {
    if (g.divisor_override != 0) {
      v = sum / static_cast<T>(g.divisor_override);
    } else {
      const bool inc = g.count_include_pad;
      v = sum / static_cast<T>(avg_extent(hs, kH, H, I(g.pH), inc) *
                               avg_extent(ws, kW, W, I(g.pW), inc));
    }
  }
  Io::st(out, (tile.plane * I(g.OH) + f.oh) * I(g.OW) + f.ow, v);
}

// Compute phase of max_pool: the window's largest in-input value in window order (a NaN wins; the
// first in-input position when none is larger than -inf) and its flat h * W + w index.
template <typename T, typename S, typename I, typename Io>
DT_TILE_FN void compute_max_forward(const TileGeo& g, const TilePlan& tp, const Tile<I>& tile,
                                    int tid, const T* stage, S* out, int64_t* indices) {
  const ForwardSite<I> f = forward_site(g, tp, tile, tid);
  if (!f.valid) return;
  const I H = I(g.H), W = I(g.W), dH = I(g.dH), dW = I(g.dW), rw = I(tp.rw);
  const I hs = f.hs, ws = f.ws, h_org = f.h_org, w_org = f.w_org;
  T best = -std::numeric_limits<T>::infinity();
  I arg = -1;
  for (I i = 0; i < I(g.kH); ++i) {
    const I h = hs + i * dH;
    if (h < 0 || h >= H) continue;
    const I row = (h - h_org) * rw - w_org;
    for (I j = 0; j < I(g.kW); ++j) {
      const I w = ws + j * dW;
      if (w < 0 || w >= W) continue;
      const I idx = h * W + w;
      if (arg < 0) arg = idx;
      const T x = stage[row + w];
      if (x > best || x != x) {
        best = x;
        arg = idx;
      }
    }
  }
  const I o = (tile.plane * I(g.OH) + f.oh) * I(g.OW) + f.ow;
  Io::st(out, o, best);
  indices[o] = static_cast<int64_t>(arg);
}

// Stage phase of avg_pool's backward, for a tile of inputs (rows row0.., columns col0..):
// 1. the output ranges [o0, o1] of each of the tile's rows and columns (ranges: th pairs, then tw);
// 2. the output gradients those ranges meet, each divided once by its window's divisor (the
//    per-element kernel divides the same value by the same divisor once per input it covers).
// The window starts at output row ranges[0] (the first row's o0) and column ranges[2 th].
template <typename T, typename S, typename I, typename Io, typename Div>
DT_TILE_FN void stage_avg_backward_ranges(const TileGeo& g, const TilePlan& tp,
                                          const Tile<I>& tile, int tid, const Div& by_sH,
                                          const Div& by_sW, I* ranges) {
  const int tw = 1 << tp.tw_log2;
  for (int i = tid; i < tp.th + tw; i += kTileThreads) {  // th + tw is 257 for 1-d tiles
    if (i < tp.th) {
      const I h = imin(tile.row0 + I(i), I(g.H) - 1);  // rows past the input repeat the last
      outputs_of(h, I(g.kH), I(g.sH), by_sH, I(g.pH), I(g.OH), &ranges[2 * i], &ranges[2 * i + 1]);
    } else {
      const int c = i - tp.th;
      const I w = imin(tile.col0 + I(c), I(g.W) - 1);
      outputs_of(w, I(g.kW), I(g.sW), by_sW, I(g.pW), I(g.OW), &ranges[2 * tp.th + 2 * c],
                   &ranges[2 * tp.th + 2 * c + 1]);
    }
  }
}

template <typename T, typename S, typename I, typename Io>
DT_TILE_FN void stage_avg_backward_values(const TileGeo& g, const TilePlan& tp,
                                          const Tile<I>& tile, int tid, const I* ranges,
                                          const S* grad_out, T* stage) {
  const int tw = 1 << tp.tw_log2;
  const I oh_org = ranges[0], ow_org = ranges[2 * tp.th];
  // The last row / column of the tile inside the input has the largest o1 (o1 is monotone).
  const I last_r = imin(I(tp.th), I(g.H) - tile.row0) - 1;
  const I last_c = imin(I(tw), I(g.W) - tile.col0) - 1;
  const I nr = ranges[2 * last_r + 1] - oh_org + 1;
  const I nc = ranges[2 * tp.th + 2 * last_c + 1] - ow_org + 1;
  const I OH = I(g.OH), OW = I(g.OW), rw = I(tp.rw);
  const I H = I(g.H), W = I(g.W), kH = I(g.kH), kW = I(g.kW), pH = I(g.pH), pW = I(g.pW);
  const bool inc = g.count_include_pad, has_override = g.divisor_override != 0;
  const T fixed = static_cast<T>(g.divisor_override);
  const I base = tile.plane * OH * OW;
  const int warps = kTileThreads / kWarp, warp = tid / kWarp, lane = tid % kWarp;
  for (I r = warp; r < nr; r += warps) {
    const I oh = oh_org + r;
    const I fh = avg_extent(oh * I(g.sH) - pH, kH, H, pH, inc);
    for (I c = lane; c < nc; c += kWarp) {
      const I ow = ow_org + c;
      const T div =
          has_override ? fixed
                       : static_cast<T>(fh * avg_extent(ow * I(g.sW) - pW, kW, W, pW, inc));
      stage[r * rw + c] = Io::template ld<T>(grad_out, base + oh * OW + ow) / div;
    }
  }
}

// Compute phase of avg_pool's backward: input (row0 + tid / tw, col0 + tid % tw)'s gradient, the sum
// of the staged quotients of the outputs covering it, in (oh, ow) ascending order.
template <typename T, typename S, typename I, typename Io>
DT_TILE_FN void compute_avg_backward(const TileGeo& g, const TilePlan& tp, const Tile<I>& tile,
                                     int tid, const I* ranges, const T* stage, S* grad_in) {
  const int r = tid >> tp.tw_log2, c = tid & ((1 << tp.tw_log2) - 1);
  const I h = tile.row0 + I(r), w = tile.col0 + I(c);
  const I H = I(g.H), W = I(g.W);
  if (h >= H || w >= W) return;
  const I oh_org = ranges[0], ow_org = ranges[2 * tp.th], rw = I(tp.rw);
  const I oh0 = ranges[2 * r], oh1 = ranges[2 * r + 1];
  const I ow0 = ranges[2 * tp.th + 2 * c], ow1 = ranges[2 * tp.th + 2 * c + 1];
  T sum = 0;
  for (I oh = oh0; oh <= oh1; ++oh) {
    const I row = (oh - oh_org) * rw - ow_org;
    for (I ow = ow0; ow <= ow1; ++ow) sum += stage[row + ow];
  }
  Io::st(grad_in, (tile.plane * H + h) * W + w, sum);
}

// ---- max-pool backward, a block per group of planes (pooling_kernels.cu's plane kernel): zero the
// group's accumulator in shared memory, barrier, accumulate, barrier, write.

// Input elements a block's group of planes should hold at least, so that small planes do not leave
// most of a block idle.
inline constexpr int64_t kPlaneGroupElems = 4096;

// Planes a block accumulates at once: enough for kPlaneGroupElems input elements, as many as
// smem_elems (the device's shared memory per block, in compute-type elements) holds, at most
// `planes`; 0 when one plane does not fit (the global-atomics kernel runs instead).
inline int64_t plane_group(int64_t planes, int64_t in_plane, int64_t smem_elems) {
  if (planes <= 0 || in_plane <= 0 || in_plane > smem_elems) return 0;
  const int64_t want = ceil_div64(kPlaneGroupElems, in_plane);
  return imin(imin(want, smem_elems / in_plane), planes);
}

// Accumulate phase for planes [p0, p0 + n): thread tid of `threads` adds each output's gradient at
// its index into acc (n planes of in_plane elements) with Io::add (atomic on the device); an index
// outside its plane is reported with Io::bad and skipped. by_out_plane: division by out_plane.
template <typename T, typename S, typename I, typename Io, typename Div>
DT_TILE_FN void plane_group_accumulate(I p0, I n, I in_plane, I out_plane, const Div& by_out_plane,
                                       int tid, int threads, const S* grad_out,
                                       const int64_t* indices, T* acc, int64_t* bad) {
  const I base = p0 * out_plane, out_n = n * out_plane;
  for (I j = tid; j < out_n; j += threads) {
    const int64_t idx = indices[base + j];
    if (idx < 0 || idx >= static_cast<int64_t>(in_plane)) {
      Io::bad(bad, idx);
      continue;
    }
    Io::add(acc + by_out_plane.div(j) * in_plane + static_cast<I>(idx),
            Io::template ld<T>(grad_out, base + j));
  }
}

}  // namespace dtensor::kernels::cuda::tiles

// flex_attention forward and backward in float32: one warp per query row, keys 32 at a time (one per lane)
// with the online softmax of FlashAttention (Dao et al., 2022), visiting only the key tiles the
// block mask marks non-empty and evaluating the mask only inside partial tiles. Not tuned.
#include "kernels/cuda/device_util.cuh"

namespace dtensor::kernels::cuda::detail {
namespace {

constexpr int kWarps = 4;               // rows per block
constexpr int kPer = kMaxHeadDim / 32;  // head-dim elements a lane owns

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The mask of kernels/cpu/flex_attention.h at global positions qp, kp.
__device__ __forceinline__ bool visible(const FlexAttention& a, const int64_t* doc, int64_t qp, int64_t kp) {
  if (doc != nullptr && doc[qp] != doc[kp]) return false;
  if (kp < a.prefix) return true;
  if (a.causal && kp > qp) return false;
  const int64_t d = qp > kp ? qp - kp : kp - qp;
  return a.window < 0 || d <= a.window;
}

// The score of query position qp (its row in qs) against key row kj at key position kp, after the
// bias and the soft cap (one function, so the backward recomputes the forward's P exactly).
__device__ __forceinline__ float flex_score(const FlexAttention& a, const float* qs, const float* kj, float slope,
                                            int64_t qp, int64_t kp) {
  float dot = 0;
  for (int64_t e = 0; e < a.E; ++e) dot += qs[e] * kj[e];
  float s = dot * a.scale + slope * static_cast<float>(kp - qp);
  if (a.soft_cap > 0.f) s = a.soft_cap * tanhf(s / a.soft_cap);
  return s;
}

__global__ void flex_forward_kernel(FlexAttention a, const float* q, const float* k, const float* v,
                                    float* out) {
  __shared__ float qs[kWarps][kMaxHeadDim];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = blockIdx.x * int64_t(kWarps) + warp;  // b * L + i
  if (row >= a.batch * a.L) return;                         // whole warp leaves together
  const int64_t b = row / a.L, i = row % a.L, b0 = b / a.per_b0;
  const int64_t qp = a.q_offset + i;
  for (int64_t e = lane; e < a.E; e += 32) qs[warp][e] = q[row * a.E + e];
  __syncwarp();
  const float* kb = k + b * a.S * a.E;
  const float* vb = v + b * a.S * a.Ev;
  const int64_t* doc = a.doc == nullptr ? nullptr : a.doc + (a.doc_rows == 1 ? 0 : b0) * a.doc_n;
  const int32_t* tiles = a.tiles + ((a.tile_rows == 1 ? 0 : b0) * a.nq + i / a.block) * a.nk;
  const float slope = a.slopes == nullptr ? 0.f : a.slopes[b % a.heads];
  float m = -INFINITY, l = 0, acc[kPer];
#pragma unroll
  for (int t = 0; t < kPer; ++t) acc[t] = 0;
  for (int64_t tj = 0; tj < a.nk; ++tj) {
    const int32_t kind = tiles[tj];
    if (kind == 0) continue;  // empty tile: skipped
    const int64_t t0 = tj * a.block, t1 = t0 + a.block < a.S ? t0 + a.block : a.S;
    for (int64_t j0 = t0; j0 < t1; j0 += 32) {
      const int64_t j = j0 + lane, kp = a.kv_offset + j;
      float s = -INFINITY;
      if (j < t1 && (kind == 2 || visible(a, doc, qp, kp))) s = flex_score(a, qs[warp], kb + j * a.E, slope, qp, kp);
      const float nm = fmaxf(m, warp_max(s));
      if (nm == -INFINITY) continue;  // everything so far is masked
      const float p = s == -INFINITY ? 0.f : expf(s - nm);
      const float corr = m == -INFINITY ? 0.f : expf(m - nm);
      l = l * corr + warp_sum(p);
#pragma unroll
      for (int t = 0; t < kPer; ++t) acc[t] *= corr;
      const int64_t n = t1 - j0 < 32 ? t1 - j0 : 32;
      for (int jj = 0; jj < n; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
        if (pj == 0.f) continue;
        const float* vj = vb + (j0 + jj) * a.Ev;
#pragma unroll
        for (int t = 0; t < kPer; ++t) {
          const int64_t d = t * 32 + lane;
          if (d < a.Ev) acc[t] += pj * vj[d];
        }
      }
      m = nm;
    }
  }
  float* oi = out + row * a.Ev;
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    const int64_t d = t * 32 + lane;
    if (d < a.Ev) oi[d] = l > 0.f ? acc[t] / l : 0.f;  // no visible key: zeros
  }
}

// The backward of flex_forward_kernel, one warp per query row: a first pass over the visible keys
// recomputes the row's max and sum, a second forms P = exp(z - m) / l and dS = P (dP - D), times
// d(cap)/dz = 1 - (z / cap)^2 (D = dO . O, the CPU kernel's rule), accumulates dQ in registers and
// adds to dK and dV with atomics (rows of several warps meet on one key). Rows with no visible key
// leave their gradients zero.
__global__ void flex_backward_kernel(FlexAttention a, const float* q, const float* k, const float* v,
                                     const float* g, const float* o, float* dq, float* dk, float* dv) {
  __shared__ float qs[kWarps][kMaxHeadDim];
  __shared__ float gs[kWarps][kMaxHeadDim];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = blockIdx.x * int64_t(kWarps) + warp;  // b * L + i
  if (row >= a.batch * a.L) return;                         // whole warp leaves together
  const int64_t b = row / a.L, i = row % a.L, b0 = b / a.per_b0;
  const int64_t qp = a.q_offset + i;
  for (int64_t e = lane; e < a.E; e += 32) qs[warp][e] = q[row * a.E + e];
  float d_part = 0;
  for (int64_t e = lane; e < a.Ev; e += 32) {
    gs[warp][e] = g[row * a.Ev + e];
    d_part += gs[warp][e] * o[row * a.Ev + e];
  }
  const float D = warp_sum(d_part);
  __syncwarp();
  const float* kb = k + b * a.S * a.E;
  const float* vb = v + b * a.S * a.Ev;
  float* dkb = dk + b * a.S * a.E;
  float* dvb = dv + b * a.S * a.Ev;
  const int64_t* doc = a.doc == nullptr ? nullptr : a.doc + (a.doc_rows == 1 ? 0 : b0) * a.doc_n;
  const int32_t* tiles = a.tiles + ((a.tile_rows == 1 ? 0 : b0) * a.nq + i / a.block) * a.nk;
  const float slope = a.slopes == nullptr ? 0.f : a.slopes[b % a.heads];
  // Pass 1: the row's max m and sum l, as the forward.
  float m = -INFINITY, l = 0;
  for (int64_t tj = 0; tj < a.nk; ++tj) {
    const int32_t kind = tiles[tj];
    if (kind == 0) continue;
    const int64_t t0 = tj * a.block, t1 = t0 + a.block < a.S ? t0 + a.block : a.S;
    for (int64_t j0 = t0; j0 < t1; j0 += 32) {
      const int64_t j = j0 + lane, kp = a.kv_offset + j;
      float s = -INFINITY;
      if (j < t1 && (kind == 2 || visible(a, doc, qp, kp))) s = flex_score(a, qs[warp], kb + j * a.E, slope, qp, kp);
      const float nm = fmaxf(m, warp_max(s));
      if (nm == -INFINITY) continue;
      const float p = s == -INFINITY ? 0.f : expf(s - nm);
      const float corr = m == -INFINITY ? 0.f : expf(m - nm);
      l = l * corr + warp_sum(p);
      m = nm;
    }
  }
  if (!(l > 0.f)) return;  // no visible key (l is the same on every lane): dQ stays zero
  // Pass 2: the gradients.
  float acc[kPer];
#pragma unroll
  for (int t = 0; t < kPer; ++t) acc[t] = 0;
  for (int64_t tj = 0; tj < a.nk; ++tj) {
    const int32_t kind = tiles[tj];
    if (kind == 0) continue;
    const int64_t t0 = tj * a.block, t1 = t0 + a.block < a.S ? t0 + a.block : a.S;
    for (int64_t j0 = t0; j0 < t1; j0 += 32) {
      const int64_t j = j0 + lane, kp = a.kv_offset + j;
      float p = 0, ds = 0;
      if (j < t1 && (kind == 2 || visible(a, doc, qp, kp))) {
        const float z = flex_score(a, qs[warp], kb + j * a.E, slope, qp, kp);
        if (z != -INFINITY) {
          p = expf(z - m) / l;
          const float* vj = vb + j * a.Ev;
          float dp = 0;
          for (int64_t e = 0; e < a.Ev; ++e) dp += gs[warp][e] * vj[e];
          ds = p * (dp - D);
          if (a.soft_cap > 0.f) ds *= 1.f - (z / a.soft_cap) * (z / a.soft_cap);
          ds *= a.scale;
        }
      }
      const int64_t n = t1 - j0 < 32 ? t1 - j0 : 32;
      for (int jj = 0; jj < n; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, p, jj), dsj = __shfl_sync(0xffffffffu, ds, jj);
        if (pj == 0.f && dsj == 0.f) continue;
        const float* kj = kb + (j0 + jj) * a.E;
        float* dkj = dkb + (j0 + jj) * a.E;
        float* dvj = dvb + (j0 + jj) * a.Ev;
#pragma unroll
        for (int t = 0; t < kPer; ++t) {
          const int64_t d = t * 32 + lane;
          if (d < a.E) {
            acc[t] += dsj * kj[d];
            if (dsj != 0.f) atomicAdd(dkj + d, dsj * qs[warp][d]);
          }
          if (d < a.Ev && pj != 0.f) atomicAdd(dvj + d, pj * gs[warp][d]);
        }
      }
    }
  }
  float* dqi = dq + row * a.E;
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    const int64_t d = t * 32 + lane;
    if (d < a.E) dqi[d] = acc[t];
  }
}

}  // namespace

void launch_flex_attention_backward(const FlexAttention& a, const float* q, const float* k, const float* v,
                                    const float* grad_out, const float* out, float* dq, float* dk, float* dv,
                                    cudaStream_t stream) {
  const int64_t rows = a.batch * a.L;
  if (rows == 0) return;
  flex_backward_kernel<<<static_cast<unsigned>(ceil_div(rows, kWarps)), kWarps * 32, 0, stream>>>(
      a, q, k, v, grad_out, out, dq, dk, dv);
}

void launch_flex_attention_forward(const FlexAttention& a, const float* q, const float* k, const float* v,
                                   float* out, cudaStream_t stream) {
  const int64_t rows = a.batch * a.L;
  if (rows == 0) return;
  flex_forward_kernel<<<static_cast<unsigned>(ceil_div(rows, kWarps)), kWarps * 32, 0, stream>>>(a, q, k, v, out);
}

}  // namespace dtensor::kernels::cuda::detail

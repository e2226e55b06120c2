// Per-element arithmetic of the CUDA register softmax (norm_kernels.cu, softmax_rows_vec_kernel),
// host and device: the kernel calls these functions on every element, and
// tests/cuda/softmax_math_test runs the same functions on the CPU, row by row, against
// kernels/cpu's softmax / log_softmax (computed in double) at the tolerances of the GPU tests, with
// ex2's error inflated, so the formulas' accuracy is checked on machines without a GPU.
//
// Why these formulas: the kernel was instruction-bound on an H200 (Nsight: SM 71 %, DRAM 35 % for
// bfloat16 [8192, 4096]; float32 and bfloat16 ran at about the same elements per second). Per
// element it took an accurate expf (9 instructions), a NaN-aware max (3) and an IEEE division
// (about 10); here exp is one FFMA and one MUFU.EX2 and the division one multiply:
//
//   softmax:      e_i = ex2(fma(x_i, log2e, -c)),  c = m * log2e rounded,  out_i = e_i * (1 / sum e)
//   log_softmax:  d_i = x_i - m,  e_i = ex2(d_i * log2e),  out_i = d_i - log(sum e)
//
// - fma(x_i, log2e, -c) = (x_i - m) * log2e + delta, delta = m * log2e - c the same for the whole
//   row (|delta| <= half an ulp of c), times one rounding relative to the result. Every e_i carries
//   the same factor 2^delta, which cancels in e_i / sum e; what is left is the one rounding of the
//   FFMA, as small as x_i - m's own rounding in the subtract-first form. delta must stay small
//   enough not to overflow the sum: prescaled() takes the form for |m| < 2^24 only (c < 2^25,
//   |delta| <= 1); larger, infinite or NaN maxima take (x_i - m) * log2e (the old kernel's form;
//   its subtraction is exact for nearby bfloat16/float16 values), which gives NaN for a row of -inf
//   or with +inf as the CPU kernel does. log_softmax needs d_i for its output anyway, so it keeps
//   the subtract-first form (a delta there would shift every output by delta * ln 2).
// - ex2 is MUFU.EX2 (ex2.approx.ftz.f32: a few ulp; results below 2^-126 flush to zero, a change
//   of less than 1.2e-38 in an output, far inside every tolerance).
// - The row's sum is at least about 1/2 (the max contributes ex2(0) or ex2(delta)), so its
//   reciprocal and log are of a normal number: one correctly rounded reciprocal and one fast log
//   (__logf: MUFU.LG2 and a multiply, a few ulp) per thread and row, then one multiply per element
//   (an error of at most one more rounding than the division's).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define DT_SOFTMAX_FN __host__ __device__ __forceinline__
#else
#define DT_SOFTMAX_FN inline
#endif

namespace dtensor::kernels::cuda::softmax_math {

inline constexpr float kLog2e = 1.44269504088896340736f;
// |row max| below which softmax takes the pre-scaled exponent (see above).
inline constexpr float kPrescaleLimit = 16777216.f;  // 2^24

// Whether the row's max m allows the pre-scaled exponent (false for inf and NaN).
DT_SOFTMAX_FN bool prescaled(float m) { return std::fabs(m) < kPrescaleLimit; }
// The row's shift c of the pre-scaled exponent.
DT_SOFTMAX_FN float prescaled_shift(float m) { return m * kLog2e; }
// The exponent (base 2) of element x: pre-scaled (one FFMA) or subtract-first.
DT_SOFTMAX_FN float exp2_arg_prescaled(float x, float c) { return std::fma(x, kLog2e, -c); }
DT_SOFTMAX_FN float exp2_arg(float d) { return d * kLog2e; }  // d = x - m

// 2^t: MUFU.EX2 on the device; on the host std::exp2 flushed to zero below 2^-126 like .ftz.
DT_SOFTMAX_FN float ex2(float t) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(t));
  return r;
#else
  return t < -126.f ? 0.f : std::exp2(t);
#endif
}

// log(s) for a row sum s >= 1/2 (or NaN / inf): __logf (MUFU.LG2) on the device.
DT_SOFTMAX_FN float log_of_sum(float s) {
#if defined(__CUDA_ARCH__)
  return __logf(s);
#else
  return std::log(s);
#endif
}

// 1 / s, correctly rounded, for a row sum s >= 1/2 (or NaN / inf).
DT_SOFTMAX_FN float reciprocal(float s) {
#if defined(__CUDA_ARCH__)
  return __frcp_rn(s);
#else
  return 1.f / s;
#endif
}

// The register kernel's shape for a row of nvec 16-byte vectors of `vec` elements: `threads` (whole
// warps) per row, up to `iters` vectors per thread; {0, 0} when the row does not fit (over 2048
// vectors). A row gets as few warps as give each thread about 32 elements (4 vectors of bfloat16 /
// float16, 8 of float32; 8 vectors of the longest 16-bit rows): the per-row work (reductions,
// reciprocal or log, index arithmetic) is then shared by twice the elements that a fixed 256
// threads gave a 4096-long row, and short rows no longer hold 256 threads for a few vectors. The
// launcher instantiates exactly these shapes.
struct VecShape {
  int threads = 0, iters = 0;
};
inline constexpr VecShape vec_shape(int64_t nvec, int vec) {
  const int target = 32 / vec;  // vectors a thread
  if (nvec < 1 || nvec > 256 * 8) return {};
  if (nvec <= 32) return {32, 1};
  if (nvec <= 64) return {32, 2};
  for (int threads = 32; threads <= 256; threads *= 2)
    if (nvec <= int64_t{threads} * target) return {threads, target};
  return {256, 8};
}

}  // namespace dtensor::kernels::cuda::softmax_math

// Internal to //kernels/cuda: the kernel launchers the .cu files implement, on raw device pointers
// and plain structs (no Tensor, no absl), so that nvcc compiles little besides the kernels. The
// host wrappers (*.cc, compiled by g++) check arguments, allocate outputs and call these.
// Every launcher enqueues on `stream` and returns at once; none synchronizes. Sizes, strides and
// offsets are in elements unless named *_bytes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "dtensor/core/dtype.h"
#include "ops/pointwise/rows.h"

namespace dtensor::kernels::cuda::detail {

inline constexpr int kMaxDims = 8;

// The type a kernel computes in: float for float32/bfloat16/float16, double for float64, wrapping
// int64 for the integer types and bool (as the CPU kernels do).
enum class Compute : int32_t { kFloat, kDouble, kInt64 };

// ---- Elementwise (pointwise_kernels.cu).
// An operand over the loop shape: data (nullptr: a scalar, `scalar_d` / `scalar_i`), its dtype and
// its strides (0 where it broadcasts).
struct Operand {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  int64_t strides[kMaxDims] = {};
  double scalar_d = 0;
  int64_t scalar_i = 0;
};
struct LoopShape {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t numel = 0;
  bool contiguous = false;  // every tensor operand is contiguous over the shape: flat indexing
};

enum class UnaryOp : int32_t {
  kCopy,
  kNeg,
  kAbs,
  kRelu,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kTanh,
  kSigmoid,
  kGelu,
  kGeluTanh,
  kSilu
};
enum class BinaryOp : int32_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kDivTrunc,
  kDivFloor,
  kMaximum,
  kMinimum,
  kPow,  // integers: exact, wrapping; a negative exponent gives 0 unless the base is 1 or -1
  // Comparisons: 1 or 0 in the compute type (stored into a bool output).
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  // d/dx gelu(x) * grad with a = grad, b = x (floating compute types only).
  kGeluBackward,
  kGeluTanhBackward
};

// ---- The pointwise rows (pointwise_rows_kernels.cu): out[i] = the row's f of the inputs, computed
// in `c` (the caller checked the dtypes against the row's rule); a bool `out` of an integral row
// keeps the low bit. Integer divisors of the rows that divide are checked by the caller.
void launch_unary_row(UnaryRow row, Compute c, const LoopShape& shape, const Operand& out,
                      const Operand& in, cudaStream_t stream);
void launch_binary_row(BinaryRow row, Compute c, const LoopShape& shape, const Operand& out,
                       const Operand& a, const Operand& b, cudaStream_t stream);
// The rows with parameters: out[i] = f(in[i]; p), p the checked parameters (NaN: None).
void launch_param_row(ParamRow row, Compute c, const LoopShape& shape, const Operand& out,
                      const Operand& in, const RowParams& p, cudaStream_t stream);

// out[i] = op(in[i]) computed in `c`; out may be any strided view (copy_ into a slice). kCopy with
// Compute::kInt64 copies integers exactly; with kDouble it converts like the CPU copy_strided.
void launch_unary(UnaryOp op, Compute c, const LoopShape& shape, const Operand& out,
                  const Operand& in, cudaStream_t stream);
// out[i] = op(a[i], b[i]) computed in `c` (add/sub: a + alpha * b). Integer division by zero sets
// *error_flag to 1 (error_flag may be null when c is not kInt64).
void launch_binary(BinaryOp op, Compute c, const LoopShape& shape, const Operand& out,
                   const Operand& a, const Operand& b, double alpha_d, int64_t alpha_i,
                   int* error_flag, cudaStream_t stream);
// out[i] = cond[i] != 0 ? a[i] : b[i] computed in `c` (a or b may be scalars).
void launch_where(Compute c, const LoopShape& shape, const Operand& out, const Operand& cond,
                  const Operand& a, const Operand& b, cudaStream_t stream);

// ---- Reductions along the middle dim of a contiguous [outer, n, inner] input
// (reduction_kernels.cu).
// kVar / kStd / kLogSumExp are two-pass (launch_reduce_two_pass); the others one-pass.
enum class ReduceKind : int32_t { kSum, kMean, kMax, kMin, kProd, kVar, kStd, kLogSumExp };
// Bytes of workspace launch_reduce / launch_arg_reduce need (0: none).
size_t reduce_workspace_bytes(Compute c, int64_t outer, int64_t n, int64_t inner, bool arg);
// out [outer, inner] of out_dtype = kind over n, accumulated in c; mean divides by n (NaN for
// n = 0); max/min propagate NaN; prod multiplies (wrapping for kInt64). kSum, kMean, kMax, kMin,
// kProd only.
void launch_reduce(ReduceKind kind, Compute c, const void* in, DType in_dtype, void* out,
                   DType out_dtype, int64_t outer, int64_t n, int64_t inner, void* workspace,
                   cudaStream_t stream);
// Bytes of workspace launch_reduce_two_pass needs (never 0).
size_t reduce_two_pass_workspace_bytes(Compute c, int64_t outer, int64_t n, int64_t inner);
// Two-pass reductions in a floating c: kVar = sum((x - mean)^2) / max(0, n - correction) and
// kStd = its square root (mean first, as the CPU kernel); kLogSumExp = log(sum(exp(x - m))) + m
// with m the max (0 when it is infinite; NaN propagates).
void launch_reduce_two_pass(ReduceKind kind, Compute c, const void* in, DType in_dtype, void* out,
                            DType out_dtype, int64_t outer, int64_t n, int64_t inner,
                            double correction, void* workspace, cudaStream_t stream);
// values (may be null; in the input dtype) and int64 indices of the max (is_max) or min along n:
// NaN wins (the first NaN), equal values give the first index. n >= 1.
void launch_arg_reduce(bool is_max, Compute c, const void* in, DType dtype, void* values,
                       int64_t* indices, int64_t outer, int64_t n, int64_t inner, void* workspace,
                       cudaStream_t stream);

// ---- Softmax, normalization, embedding (norm_kernels.cu).
// Softmax or log-softmax along n of a contiguous [outer, n, inner] tensor of `dtype`.
void launch_softmax(bool log, Compute c, const void* in, void* out, DType dtype, int64_t outer,
                    int64_t n, int64_t inner, cudaStream_t stream);
// Per row of a contiguous [rows, n] tensor: layer norm ((x - mean) / sqrt(var + eps)) or, when
// rms, x / sqrt(mean(x^2) + eps); then * weight[j] (+ bias[j]). weight / bias: null or n values
// of the compute type (float or double).
// layer_norm_backward in double (kernels/cpu/norm.h): x and g [rows, n] contiguous of their dtypes,
// w [n] (null: ones) of wdt; writes dx [rows, n] in x's dtype and dw, db [n] in double. workspace:
// layer_norm_backward_workspace(rows, n) doubles.
int64_t layer_norm_backward_chunks(int64_t rows);
inline int64_t layer_norm_backward_workspace(int64_t rows, int64_t n) {
  return 2 * rows + 2 * n * layer_norm_backward_chunks(rows);
}
void launch_layer_norm_backward(const void* x, DType xdt, const void* g, DType gdt, const void* w,
                                DType wdt, void* dx, double* dw, double* db, double* workspace,
                                int64_t rows, int64_t n, double eps, cudaStream_t stream);
void launch_norm(bool rms, Compute c, const void* x, DType dtype, const void* weight,
                 const void* bias, void* out, int64_t rows, int64_t n, double eps,
                 cudaStream_t stream);
// out[i, :] = weight[indices[i] - row_start, :] for `count` indices (int64 or int32) into a
// [rows, dim] table of elem_size-byte elements. Not masked (row_start = 0): an index outside
// [0, rows) writes nothing and sets bad_index[0] = 1, bad_index[1] = that index (one of them, when
// several; bad_index: two int64, zeroed by the caller). Masked: indices outside
// [row_start, row_end) give zero rows.
void launch_embedding(const void* weight, int64_t rows, int64_t dim, size_t elem_size,
                      const void* indices, DType index_dtype, int64_t count, bool masked,
                      int64_t row_start, int64_t row_end, void* out, int64_t* bad_index,
                      cudaStream_t stream);

// ---- Classification losses (loss_kernels.cu) over log-probabilities `input`, a contiguous
// [outer, classes, inner] tensor (classes on the middle dim); one loss per (o, i), in the order of
// a contiguous [outer, inner] target.
struct ClassLoss {
  int64_t outer = 0, classes = 0, inner = 1;
  const void* input = nullptr;
  DType input_dtype = DType::kFloat32;
  const void* weight = nullptr;  // null (all ones) or [classes] of the compute type
  // Class-index targets (int64 / int32) [outer, inner]; null when `probs` is given.
  const void* target = nullptr;
  DType target_dtype = DType::kInt64;
  int64_t ignore_index = -100;
  // Probability targets shaped like `input` (cross_entropy), or null.
  const void* probs = nullptr;
  DType probs_dtype = DType::kFloat32;
  // Index targets: also add label_smoothing / classes * (-sum_c weight[c] * input[c]) when
  // `smooth` (cross_entropy; computed even for label_smoothing 0, as the CPU kernel does).
  bool smooth = false;
  double label_smoothing = 0;
};
// losses [outer * inner] (compute type): index targets: -(1 - ls) * weight[t] * input[t] (+ the
// smoothing term), 0 for ignored targets; probabilities: -sum_c weight[c] * ((1 - ls) * q[c] +
// ls / classes) * input[c]. weights (may be null; index targets only): weight[t], or 0 for ignored
// targets. A target outside [0, classes) that is not ignore_index is reported in bad_index as in
// launch_embedding (its loss and weight are 0).
void launch_class_loss(const ClassLoss& p, Compute c, void* losses, void* weights,
                       int64_t* bad_index, cudaStream_t stream);
// weights[i] = weight[target[i]], or 1 for any target without weight; 0 where target[i] is
// ignore_index (or, with weight, outside [0, num_classes)). `count` int64 / int32 targets, weights
// of the compute type.
void launch_target_weights(Compute c, const void* target, DType target_dtype, int64_t count,
                           const void* weight, int64_t num_classes, int64_t ignore_index,
                           void* weights, cudaStream_t stream);
// nll_loss_backward into grad_input [n, c_local] of out_dtype (written entirely):
// -weight[t] * g / divisor at column t - class_start of row i, for targets t != ignore_index in
// [class_start, class_start + c_local), 0 elsewhere. g = grad_output[i] when per_element, else
// grad_output[0] (grad_output of grad_dtype). divisor: *divisor_ptr (compute type) when not null,
// else divisor_value. weight: null (ones) or [num_classes] of the compute type. Targets outside
// [0, num_classes) that are not ignore_index are reported in bad_index.
void launch_nll_loss_backward(Compute c, const void* grad_output, DType grad_dtype,
                              bool per_element, const void* target, DType target_dtype, int64_t n,
                              int64_t c_local, int64_t class_start, int64_t num_classes,
                              int64_t ignore_index, const void* weight, const void* divisor_ptr,
                              double divisor_value, void* grad_input, DType out_dtype,
                              int64_t* bad_index, cudaStream_t stream);

// ---- Gathers and scatter-adds along one dim (index_kernels.cu).
// Reports in bad_index (as in launch_embedding) an index outside [0, hi) among `count` int64 /
// int32 indices, skipping the value `skip` when has_skip (for checks the kernels below cannot make
// because they have no elements to move).
void launch_check_indices(const void* indices, DType index_dtype, int64_t count, int64_t hi,
                          bool has_skip, int64_t skip, int64_t* bad_index, cudaStream_t stream);
// out [outer, count, inner] = in [outer, n, inner] at indices (int64 / int32, `count` of them) of
// the middle dim, elements of elem_size bytes. An index outside [0, n) is reported in bad_index as
// in launch_embedding.
void launch_index_select(const void* in, int64_t outer, int64_t n, int64_t inner, size_t elem_size,
                         const void* indices, DType index_dtype, int64_t count, void* out,
                         int64_t* bad_index, cudaStream_t stream);
// embedding_dense_backward: adds grad [count, dim] (grad_dtype) row i into acc row
// indices[i] - row_start (acc: [row_count, dim] of the floating compute type, zeroed by the
// caller) with atomics, skipping padding_idx and rows outside [row_start, row_start + row_count).
// An index outside [0, num_weights) is reported in bad_index.
void launch_embedding_backward(Compute c, const void* grad, DType grad_dtype, const void* indices,
                               DType index_dtype, int64_t count, int64_t dim, int64_t num_weights,
                               int64_t padding_idx, int64_t row_start, int64_t row_count, void* acc,
                               int64_t* bad_index, cudaStream_t stream);
// torch.gather / Tensor.scatter_add along `dim` of a contiguous self, index and src of `rank`
// dims (<= kMaxDims; index sizes <= self's and src's, as kernels/cpu/gather_scatter.h checks).
// self holds rows [offset, offset + self_sizes[dim]) of a dim of `full` entries; an index outside
// [0, full) is reported in bad_index as in launch_embedding.
struct IndexAlong {
  int rank = 1;
  int dim = 0;
  int64_t index_sizes[kMaxDims] = {};
  int64_t self_strides[kMaxDims] = {};  // row-major, elements
  int64_t src_strides[kMaxDims] = {};   // scatter_add only
  int64_t block = 0;                    // self_sizes[dim]
  int64_t offset = 0, full = 0;
};
// out (index's shape, zeroed by the caller) = self at the indices held here, elem_size bytes each.
void launch_gather(const IndexAlong& g, const void* self, size_t elem_size, const int64_t* index,
                   void* out, int64_t* bad_index, cudaStream_t stream);
// acc (self converted to the compute type c) += src (also of c) at the indices held here, one
// thread a column of index (its positions that differ only along dim), in index order: the CPU
// kernel's order, so the same result. Integers wrap.
void launch_scatter_add(const IndexAlong& g, Compute c, void* acc, const int64_t* index,
                        const void* src, int64_t* bad_index, cudaStream_t stream);

// ---- Scans along the rows of a contiguous [rows, n] tensor of the compute type
// (scan_kernels.cu).
enum class ScanKind : int32_t { kSum, kProd, kLogSumExp, kMax, kMin };
size_t scan_workspace_bytes(ScanKind kind, Compute c, int64_t rows, int64_t n);
// out [rows, n] of the compute type; for kMax / kMin also int64 indices (position in the row):
// the cummax rule of kernels/cpu/scan.h (ties and NaN take the later index).
void launch_scan(ScanKind kind, Compute c, const void* in, void* out, int64_t* indices,
                 int64_t rows, int64_t n, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream);
// The scans' backward over float64 [rows, n] rows, one thread a row, with the recurrences of
// kernels/cpu/scan.h in the same order: dx from g, and for kProd / kLogSumExp the forward's input
// x and result out; kMaxMin scatter-adds g at `indices` (int64 rows) minus index_offset, skipping
// indices of earlier shards and reporting one < 0 or past index_offset + n in bad_index.
enum class ScanBackwardKind : int32_t { kSum, kProd, kLogSumExp, kMaxMin };
void launch_scan_backward(ScanBackwardKind kind, const double* g, const double* x, const double* out,
                          const int64_t* indices, int64_t index_offset, int64_t rows, int64_t n,
                          double* dx, int64_t* bad_index, cudaStream_t stream);

// ---- Order statistics per row of a contiguous [rows, n] tensor, by radix sort
// (selection_kernels.cu).
enum class SelectKind : int32_t { kMedian, kNanMedian, kKth };
size_t select_workspace_bytes(DType dtype, int64_t rows, int64_t n);
// The helpers of the distributed radix select (kernels/cpu/radix_select.h, kernels/cpu/selection.h)
// per row of a contiguous [outer, n, inner] tensor (rows = outer * inner; row r = o * inner + i):
// radix_histogram adds into out [rows, cols] (zeroed by the caller; cols = 2^bits + 1, NaNs in the
// last column); prefix: rows keys' upper bits, null when shift + bits is the key width.
void launch_radix_histogram(const void* x, DType dtype, int64_t outer, int64_t n, int64_t inner,
                            const uint64_t* prefix, int shift, int bits, int64_t cols, int64_t* out,
                            cudaStream_t stream);
// index_of_occurrence: out[r] = index_offset + j for the occurrence[r]-th (1-based) j with
// x[o, j, i] == values[r] (NaN matches NaN; values in x's dtype), or -1.
void launch_index_of_occurrence(const void* x, DType dtype, int64_t outer, int64_t n, int64_t inner,
                                const void* values, const int64_t* occurrence, int64_t index_offset, int64_t* out,
                                cudaStream_t stream);
// values (dtype) and int64 indices (may be null) per row, with the rules of
// kernels/cpu/selection.h; k is 1-based (kKth only). n >= 1, n < 2^31.
void launch_select(SelectKind kind, int64_t k, const void* in, DType dtype, int64_t rows, int64_t n,
                   void* values, int64_t* indices, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream);
// The whole-tensor median / nanmedian of n contiguous elements read about once (a sample brackets
// the median, one pass keeps the keys inside the bracket; kernels/cuda/selection_plan.h).
// median_whole_workspace_bytes is 0 where this path is not taken (short tensors, bool). The launch
// waits for the stream and returns whether `value` (one element of dtype) was written; false: the
// data defeated the bracket, and launch_select's exact path must answer.
size_t median_whole_workspace_bytes(DType dtype, int64_t n);
bool launch_median_whole(bool ignore_nan, const void* in, DType dtype, int64_t n, void* value, void* workspace,
                         cudaStream_t stream);
// value_index_backward: dx (float64 [rows, n], zeroed by the caller) gets g[r] at column
// indices[r] of row r; an index outside [0, n) is reported in bad_index.
void launch_value_index_backward(const double* g, const int64_t* indices, int64_t rows, int64_t n,
                                 double* dx, int64_t* bad_index, cudaStream_t stream);
// median_backward over `count` float64 x: dx[i] = g / (the number of hits) at the hits, x[i] == v
// (for a NaN v: x[i] NaN), else 0; g and v are one float64 each on the device; `hits` is one
// int64 zeroed by the caller.
void launch_median_backward(const double* x, int64_t count, const double* g, const double* v,
                            double* dx, int64_t* hits, cudaStream_t stream);

// ---- 2-d pooling over contiguous [planes, H, W] planes (pooling_kernels.cu).
struct Pool2d {  // 3 spatial dims; 2-d pooling has D = OD = 1, 1-d also H = OH = 1
  int64_t planes = 0, D = 1, H = 1, W = 0, OD = 1, OH = 1, OW = 0;
  int64_t kD = 1, kH = 1, kW = 1, sD = 1, sH = 1, sW = 1, pD = 0, pH = 0, pW = 0;
  int64_t dD = 1, dH = 1, dW = 1;
  bool count_include_pad = true;
  int64_t divisor_override = 0;  // 0: none
};
void launch_avg_pool2d(const Pool2d& p, Compute c, const void* in, DType dtype, void* out,
                       cudaStream_t stream);
// grad_in [planes, H, W] (written entirely) from grad_out [planes, OH, OW], both of dtype.
void launch_avg_pool2d_backward(const Pool2d& p, Compute c, const void* grad_out, DType dtype,
                                void* grad_in, cudaStream_t stream);
void launch_max_pool2d(const Pool2d& p, Compute c, const void* in, DType dtype, void* out,
                       int64_t* indices, cudaStream_t stream);
// Adds grad_out [planes, out_plane] at indices (flat within each plane of in_plane elements) into
// grad_acc [planes, in_plane] of the compute type (zeroed by the caller). An index outside the
// plane is reported in bad_index as in launch_embedding.
void launch_max_pool_backward(Compute c, const void* grad_out, DType dtype, const int64_t* indices,
                              int64_t planes, int64_t in_plane, int64_t out_plane, void* grad_acc,
                              int64_t* bad_index, cudaStream_t stream);
// The same sums with a block per group of planes accumulating in shared memory, written once into
// grad_in [planes, in_plane] of `dtype` (no zeroed accumulator, no global atomics, no conversion
// pass). max_pool_backward_plane_group: the planes a block takes on the current device, 0 when a
// plane of the compute type exceeds its shared memory per block (use launch_max_pool_backward).
// The launch returns false, launching nothing, when the device refuses the shared memory.
int64_t max_pool_backward_plane_group(Compute c, int64_t planes, int64_t in_plane, int64_t out_plane);
bool launch_max_pool_backward_planes(Compute c, const void* grad_out, DType dtype,
                                     const int64_t* indices, int64_t planes, int64_t group,
                                     int64_t in_plane, int64_t out_plane, void* grad_in,
                                     int64_t* bad_index, cudaStream_t stream);

// ---- Scaled dot-product attention in float32, or float64 (attention_kernels.cu).
// q [batch, L, E], k [batch, S, E], v [batch, S, Ev], out [batch, L, Ev], contiguous; lse [batch,
// L] = log(sum_j exp(score_ij)) of the scaled, masked scores (natural log; -inf for a row with
// every key masked, whose output is zeros, as the CPU kernel). E, Ev <= kMaxHeadDim.
inline constexpr int kMaxHeadDim = 512;
struct Attention {
  int64_t batch = 0, L = 0, S = 0, E = 0, Ev = 0;
  double scale = 1;          // cast to the compute type in the kernels
  bool causal = false;       // keep key j <= query_offset + i (top-left aligned, torch's is_causal)
  int64_t query_offset = 0;  // global position of local query row 0 (sharded query rows)
  // Optional mask broadcast over [batch dims..., L, S]: 1 = bool (true keeps), 2 = added (in the
  // compute type: float32 or float64).
  int mask_kind = 0;
  const void* mask = nullptr;
  int nbatch = 0;  // batch dims of q (their product is `batch`)
  int64_t batch_sizes[kMaxDims] = {};
  int64_t mask_batch_strides[kMaxDims] = {};
  int64_t mask_stride_l = 0, mask_stride_s = 0;
};
void launch_attention_forward(const Attention& a, const float* q, const float* k, const float* v,
                              float* out, float* lse, cudaStream_t stream);
void launch_attention_forward(const Attention& a, const double* q, const double* k,
                              const double* v, double* out, double* lse, cudaStream_t stream);
// Gradients of q, k, v (shaped like them) from dout; delta: workspace of batch * L elements.
void launch_attention_backward(const Attention& a, const float* q, const float* k, const float* v,
                               const float* out, const float* lse, const float* dout, float* dq,
                               float* dk, float* dv, float* delta, cudaStream_t stream);
void launch_attention_backward(const Attention& a, const double* q, const double* k,
                               const double* v, const double* out, const double* lse,
                               const double* dout, double* dq, double* dk, double* dv,
                               double* delta, cudaStream_t stream);

// Ring attention's merge (kernels/cpu/attention_merge.h), T float or double: out_new = the merged
// output of out [rows, ev] and out_b with lse and lse_b [rows]; lse_new = the merged lse.
void launch_merge_attention(const float* out, const float* lse, const float* out_b,
                            const float* lse_b, float* out_new, float* lse_new, int64_t rows,
                            int64_t ev, cudaStream_t stream);
void launch_merge_attention(const double* out, const double* lse, const double* out_b,
                            const double* lse_b, double* out_new, double* lse_new, int64_t rows,
                            int64_t ev, cudaStream_t stream);
// w[i] = exp(lse_b[i] - lse[i]), 0 where either is -inf.
void launch_attention_block_weight(const float* lse_b, const float* lse, float* w, int64_t n,
                                   cudaStream_t stream);
void launch_attention_block_weight(const double* lse_b, const double* lse, double* w, int64_t n,
                                   cudaStream_t stream);

// ---- flex_attention forward in float32 (flex_attention_kernels.cu). q [batch, L, E], k
// [batch, S, E], v [batch, S, Ev], out [batch, L, Ev], contiguous; tiles int32 [tile_rows, nq, nk]
// (0 empty, 1 partial, 2 full); doc int64 [doc_rows, doc_n] or null; slopes float [heads] or null.
// Mask and score modifier as kernels/cpu/flex_attention.h. E, Ev <= kMaxHeadDim.
struct FlexAttention {
  int64_t batch = 0, L = 0, S = 0, E = 0, Ev = 0;
  float scale = 1, soft_cap = 0;
  int64_t heads = 1, per_b0 = 1, q_offset = 0, kv_offset = 0;
  bool causal = false;
  int64_t window = -1, prefix = 0;
  const int64_t* doc = nullptr;
  int64_t doc_rows = 1, doc_n = 0;
  const float* slopes = nullptr;
  const int32_t* tiles = nullptr;
  int64_t tile_rows = 1, nq = 0, nk = 0, block = 1;
};
void launch_flex_attention_forward(const FlexAttention& a, const float* q, const float* k, const float* v,
                                   float* out, cudaStream_t stream);
// dq [batch, L, E], dk [batch, S, E] and dv [batch, S, Ev] zeroed by the caller (dk and dv are
// accumulated with atomics); grad_out and out are [batch, L, Ev].
void launch_flex_attention_backward(const FlexAttention& a, const float* q, const float* k, const float* v,
                                    const float* grad_out, const float* out, float* dq, float* dk, float* dv,
                                    cudaStream_t stream);

}  // namespace dtensor::kernels::cuda::detail

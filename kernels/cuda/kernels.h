// CUDA kernels of the core ops (namespace dtensor::kernels::cuda), with the semantics of the CPU
// reference kernels: each function here computes what its namesake in kernels/cpu/*.h computes
// (same arguments, dtypes, broadcasting, NaN and tie rules, errors), on tensors of one CUDA
// device. Differences, all within float tolerance: float32 / bfloat16 / float16 inputs are
// computed in float (the CPU uses double for reductions, norms, scans and pooling), float64 in
// double; sums are tree-ordered; max_pool backward and embedding_dense_backward add with atomics
// (order-dependent rounding).
// Indices are always exact.
// The functions of kernels/kernel_list.h are registered as the device versions of the cpu kernels
// (register.cc) and must keep the list's type exactly: a drifted signature fails to compile there.
//
// Conventions: inputs are CUDA tensors of one device (any strides unless noted); results are new
// contiguous tensors on that device. Work is queued on the calling thread's current stream of
// that device (dtensor/core/cuda/cuda_util.h) and the functions return without waiting, except
// where noted (index checks read a flag back, which synchronizes that stream). Errors are
// dtensor::Error naming the op, the shapes/dtypes and what is accepted, as on the CPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/core/tensor.h"
#include "kernels/cpu/flex_attention.h"  // FlexMask, FlexScoreMod
#include "kernels/cpu/pointwise.h"  // Scalar, broadcast_shapes, promote_types, result_type
#include "kernels/cpu/pointwise_rows.h"  // row_dtype

namespace dtensor::kernels::cuda {

using ::dtensor::kernels::Scalar;

// ---- Device tensors (the core's copy_/contiguous/clone/to work on CPU tensors only).
Tensor empty(const Shape& sizes, DType dtype, Device device);
Tensor zeros(const Shape& sizes, DType dtype, Device device);
Tensor full(const Shape& sizes, double value, DType dtype, Device device);
// Copies src (same shape, same device, any dtype: cast like the CPU copy_) into dst (any strides;
// overlapping src and dst are not supported). Returns dst.
Tensor& copy_(Tensor& dst, const Tensor& src);
Tensor contiguous(const Tensor& x);  // x itself when already contiguous
Tensor clone(const Tensor& x);
Tensor to(const Tensor& x, DType dtype);  // x itself when the dtype matches
// view() when the strides allow it, else a contiguous copy viewed.
Tensor reshape(const Tensor& x, const Shape& sizes);

// ---- Pointwise (kernels/cpu/pointwise.h). Integer division by zero is detected after the
// kernel (synchronizes).
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Scalar& b);
Tensor div(const Tensor& a, const Tensor& b, const std::string& rounding_mode = "");
Tensor div(const Tensor& a, const Scalar& b, const std::string& rounding_mode = "");
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// a ** b in result_type(a, b): exact wrapping integer powers (negative tensor exponents give 0
// unless the base is 1 or -1); an integer tensor to a negative integer Scalar throws.
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Scalar& exponent);
// Comparisons -> bool, compared in result_type(a, b) (NaN: only ne is true).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Scalar& b);
Tensor ne(const Tensor& a, const Scalar& b);
Tensor lt(const Tensor& a, const Scalar& b);
Tensor le(const Tensor& a, const Scalar& b);
Tensor gt(const Tensor& a, const Scalar& b);
Tensor ge(const Tensor& a, const Scalar& b);
// cond (bool) ? a : b, all three broadcast; dtype result_type(a, b).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// x with value (cast to x's dtype) where the bool mask (broadcast to x's shape) is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor silu(const Tensor& x);
// The pointwise rows (ops/pointwise/rows.h; pointwise_rows.cc). Integer divisors of fmod/remainder
// are checked on a host copy (synchronizes).
Tensor pointwise_unary_row(UnaryRow row, const Tensor& x);
Tensor pointwise_binary_row(BinaryRow row, const Tensor& a, const Tensor& b);
// d/dx gelu(x) * grad (kernels/cpu/backward.h), grad and x broadcast; promoted floating dtype.
Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate = "none");

// ---- Reductions (kernels/cpu/reduction.h): sums of float32/16-bit inputs accumulate in float.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Product (wrapping int64 for integer / bool inputs, float for float32 / 16-bit inputs).
Tensor prod(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Two-pass variance sum((x - mean)^2) / max(0, N - correction), and its square root; floating only.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, double correction = 1,
           bool keepdim = false);
Tensor std(const Tensor& x, const std::vector<int64_t>& dims = {}, double correction = 1,
           bool keepdim = false);
// log(sum(exp(x))) shifted by the max (0 when infinite); integer / bool inputs give float32.
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

// ---- Softmax and normalization (kernels/cpu/norm.h).
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape,
                  const std::optional<Tensor>& weight = std::nullopt,
                  const std::optional<Tensor>& bias = std::nullopt, double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape,
                const std::optional<Tensor>& weight = std::nullopt,
                std::optional<double> eps = std::nullopt);

// ---- Embedding (kernels/cpu/embedding.h). embedding checks its indices on the device and
// synchronizes to report a bad one.
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor embedding_masked(const Tensor& weight_shard, const Tensor& indices, int64_t row_start,
                        int64_t row_end);

// ---- Losses (kernels/cpu/loss.h) and their backward (kernels/cpu/backward.h), computed in
// float for float32 / 16-bit inputs (the CPU uses double). Class-index targets are checked on the
// device: a bad one is reported after a sync (one of them when several; the CPU names the first).
// cross_entropy: log_softmax in the compute type, then the nll / label-smoothing terms.
Tensor nll_loss(const Tensor& logp, const Tensor& target,
                const std::optional<Tensor>& weight = std::nullopt,
                const std::string& reduction = "mean", int64_t ignore_index = -100);
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const std::optional<Tensor>& weight = std::nullopt,
                     const std::string& reduction = "mean", int64_t ignore_index = -100,
                     double label_smoothing = 0.0);
// grad_input of nll_loss ([N, C] or [C], class-block form as on the CPU); "mean" without
// total_weight sums the weights on the device (no sync besides the target check).
Tensor nll_loss_backward(const Tensor& grad_output, const Shape& input_shape, DType dtype,
                         const Tensor& target, const std::optional<Tensor>& weight,
                         const std::string& reduction, int64_t ignore_index,
                         std::optional<double> total_weight = std::nullopt, int64_t class_start = 0,
                         int64_t num_classes = -1);
// The divisor of nll_loss's "mean" (sum of weight[t] over t != ignore_index); synchronizes.
double nll_loss_total_weight(const Tensor& target, const std::optional<Tensor>& weight,
                             int64_t ignore_index);
// Scatter-add of grad rows into [row_count, D] with atomics: float32 / float64 add into the
// result, 16-bit grads into a float buffer rounded once; the order of the additions (and so the
// last-bit rounding of rows hit by several indices) depends on scheduling, unlike the CPU's
// index-order double accumulation. Bad indices are reported after a sync.
Tensor embedding_dense_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights,
                                int64_t padding_idx = -1, int64_t row_start = 0,
                                int64_t row_count = -1);

// ---- Shape ops (kernels/cpu/view.h; cat is the core's, through device copies).
// Equally shaped tensors of one dtype and device joined along a new dim (one copy kernel each).
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// x's slices at `index` (int64/int32, 0-d or 1-d) along dim; bad indices reported after a sync.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

// ---- Scans (kernels/cpu/scan.h), through CUB; float32 / 16-bit inputs accumulate in float.
Tensor cumsum(const Tensor& x, int64_t dim);
Tensor cumprod(const Tensor& x, int64_t dim);
Tensor logcumsumexp(const Tensor& x, int64_t dim);
std::pair<Tensor, Tensor> cummax(const Tensor& x, int64_t dim);
std::pair<Tensor, Tensor> cummin(const Tensor& x, int64_t dim);
// The carried scans (kernels/cpu/scan.h): the scan of [carry, x] along dim without the carry's
// position (the scans are associative, scan_kernels.cu), indices mapped to global ones.
Tensor cumsum_with_carry(const Tensor& x, int64_t dim, const Tensor& carry);
Tensor cumprod_with_carry(const Tensor& x, int64_t dim, const Tensor& carry);
Tensor logcumsumexp_with_carry(const Tensor& x, int64_t dim, const Tensor& carry);
std::pair<Tensor, Tensor> cummax_with_carry(const Tensor& x, int64_t dim, const Tensor& carry_values,
                                            const Tensor& carry_indices, int64_t index_offset);
std::pair<Tensor, Tensor> cummin_with_carry(const Tensor& x, int64_t dim, const Tensor& carry_values,
                                            const Tensor& carry_indices, int64_t index_offset);

// ---- Value-selecting reductions (kernels/cpu/selection.h). median / nanmedian / kthvalue sort
// each row with CUB's radix sort (rows shorter than 2^31 elements).
std::pair<Tensor, Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min_dim(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor median(const Tensor& x);
std::pair<Tensor, Tensor> median_dim(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor nanmedian(const Tensor& x);
std::pair<Tensor, Tensor> nanmedian_dim(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim = -1,
                                   bool keepdim = false);

// ---- Pooling (kernels/cpu/pooling.h) over dims = 1, 2 or 3 spatial dims ([N, C, *spatial] or
// [C, *spatial]), the CPU kernels' checks; no slabs. max_pool_backward checks its indices
// (synchronizes).
Tensor avg_pool(const Tensor& x, int dims, std::vector<int64_t> kernel_size,
                std::vector<int64_t> stride, std::vector<int64_t> padding, bool ceil_mode,
                bool count_include_pad, std::optional<int64_t> divisor_override);
Tensor avg_pool_backward(const Tensor& grad_out, const Tensor& x, int dims,
                         std::vector<int64_t> kernel_size, std::vector<int64_t> stride,
                         std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad,
                         std::optional<int64_t> divisor_override);
std::pair<Tensor, Tensor> max_pool_with_indices(const Tensor& x, int dims,
                                                std::vector<int64_t> kernel_size,
                                                std::vector<int64_t> stride,
                                                std::vector<int64_t> padding,
                                                std::vector<int64_t> dilation, bool ceil_mode);
Tensor max_pool_backward(const Tensor& grad_out, const Tensor& indices, const Shape& input_shape,
                         int dims);

// ---- Matrix products (kernels/cpu/matrix.h) through cuBLASLt. float32 computes in float32
// unless TF32 is allowed (set_allow_tf32(true): TF32 tensor cores, ~1e-3 relative error, like
// torch.backends.cuda.matmul.allow_tf32); float64 in float64; bfloat16 / float16 on tensor cores
// with float32 accumulation and a 16-bit result.
void set_allow_tf32(bool allow);  // process-wide; default false
bool allow_tf32();
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, double beta = 1,
             double alpha = 1);
Tensor linear(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias = std::nullopt);
Tensor matmul(const Tensor& a, const Tensor& b);
// grouped_mm (kernels/cpu/grouped_mm.h): one cuBLASLt product per group; offs read on the host.
Tensor grouped_mm(const Tensor& a, const Tensor& b, const std::optional<Tensor>& offs);

// ---- Scaled dot-product attention (kernels/cpu/attention.h: same shapes, masks, query_offset,
// and a fully masked row gives zeros), no dropout.
// Backends: kCudnn runs cuDNN's fused flash attention (bfloat16 / float16, no attn_mask,
// query_offset 0, equal head dims E == Ev that are a multiple of 8 and at most 128 (256 on
// Hopper); throws naming what is unsupported); kMath runs the plain CUDA kernel in float32 (other
// dtypes are converted to float32 and back; head dims up to 512); kAuto picks cuDNN when it
// applies and was built in (and falls back to kMath when cuDNN refuses the graph), else kMath.
enum class AttentionBackend { kAuto, kCudnn, kMath };
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const std::optional<Tensor>& attn_mask = std::nullopt,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    int64_t query_offset = 0,
                                    AttentionBackend backend = AttentionBackend::kAuto);
// The forward and its softmax statistics: lse [..., L] in the compute dtype (float32; float64 for
// float64 inputs on the math path, as the CPU kernel), the natural log of each row's
// softmax denominator (of the scaled, masked scores; -inf for a fully masked row), which the
// backward can reuse instead of recomputing them.
struct AttentionOutput {
  Tensor out;
  Tensor lse;
};
AttentionOutput scaled_dot_product_attention_with_lse(
    const Tensor& query, const Tensor& key, const Tensor& value,
    const std::optional<Tensor>& attn_mask = std::nullopt, bool is_causal = false,
    std::optional<double> scale = std::nullopt, int64_t query_offset = 0,
    AttentionBackend backend = AttentionBackend::kAuto);
struct AttentionGrads {
  Tensor query, key, value;
};
// `out` is the forward's result; `lse` its statistics (recomputed by a forward when absent).
AttentionGrads scaled_dot_product_attention_backward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value,
    const Tensor& out, bool is_causal = false, std::optional<double> scale = std::nullopt,
    const std::optional<Tensor>& attn_mask = std::nullopt, int64_t query_offset = 0,
    const std::optional<Tensor>& lse = std::nullopt,
    AttentionBackend backend = AttentionBackend::kAuto);
// layer_norm_backward (kernels/cpu/norm.h): same shapes, checks and dtypes, computed in double in
// one row pass (dx) and one column pass (weight and bias gradients, summed in a fixed order).
std::vector<Tensor> layer_norm_backward(const Tensor& grad_out, const Tensor& x,
                                        const Shape& normalized_shape,
                                        const std::optional<Tensor>& weight, double eps);
// Whether the cuDNN path was built in (cuDNN's C++ frontend found at build time).
bool cudnn_attention_built();
// Ring attention's block merge and block weight (kernels/cpu/attention_merge.h: same shapes,
// dtypes float32 / float64, contiguous, results new tensors).
std::pair<Tensor, Tensor> merge_attention(const Tensor& out, const Tensor& lse, const Tensor& out_b,
                                          const Tensor& lse_b);
Tensor attention_block_weight(const Tensor& lse_b, const Tensor& lse);

// ---- flex_attention (kernels/cpu/flex_attention.h: same mask, score modifier, block mask and
// offsets), forward only: float32 math (other dtypes converted), one warp per query row with an
// online softmax over the key tiles its block-mask row marks non-empty (empty tiles are never
// read; the mask is evaluated on partial tiles only). The block mask is built on the host when
// none is given. Head dims up to 512. The backward runs on host copies (register.cc).
Tensor flex_attention(const Tensor& query, const Tensor& key, const Tensor& value, const FlexMask& mask,
                      const FlexScoreMod& score_mod, const std::optional<Tensor>& block_mask, int64_t block_size,
                      std::optional<double> scale, int64_t q_offset, int64_t kv_offset);

}  // namespace dtensor::kernels::cuda

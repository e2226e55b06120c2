// CUDA kernels of the core ops (namespace dtensor::kernels::cuda), with the semantics of the CPU
// reference kernels: each function here computes what its namesake in kernels/cpu/*.h computes
// (same arguments, dtypes, broadcasting, NaN and tie rules, errors), on tensors of one CUDA
// device. Differences, all within float tolerance: float32 / bfloat16 / float16 inputs are
// computed in float (the CPU uses double for reductions, norms, scans and pooling), float64 in
// double; sums are tree-ordered; max_pool backward adds with atomics (order-dependent rounding).
// Indices are always exact.
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
#include "kernels/cpu/pointwise.h"  // Scalar, broadcast_shapes, promote_types, result_type

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

// ---- Reductions (kernels/cpu/reduction.h): sums of float32/16-bit inputs accumulate in float.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);

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

// ---- Scans (kernels/cpu/scan.h), through CUB; float32 / 16-bit inputs accumulate in float.
Tensor cumsum(const Tensor& x, int64_t dim);
Tensor cumprod(const Tensor& x, int64_t dim);
Tensor logcumsumexp(const Tensor& x, int64_t dim);
std::pair<Tensor, Tensor> cummax(const Tensor& x, int64_t dim);
std::pair<Tensor, Tensor> cummin(const Tensor& x, int64_t dim);

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

// ---- Pooling (kernels/cpu/pooling.h) for dims == 2 ([N, C, H, W] or [C, H, W]); no slabs.
// Other dims throw naming the accepted value. max_pool_backward checks its indices (synchronizes).
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

// ---- Matrix products (kernels/cpu/matmul.h) through cuBLASLt. float32 computes in float32
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
// The forward and its softmax statistics: lse [..., L] float32, the natural log of each row's
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
// Whether the cuDNN path was built in (cuDNN's C++ frontend found at build time).
bool cudnn_attention_built();

}  // namespace dtensor::kernels::cuda

// CUDA kernels of the core ops (namespace dtensor::kernels::cuda), with the semantics of the CPU
// reference kernels: each function here computes what its namesake in kernels/cpu/*.h computes
// (same arguments, dtypes, broadcasting, NaN and tie rules, errors), on tensors of one CUDA
// device. Differences, all within float tolerance: float32 / bfloat16 / float16 inputs are
// computed in float (the CPU uses double for reductions, norms, scans and pooling), float64 in
// double; sums are tree-ordered; max_pool backward and embedding_dense_backward add with atomics
// (order-dependent rounding).
// Indices are always exact.
// The kernels of kernels/kernel_list.h are declared here from the list itself (one declaration:
// the list entry's type, without default arguments), defined by the CUDA sources or by register.cc,
// and registered as the device versions of the cpu kernels (register.cc); what each computes is
// documented once, at the cpu declaration. The notes below say only where the CUDA version differs.
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
#include <type_traits>
#include <utility>
#include <vector>

#include "dtensor/core/tensor.h"
#include "kernels/kernel_list.h"
#include "kernels/cpu/attention.h"  // AttentionGrads, AttentionWithLse
#include "kernels/cpu/flex_attention.h"  // FlexMask, FlexScoreMod
#include "kernels/cpu/pointwise.h"  // Scalar, broadcast_shapes, promote_types, result_type
#include "kernels/cpu/pointwise_rows.h"  // row_dtype

namespace dtensor::kernels::cuda {

using ::dtensor::kernels::AttentionGrads;
using ::dtensor::kernels::AttentionWithLse;
using ::dtensor::kernels::Scalar;

// ---- Every kernel of kernels/kernel_list.h: cuda::<function> with the entry's exact type.
#define DT_CUDA_DECLARE(slot, function, type) std::type_identity_t<type> function;
DT_KERNEL_LIST(DT_CUDA_DECLARE)
#undef DT_CUDA_DECLARE

// Where the CUDA versions differ from the cpu kernels, by family:
// - Pointwise: integer division by zero is detected after the kernel (synchronizes); the rows'
//   integer divisors of fmod/remainder are checked on a host copy (synchronizes).
// - Reductions: sums of float32 / 16-bit inputs accumulate in float.
// - Embedding: indices are checked on the device and a bad one is reported after a sync;
//   embedding_dense_backward scatter-adds with atomics (float32 / float64 into the result, 16-bit
//   grads into a float buffer rounded once), so the last-bit rounding of rows hit by several
//   indices depends on scheduling, unlike the CPU's index-order double accumulation.
// - Losses and nll_loss_backward compute in float for float32 / 16-bit inputs (the CPU in double);
//   class-index targets are checked on the device, a bad one reported after a sync (one of them
//   when several; the CPU names the first); nll_loss_backward's "mean" without total_weight sums
//   the weights on the device.
// - Shape ops: stack is one copy kernel per tensor; index_select reports bad indices after a sync.
// - Index arithmetic in 32 bits (multiply-high division) where every index fits, else 64.
// - Softmax rows of float32 / 16-bit floats up to 8 16-byte vectors per thread stay in registers.
// - Scans run through CUB (one row without keys); float32 / 16-bit inputs accumulate in float. The carried scans scan
//   [carry, x] along dim without the carry's position (the scans are associative).
// - Selection: median / nanmedian / kthvalue sort each row with CUB's radix sort (rows shorter
//   than 2^31 elements).
// - The distributed radix select's helpers: radix_histogram counts per block in shared memory
//   (digits up to 12 bits; wider ones with global atomics), index_of_occurrence is one block a row.
// - Pooling: slabs go to the host fallback (register.cc); without slabs the CUDA kernels below.
// - Matrix products run through cuBLASLt (see set_allow_tf32); grouped_mm is one cuBLASLt product
//   per group, offs read on the host.
// - Attention: the backends below; layer_norm_backward computes in double in one row pass (dx)
//   and one column pass (weight and bias gradients, summed in a fixed order); merge_attention and
//   attention_block_weight take float32 / float64 contiguous tensors.
// - flex_attention: float32 math (other dtypes converted), one warp per query row with an online
//   softmax over the key tiles its block-mask row marks non-empty (empty tiles are never read;
//   the mask is evaluated on partial tiles only); the block mask is built on the host when none is
//   given; head dims up to 512. flex_attention_backward: the same walk twice per row (max and sum,
//   then dS), dQ in registers, dK and dV added with float atomics (their sums' order varies from
//   run to run).

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

// The divisor of nll_loss's "mean" (sum of weight[t] over t != ignore_index); synchronizes.
double nll_loss_total_weight(const Tensor& target, const std::optional<Tensor>& weight,
                             int64_t ignore_index);

// ---- Pooling without slabs over dims = 1, 2 or 3 spatial dims ([N, C, *spatial] or
// [C, *spatial]), the CPU kernels' checks. max_pool_backward checks its indices (synchronizes).
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

// ---- Matrix products: float32 computes in float32 unless TF32 is allowed (set_allow_tf32(true):
// TF32 tensor cores, ~1e-3 relative error, like torch.backends.cuda.matmul.allow_tf32); float64 in
// float64; bfloat16 / float16 on tensor cores with float32 accumulation and a 16-bit result.
void set_allow_tf32(bool allow);  // process-wide; default false
bool allow_tf32();

// ---- Scaled dot-product attention with a chosen backend (the list's versions use kAuto), no
// dropout. kCudnn runs cuDNN's fused flash attention (bfloat16 / float16, no attn_mask,
// query_offset 0, equal head dims E == Ev that are a multiple of 8 and at most 128 (256 on
// Hopper); throws naming what is unsupported); kMath runs the plain CUDA kernel in float32 (other
// dtypes are converted to float32 and back; head dims up to 512); kAuto picks cuDNN when it
// applies and was built in (and falls back to kMath when cuDNN refuses the graph), else kMath.
// Every argument is explicit, so these never compete with the list's overloads.
enum class AttentionBackend { kAuto, kCudnn, kMath };
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const std::optional<Tensor>& attn_mask, bool is_causal,
                                    std::optional<double> scale, int64_t query_offset,
                                    AttentionBackend backend);
// The forward and its softmax statistics: lse [..., L] in the compute dtype (float32; float64 for
// float64 inputs on the math path, as the CPU kernel), the natural log of each row's
// softmax denominator (of the scaled, masked scores; -inf for a fully masked row), which the
// backward can reuse instead of recomputing them.
AttentionWithLse scaled_dot_product_attention_with_lse(
    const Tensor& query, const Tensor& key, const Tensor& value,
    const std::optional<Tensor>& attn_mask, bool is_causal, std::optional<double> scale,
    int64_t query_offset, AttentionBackend backend);
// `out` is the forward's result; `lse` its statistics (recomputed by a forward when absent).
AttentionGrads scaled_dot_product_attention_backward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value,
    const Tensor& out, bool is_causal, std::optional<double> scale,
    const std::optional<Tensor>& attn_mask, int64_t query_offset, const std::optional<Tensor>& lse,
    AttentionBackend backend);
// Whether the cuDNN path was built in (cuDNN's C++ frontend found at build time).
bool cudnn_attention_built();

}  // namespace dtensor::kernels::cuda

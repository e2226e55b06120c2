// The kernels with a device slot, each declared here once: X(slot, function, type), where type is
// the exact function type of kernels::<function> (kernels/cpu/*.h, which documents it and gives its
// default arguments) and of cuda::<function>, which kernels/cuda/kernels.h declares from this list
// (no second copy of the signature). From this list follow the slots of DeviceKernels and the
// host-fallback names (kernels/device_dispatch.h), the CUDA declarations, the cpu table
// (kernels/cpu/host_kernels.cc) and the CUDA registration (kernels/cuda/register.cc); the last two
// take each function's address as the slot's type, so a cpu function whose signature drifts from
// its entry fails to compile, and a listed kernel no CUDA source defines fails to link. Types are
// spelled as seen from namespace dtensor::kernels.
//
// Adding a device kernel: (1) one X(...) line here (`slot` differs from `function` only for
// overloads: add_s is add(Tensor, Scalar, Scalar)); (2) declare and document the function in
// kernels/cpu/<family>.h and begin its body with DT_KERNEL_ON_DEVICE(slot, every parameter...),
// preceded at most by argument checks that read no tensor data (one set of checks and messages
// then serves both kernels); (3) define cuda::<function> in a kernels/cuda/ source (declared already; CUDA callers pass every
// argument, since a declaration from a type carries no defaults), or in register.cc from a CUDA
// function with other parameters. A cpu kernel without a device version is not listed: it begins
// with DT_KERNEL_HOST_ONLY instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor {
enum class UnaryRow : int32_t;   // ops/pointwise/rows.h
enum class BinaryRow : int32_t;  // ops/pointwise/rows.h
enum class ParamRow : int32_t;   // ops/pointwise/rows.h
struct RowParams;                // ops/pointwise/rows.h
}  // namespace dtensor

namespace dtensor::kernels {

class Scalar;           // kernels/cpu/pointwise.h
struct PoolSlab;        // kernels/cpu/pooling.h
struct AttentionGrads;  // kernels/cpu/attention.h
struct AttentionWithLse;  // kernels/cpu/attention.h
struct FlexMask;        // kernels/cpu/flex_attention.h
struct FlexScoreMod;    // kernels/cpu/flex_attention.h

using Dims = std::vector<int64_t>;
using TensorPair = std::pair<Tensor, Tensor>;

}  // namespace dtensor::kernels

#define DT_KERNEL_LIST(X)                                                                           \
  /* Pointwise. `_s`: the Tensor-Scalar overload. */                                                \
  X(add, add, Tensor(const Tensor& a, const Tensor& b, const Scalar& alpha))                        \
  X(add_s, add, Tensor(const Tensor& a, const Scalar& b, const Scalar& alpha))                      \
  X(sub, sub, Tensor(const Tensor& a, const Tensor& b, const Scalar& alpha))                        \
  X(sub_s, sub, Tensor(const Tensor& a, const Scalar& b, const Scalar& alpha))                      \
  X(mul, mul, Tensor(const Tensor& a, const Tensor& b))                                             \
  X(mul_s, mul, Tensor(const Tensor& a, const Scalar& b))                                           \
  X(div, div, Tensor(const Tensor& a, const Tensor& b, const std::string& rounding_mode))           \
  X(div_s, div, Tensor(const Tensor& a, const Scalar& b, const std::string& rounding_mode))         \
  X(maximum, maximum, Tensor(const Tensor& a, const Tensor& b))                                     \
  X(minimum, minimum, Tensor(const Tensor& a, const Tensor& b))                                     \
  X(pow, pow, Tensor(const Tensor& a, const Tensor& b))                                             \
  X(pow_s, pow, Tensor(const Tensor& a, const Scalar& exponent))                                    \
  X(eq, eq, Tensor(const Tensor& a, const Tensor& b))                                               \
  X(ne, ne, Tensor(const Tensor& a, const Tensor& b))                                               \
  X(lt, lt, Tensor(const Tensor& a, const Tensor& b))                                               \
  X(le, le, Tensor(const Tensor& a, const Tensor& b))                                               \
  X(gt, gt, Tensor(const Tensor& a, const Tensor& b))                                               \
  X(ge, ge, Tensor(const Tensor& a, const Tensor& b))                                               \
  X(eq_s, eq, Tensor(const Tensor& a, const Scalar& b))                                             \
  X(ne_s, ne, Tensor(const Tensor& a, const Scalar& b))                                             \
  X(lt_s, lt, Tensor(const Tensor& a, const Scalar& b))                                             \
  X(le_s, le, Tensor(const Tensor& a, const Scalar& b))                                             \
  X(gt_s, gt, Tensor(const Tensor& a, const Scalar& b))                                             \
  X(ge_s, ge, Tensor(const Tensor& a, const Scalar& b))                                             \
  X(where, where, Tensor(const Tensor& cond, const Tensor& a, const Tensor& b))                     \
  X(masked_fill, masked_fill, Tensor(const Tensor& x, const Tensor& mask, const Scalar& value))     \
  X(neg, neg, Tensor(const Tensor& x))                                                              \
  X(abs, abs, Tensor(const Tensor& x))                                                              \
  X(relu, relu, Tensor(const Tensor& x))                                                            \
  X(exp, exp, Tensor(const Tensor& x))                                                              \
  X(log, log, Tensor(const Tensor& x))                                                              \
  X(sqrt, sqrt, Tensor(const Tensor& x))                                                            \
  X(rsqrt, rsqrt, Tensor(const Tensor& x))                                                          \
  X(tanh, tanh, Tensor(const Tensor& x))                                                            \
  X(sigmoid, sigmoid, Tensor(const Tensor& x))                                                      \
  X(silu, silu, Tensor(const Tensor& x))                                                            \
  X(gelu, gelu, Tensor(const Tensor& x, const std::string& approximate))                            \
  /* The pointwise rows (ops/pointwise/rows.h): one slot per table, the row an argument. */      \
  X(pointwise_unary_row, pointwise_unary_row, Tensor(UnaryRow row, const Tensor& x))                \
  X(pointwise_param_row, pointwise_param_row, Tensor(ParamRow row, const Tensor& x, const RowParams& p)) \
  X(pointwise_binary_row, pointwise_binary_row,                                                     \
    Tensor(BinaryRow row, const Tensor& a, const Tensor& b))                                        \
  /* Reductions. */                                                                                 \
  X(sum, sum, Tensor(const Tensor& x, const Dims& dims, bool keepdim))                              \
  X(prod, prod, Tensor(const Tensor& x, const Dims& dims, bool keepdim))                            \
  X(mean, mean, Tensor(const Tensor& x, const Dims& dims, bool keepdim))                            \
  X(amax, amax, Tensor(const Tensor& x, const Dims& dims, bool keepdim))                            \
  X(amin, amin, Tensor(const Tensor& x, const Dims& dims, bool keepdim))                            \
  X(var, var, Tensor(const Tensor& x, const Dims& dims, double correction, bool keepdim))           \
  X(std, std, Tensor(const Tensor& x, const Dims& dims, double correction, bool keepdim))           \
  X(logsumexp, logsumexp, Tensor(const Tensor& x, const Dims& dims, bool keepdim))                  \
  /* Softmax, norms, embedding, losses. */                                                          \
  X(softmax, softmax, Tensor(const Tensor& x, int64_t dim))                                         \
  X(log_softmax, log_softmax, Tensor(const Tensor& x, int64_t dim))                                 \
  X(layer_norm, layer_norm, Tensor(const Tensor& x, const Shape& normalized_shape,                  \
      const std::optional<Tensor>& weight, const std::optional<Tensor>& bias, double eps))          \
  X(rms_norm, rms_norm, Tensor(const Tensor& x, const Shape& normalized_shape,                      \
      const std::optional<Tensor>& weight, std::optional<double> eps))                              \
  X(embedding, embedding, Tensor(const Tensor& weight, const Tensor& indices))                      \
  X(embedding_masked, embedding_masked, Tensor(const Tensor& weight_shard, const Tensor& indices,   \
      int64_t row_start, int64_t row_end))                                                          \
  X(nll_loss, nll_loss, Tensor(const Tensor& logp, const Tensor& target,                            \
      const std::optional<Tensor>& weight, const std::string& reduction, int64_t ignore_index))     \
  X(cross_entropy, cross_entropy, Tensor(const Tensor& logits, const Tensor& target,                \
      const std::optional<Tensor>& weight, const std::string& reduction, int64_t ignore_index,      \
      double label_smoothing))                                                                      \
  /* Scans. */                                                                                      \
  X(cumsum, cumsum, Tensor(const Tensor& x, int64_t dim))                                           \
  X(cumprod, cumprod, Tensor(const Tensor& x, int64_t dim))                                         \
  X(logcumsumexp, logcumsumexp, Tensor(const Tensor& x, int64_t dim))                               \
  X(cummax, cummax, TensorPair(const Tensor& x, int64_t dim))                                       \
  X(cummin, cummin, TensorPair(const Tensor& x, int64_t dim))                                       \
  /* The carried scans of the carry exchange (kernels/cpu/scan.h). */                               \
  X(cumsum_with_carry, cumsum_with_carry,                                                           \
    Tensor(const Tensor& x, int64_t dim, const Tensor& carry))                                      \
  X(cumprod_with_carry, cumprod_with_carry,                                                         \
    Tensor(const Tensor& x, int64_t dim, const Tensor& carry))                                      \
  X(logcumsumexp_with_carry, logcumsumexp_with_carry,                                               \
    Tensor(const Tensor& x, int64_t dim, const Tensor& carry))                                      \
  X(cummax_with_carry, cummax_with_carry,                                                           \
    TensorPair(const Tensor& x, int64_t dim, const Tensor& carry_values,                            \
               const Tensor& carry_indices, int64_t index_offset))                                  \
  X(cummin_with_carry, cummin_with_carry,                                                           \
    TensorPair(const Tensor& x, int64_t dim, const Tensor& carry_values,                            \
               const Tensor& carry_indices, int64_t index_offset))                                  \
  /* The scans' backward (kernels/cpu/scan.h). */                                                    \
  X(cumsum_backward, cumsum_backward, Tensor(const Tensor& grad, int64_t dim))                      \
  X(cumprod_backward, cumprod_backward,                                                             \
    Tensor(const Tensor& grad, const Tensor& x, const Tensor& out, int64_t dim))                    \
  X(logcumsumexp_backward, logcumsumexp_backward,                                                   \
    Tensor(const Tensor& grad, const Tensor& x, const Tensor& out, int64_t dim))                    \
  X(cummaxmin_backward, cummaxmin_backward, Tensor(const Tensor& grad, const Tensor& indices,       \
      const Shape& input_shape, int64_t dim, int64_t index_offset))                                 \
  /* Value-selecting reductions. */                                                                 \
  X(max_dim, max_dim, TensorPair(const Tensor& x, int64_t dim, bool keepdim))                       \
  X(min_dim, min_dim, TensorPair(const Tensor& x, int64_t dim, bool keepdim))                       \
  X(argmax, argmax, Tensor(const Tensor& x, std::optional<int64_t> dim, bool keepdim))              \
  X(argmin, argmin, Tensor(const Tensor& x, std::optional<int64_t> dim, bool keepdim))              \
  X(median, median, Tensor(const Tensor& x))                                                        \
  X(median_dim, median_dim, TensorPair(const Tensor& x, int64_t dim, bool keepdim))                 \
  X(nanmedian, nanmedian, Tensor(const Tensor& x))                                                  \
  X(nanmedian_dim, nanmedian_dim, TensorPair(const Tensor& x, int64_t dim, bool keepdim))           \
  X(kthvalue, kthvalue, TensorPair(const Tensor& x, int64_t k, int64_t dim, bool keepdim))          \
  X(value_index_backward, value_index_backward, Tensor(const Tensor& grad_values,                   \
      const Tensor& indices, const Shape& input_shape, int64_t dim, bool keepdim))                  \
  X(median_backward, median_backward, Tensor(const Tensor& grad, const Tensor& x,                   \
      const Tensor& result))                                                                        \
  /* Helpers of the distributed radix select (ops/selection/steps.cc). */                           \
  X(radix_histogram, radix_histogram,                                                               \
    Tensor(const Tensor& x, int64_t dim, const std::vector<uint64_t>& prefix, int shift, int bits)) \
  X(index_of_occurrence, index_of_occurrence,                                                       \
    Tensor(const Tensor& x, int64_t dim, const Tensor& values, const Tensor& occurrence,            \
           int64_t index_offset))                                                                   \
  /* Pooling. */                                                                                    \
  X(avg_pool, avg_pool, Tensor(const Tensor& x, int dims, std::vector<int64_t> kernel_size,         \
      std::vector<int64_t> stride, std::vector<int64_t> padding, bool ceil_mode,                    \
      bool count_include_pad, std::optional<int64_t> divisor_override,                              \
      const std::vector<PoolSlab>& slabs))                                                          \
  X(avg_pool_backward, avg_pool_backward, Tensor(const Tensor& grad_out, const Tensor& x,           \
      int dims, std::vector<int64_t> kernel_size, std::vector<int64_t> stride,                      \
      std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad,                         \
      std::optional<int64_t> divisor_override, const std::vector<PoolSlab>& slabs))                 \
  X(max_pool_with_indices, max_pool_with_indices, TensorPair(const Tensor& x, int dims,             \
      std::vector<int64_t> kernel_size, std::vector<int64_t> stride,                                \
      std::vector<int64_t> padding, std::vector<int64_t> dilation, bool ceil_mode,                  \
      const std::vector<PoolSlab>& slabs))                                                          \
  X(max_pool_backward, max_pool_backward, Tensor(const Tensor& grad_out, const Tensor& indices,     \
      const Shape& input_shape, int dims, const std::vector<PoolSlab>& slabs))                      \
  /* Matrix products and attention. */                                                              \
  X(mm, mm, Tensor(const Tensor& a, const Tensor& b))                                               \
  X(bmm, bmm, Tensor(const Tensor& a, const Tensor& b))                                             \
  X(addmm, addmm, Tensor(const Tensor& self, const Tensor& a, const Tensor& b, double beta,         \
      double alpha))                                                                                \
  X(linear, linear, Tensor(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias))    \
  X(grouped_mm, grouped_mm,                                                                         \
    Tensor(const Tensor& a, const Tensor& b, const std::optional<Tensor>& offs))                    \
  X(matmul, matmul, Tensor(const Tensor& a, const Tensor& b))                                       \
  X(scaled_dot_product_attention, scaled_dot_product_attention, Tensor(const Tensor& query,         \
      const Tensor& key, const Tensor& value, const std::optional<Tensor>& attn_mask,               \
      bool is_causal, std::optional<double> scale, int64_t query_offset))                           \
  X(scaled_dot_product_attention_backward, scaled_dot_product_attention_backward, AttentionGrads(   \
      const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value,          \
      const Tensor& out, bool is_causal, std::optional<double> scale,                               \
      const std::optional<Tensor>& attn_mask, int64_t query_offset))                                \
  X(flex_attention, flex_attention, Tensor(const Tensor& query, const Tensor& key,                 \
      const Tensor& value, const FlexMask& mask, const FlexScoreMod& score_mod,                     \
      const std::optional<Tensor>& block_mask, int64_t block_size, std::optional<double> scale,     \
      int64_t q_offset, int64_t kv_offset))                                                         \
  X(flex_attention_backward, flex_attention_backward, AttentionGrads(const Tensor& grad_out,        \
      const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& out,               \
      const FlexMask& mask, const FlexScoreMod& score_mod, const std::optional<Tensor>& block_mask,  \
      int64_t block_size, std::optional<double> scale, int64_t q_offset, int64_t kv_offset))        \
  X(scaled_dot_product_attention_with_lse, scaled_dot_product_attention_with_lse,                  \
    AttentionWithLse(const Tensor& query, const Tensor& key, const Tensor& value, bool is_causal,   \
      std::optional<double> scale, int64_t query_offset))                                           \
  X(merge_attention, merge_attention, TensorPair(const Tensor& out, const Tensor& lse,              \
      const Tensor& out_b, const Tensor& lse_b))                                                    \
  X(attention_block_weight, attention_block_weight, Tensor(const Tensor& lse_b, const Tensor& lse)) \
  /* Backward kernels and shape ops. */                                                             \
  X(layer_norm_backward, layer_norm_backward, std::vector<Tensor>(const Tensor& grad_out,           \
      const Tensor& x, const Shape& normalized_shape, const std::optional<Tensor>& weight,          \
      double eps))                                                                                  \
  X(gelu_backward, gelu_backward, Tensor(const Tensor& grad, const Tensor& x,                       \
      const std::string& approximate))                                                              \
  X(embedding_dense_backward, embedding_dense_backward, Tensor(const Tensor& grad,                  \
      const Tensor& indices, int64_t num_weights, int64_t padding_idx, int64_t row_start,           \
      int64_t row_count))                                                                           \
  X(nll_loss_backward, nll_loss_backward, Tensor(const Tensor& grad_output,                         \
      const Shape& input_shape, DType dtype, const Tensor& target,                                  \
      const std::optional<Tensor>& weight, const std::string& reduction, int64_t ignore_index,      \
      std::optional<double> total_weight, int64_t class_start, int64_t num_classes))                \
  X(stack, stack, Tensor(const std::vector<Tensor>& tensors, int64_t dim))                          \
  X(index_select, index_select, Tensor(const Tensor& x, int64_t dim, const Tensor& index))          \
  X(gather, gather, Tensor(const Tensor& self, int64_t dim, const Tensor& index, int64_t offset,    \
      int64_t full))                                                                                \
  X(scatter_add, scatter_add, Tensor(const Tensor& self, int64_t dim, const Tensor& index,          \
      const Tensor& src, int64_t offset, int64_t full))

// Installs the CUDA kernels in the device slots (kernels/device_dispatch.h) at static
// initialization, so that a kernel function called with CUDA tensors runs here instead of on host
// copies. Every entry of kernels/kernel_list.h is registered by the list itself, as
// cuda::<function> (declared from the list in kernels.h) taken at the entry's exact type; a listed
// kernel that no CUDA source (or this file) defines fails to link.
#include <optional>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/kernels.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels::cuda {

// The list's kernels that the CUDA sources do not define with the list's type: pooling with slabs
// (a slab goes to the host fallback) and attention at the default backend.
namespace {

using Ints = std::vector<int64_t>;
using Slabs = std::vector<PoolSlab>;
namespace dd = ::dtensor::kernels::device_detail;

}  // namespace

Tensor avg_pool(const Tensor& x, int dims, Ints k, Ints s, Ints p, bool ceil, bool cip,
                std::optional<int64_t> div, const Slabs& slabs) {
  if (slabs.empty()) return avg_pool(x, dims, k, s, p, ceil, cip, div);
  return dd::call(KernelNames::avg_pool, nullptr, host_kernels().avg_pool, x, dims, k, s, p, ceil,
                  cip, div, slabs);
}

Tensor avg_pool_backward(const Tensor& g, const Tensor& x, int dims, Ints k, Ints s, Ints p,
                         bool ceil, bool cip, std::optional<int64_t> div, const Slabs& slabs) {
  if (slabs.empty()) return avg_pool_backward(g, x, dims, k, s, p, ceil, cip, div);
  return dd::call(KernelNames::avg_pool_backward, nullptr, host_kernels().avg_pool_backward, g, x,
                  dims, k, s, p, ceil, cip, div, slabs);
}

std::pair<Tensor, Tensor> max_pool_with_indices(const Tensor& x, int dims, Ints k, Ints s, Ints p,
                                                Ints d, bool ceil, const Slabs& slabs) {
  if (slabs.empty()) return max_pool_with_indices(x, dims, k, s, p, d, ceil);
  return dd::call(KernelNames::max_pool_with_indices, nullptr,
                  host_kernels().max_pool_with_indices, x, dims, k, s, p, d, ceil, slabs);
}

Tensor max_pool_backward(const Tensor& g, const Tensor& idx, const Shape& in_shape, int dims,
                         const Slabs& slabs) {
  if (slabs.empty()) return max_pool_backward(g, idx, in_shape, dims);
  return dd::call(KernelNames::max_pool_backward, nullptr, host_kernels().max_pool_backward, g,
                  idx, in_shape, dims, slabs);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const std::optional<Tensor>& mask, bool causal,
                                    std::optional<double> scale, int64_t offset) {
  return scaled_dot_product_attention(q, k, v, mask, causal, scale, offset, AttentionBackend::kAuto);
}

AttentionGrads scaled_dot_product_attention_backward(const Tensor& g, const Tensor& q, const Tensor& k,
                                                     const Tensor& v, const Tensor& out, bool causal,
                                                     std::optional<double> scale,
                                                     const std::optional<Tensor>& mask, int64_t offset) {
  return scaled_dot_product_attention_backward(g, q, k, v, out, causal, scale, mask, offset, std::nullopt,
                                               AttentionBackend::kAuto);
}

AttentionWithLse scaled_dot_product_attention_with_lse(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       bool causal, std::optional<double> scale,
                                                       int64_t offset) {
  return scaled_dot_product_attention_with_lse(q, k, v, std::nullopt, causal, scale, offset,
                                               AttentionBackend::kAuto);
}

namespace {

const bool registered = [] {
  DeviceKernels& k = cuda_kernels();
#define DT_CUDA_SLOT(slot, function, type) k.slot = static_cast<decltype(k.slot)>(&function);
  DT_KERNEL_LIST(DT_CUDA_SLOT)
#undef DT_CUDA_SLOT
  return true;
}();

}  // namespace
}  // namespace dtensor::kernels::cuda

// Installs the CUDA kernels in the kernels' device dispatch table (kernels/cpu/device_dispatch.h) at
// static initialization, so that a kernel function called with CUDA tensors runs here instead of
// on host copies. Functions whose CUDA version covers fewer cases than the cpu one (pooling: 2-d,
// no slabs) wrap it and send the other cases to the host fallback.
#include "kernels/cpu/device_dispatch.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {
namespace {

using Ints = std::vector<int64_t>;
using Slabs = std::vector<PoolSlab>;
namespace dd = ::dtensor::kernels::device_detail;

Tensor avg_pool_slot(const Tensor& x, int dims, Ints k, Ints s, Ints p, bool ceil, bool cip,
                     std::optional<int64_t> div, const Slabs& slabs) {
  if (dims == 2 && slabs.empty()) return avg_pool(x, dims, k, s, p, ceil, cip, div);
  return dd::call("avg_pool", nullptr, [](const auto&... h) { return kernels::avg_pool(h...); }, x, dims, k, s,
                  p, ceil, cip, div, slabs);
}

Tensor avg_pool_backward_slot(const Tensor& g, const Tensor& x, int dims, Ints k, Ints s, Ints p, bool ceil,
                              bool cip, std::optional<int64_t> div, const Slabs& slabs) {
  if (dims == 2 && slabs.empty()) return avg_pool_backward(g, x, dims, k, s, p, ceil, cip, div);
  return dd::call("avg_pool_backward", nullptr,
                  [](const auto&... h) { return kernels::avg_pool_backward(h...); }, g, x, dims, k, s, p, ceil,
                  cip, div, slabs);
}

std::pair<Tensor, Tensor> max_pool_slot(const Tensor& x, int dims, Ints k, Ints s, Ints p, Ints d, bool ceil,
                                        const Slabs& slabs) {
  if (dims == 2 && slabs.empty()) return max_pool_with_indices(x, dims, k, s, p, d, ceil);
  return dd::call("max_pool_with_indices", nullptr,
                  [](const auto&... h) { return kernels::max_pool_with_indices(h...); }, x, dims, k, s, p, d,
                  ceil, slabs);
}

Tensor max_pool_backward_slot(const Tensor& g, const Tensor& idx, const Shape& in_shape, int dims,
                              const Slabs& slabs) {
  if (dims == 2 && slabs.empty()) return max_pool_backward(g, idx, in_shape, dims);
  return dd::call("max_pool_backward", nullptr,
                  [](const auto&... h) { return kernels::max_pool_backward(h...); }, g, idx, in_shape, dims,
                  slabs);
}

Tensor sdpa_slot(const Tensor& q, const Tensor& k, const Tensor& v, const std::optional<Tensor>& mask,
                 bool causal, std::optional<double> scale, int64_t offset) {
  return scaled_dot_product_attention(q, k, v, mask, causal, scale, offset);
}

kernels::AttentionGrads sdpa_backward_slot(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& out, bool causal, std::optional<double> scale,
                                           const std::optional<Tensor>& mask, int64_t offset) {
  AttentionGrads r = scaled_dot_product_attention_backward(g, q, k, v, out, causal, scale, mask, offset);
  return {r.query, r.key, r.value};
}

using TT = Tensor (*)(const Tensor&, const Tensor&);
using TS = Tensor (*)(const Tensor&, const Scalar&);
using TTS = Tensor (*)(const Tensor&, const Tensor&, const Scalar&);
using TSS = Tensor (*)(const Tensor&, const Scalar&, const Scalar&);
using TTStr = Tensor (*)(const Tensor&, const Tensor&, const std::string&);
using TSStr = Tensor (*)(const Tensor&, const Scalar&, const std::string&);

const bool registered = [] {
  DeviceKernels& k = cuda_kernels();
  k.add = static_cast<TTS>(&add);
  k.add_s = static_cast<TSS>(&add);
  k.sub = static_cast<TTS>(&sub);
  k.sub_s = static_cast<TSS>(&sub);
  k.mul = static_cast<TT>(&mul);
  k.mul_s = static_cast<TS>(&mul);
  k.div = static_cast<TTStr>(&div);
  k.div_s = static_cast<TSStr>(&div);
  k.maximum = &maximum;
  k.minimum = &minimum;
  k.neg = &neg;
  k.abs = &abs;
  k.relu = &relu;
  k.exp = &exp;
  k.log = &log;
  k.sqrt = &sqrt;
  k.rsqrt = &rsqrt;
  k.tanh = &tanh;
  k.sigmoid = &sigmoid;
  k.silu = &silu;
  k.gelu = &gelu;
  k.sum = &sum;
  k.mean = &mean;
  k.amax = &amax;
  k.amin = &amin;
  k.softmax = &softmax;
  k.log_softmax = &log_softmax;
  k.layer_norm = &layer_norm;
  k.rms_norm = &rms_norm;
  k.embedding = &embedding;
  k.embedding_masked = &embedding_masked;
  k.cumsum = &cumsum;
  k.cumprod = &cumprod;
  k.logcumsumexp = &logcumsumexp;
  k.cummax = &cummax;
  k.cummin = &cummin;
  k.max_dim = &max_dim;
  k.min_dim = &min_dim;
  k.argmax = &argmax;
  k.argmin = &argmin;
  k.median = &median;
  k.median_dim = &median_dim;
  k.nanmedian = &nanmedian;
  k.nanmedian_dim = &nanmedian_dim;
  k.kthvalue = &kthvalue;
  k.avg_pool = &avg_pool_slot;
  k.avg_pool_backward = &avg_pool_backward_slot;
  k.max_pool_with_indices = &max_pool_slot;
  k.max_pool_backward = &max_pool_backward_slot;
  k.mm = &mm;
  k.bmm = &bmm;
  k.addmm = &addmm;
  k.linear = &linear;
  k.matmul = &matmul;
  k.scaled_dot_product_attention = &sdpa_slot;
  k.scaled_dot_product_attention_backward = &sdpa_backward_slot;
  k.pow = static_cast<TT>(&pow);
  k.pow_s = static_cast<TS>(&pow);
  k.eq = static_cast<TT>(&eq);
  k.ne = static_cast<TT>(&ne);
  k.lt = static_cast<TT>(&lt);
  k.le = static_cast<TT>(&le);
  k.gt = static_cast<TT>(&gt);
  k.ge = static_cast<TT>(&ge);
  k.eq_s = static_cast<TS>(&eq);
  k.ne_s = static_cast<TS>(&ne);
  k.lt_s = static_cast<TS>(&lt);
  k.le_s = static_cast<TS>(&le);
  k.gt_s = static_cast<TS>(&gt);
  k.ge_s = static_cast<TS>(&ge);
  k.where = &where;
  k.masked_fill = &masked_fill;
  k.prod = &prod;
  k.var = &var;
  k.std = &std;
  k.logsumexp = &logsumexp;
  k.nll_loss = &nll_loss;
  k.cross_entropy = &cross_entropy;
  k.nll_loss_backward = &nll_loss_backward;
  k.gelu_backward = &gelu_backward;
  k.embedding_dense_backward = &embedding_dense_backward;
  k.stack = &stack;
  k.index_select = &index_select;
  return true;
}();

}  // namespace
}  // namespace dtensor::kernels::cuda

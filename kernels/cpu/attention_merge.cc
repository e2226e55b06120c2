#include "kernels/cpu/attention_merge.h"

#include <cmath>
#include <limits>

#include "kernels/cpu/loops.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels {
namespace {

void check_pair(const char* fn, const Tensor& a, const Tensor& b) {
  DT_CHECK(a.sizes() == b.sizes() && a.dtype() == b.dtype() &&
               (a.dtype() == DType::kFloat32 || a.dtype() == DType::kFloat64) && a.is_contiguous() &&
               b.is_contiguous() && a.device().is_cpu() && b.device().is_cpu(),
           fn, ": ", dtype_name(a.dtype()), " ", shape_str(a.sizes()), " and ", dtype_name(b.dtype()), " ",
           shape_str(b.sizes()), " (accepted: equal shapes, one dtype float32 or float64, contiguous cpu)");
}

}  // namespace

std::pair<Tensor, Tensor> merge_attention(const Tensor& out_in, const Tensor& lse_in, const Tensor& out_b,
                                          const Tensor& lse_b) {
  DT_KERNEL_ON_DEVICE(merge_attention, out_in, lse_in, out_b, lse_b);
  const char* fn = "merge_attention";
  check_pair(fn, out_in, out_b);
  check_pair(fn, lse_in, lse_b);
  DT_CHECK(out_in.dim() >= 1 && out_in.dtype() == lse_in.dtype() &&
               Shape(out_in.sizes().begin(), out_in.sizes().end() - 1) == lse_in.sizes(),
           fn, ": out ", shape_str(out_in.sizes()), " and lse ", shape_str(lse_in.sizes()),
           " (accepted: out [..., L, Ev], lse [..., L] of one dtype)");
  Tensor out = out_in.clone(), lse = lse_in.clone();
  const int64_t rows = lse.numel(), ev = out.size(-1);
  detail::dispatch_float(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    T* l = lse.data<T>();
    const T* ob = out_b.data<T>();
    const T* lb = lse_b.data<T>();
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    for (int64_t i = 0; i < rows; ++i) {
      if (lb[i] == kNegInf) continue;  // the block adds nothing to this row
      const T m = l[i] > lb[i] ? l[i] : lb[i];
      const T a = std::exp(l[i] - m), b = std::exp(lb[i] - m);  // a = 0 when l[i] = -inf
      const T s = a + b;
      for (int64_t e = 0; e < ev; ++e) o[i * ev + e] = (a * o[i * ev + e] + b * ob[i * ev + e]) / s;
      l[i] = m + std::log(s);
    }
    return 0;
  });
  return {out, lse};
}

Tensor attention_block_weight(const Tensor& lse_b, const Tensor& lse) {
  DT_KERNEL_ON_DEVICE(attention_block_weight, lse_b, lse);
  check_pair("attention_block_weight", lse_b, lse);
  Tensor w = Tensor::zeros(lse.sizes(), lse.dtype());
  detail::dispatch_float(lse.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* lb = lse_b.data<T>();
    const T* l = lse.data<T>();
    T* pw = w.data<T>();
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    for (int64_t i = 0; i < lse.numel(); ++i)
      pw[i] = (lb[i] == kNegInf || l[i] == kNegInf) ? T(0) : std::exp(lb[i] - l[i]);
    return 0;
  });
  return w;
}

}  // namespace dtensor::kernels

// Device dispatch of the kernels (ATen's dispatcher, reduced to one device type). Every kernel
// function of kernels/cpu begins with DT_KERNEL_ON_DEVICE: when one of its tensor arguments is on a
// device (CUDA), it calls the implementation registered for that function in cuda_kernels() (filled in
// by //kernels/cuda at static initialization, kernels/cuda/register.cc), or, when there is none, its
// own cpu code on host copies of the tensors with the results copied back to the device (correct,
// not fast; counted per function in host_fallback_counts()). With every tensor on the cpu nothing
// changes. So op kernels, autograd formulas and the optimizer are device-generic.
//
// A slot holds a function with the cpu kernel's exact signature; it receives device tensors (all on
// one device unless a caller mixed them: the CUDA kernels then throw naming the devices).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtensor/core/tensor.h"
#include "kernels/cpu/pointwise.h"  // Scalar

namespace dtensor::kernels {

struct PoolSlab;
struct AttentionGrads;

using Dims = std::vector<int64_t>;

struct DeviceKernels {
  // Pointwise. `_s`: the Tensor-Scalar overload.
  Tensor (*add)(const Tensor&, const Tensor&, const Scalar&) = nullptr;
  Tensor (*add_s)(const Tensor&, const Scalar&, const Scalar&) = nullptr;
  Tensor (*sub)(const Tensor&, const Tensor&, const Scalar&) = nullptr;
  Tensor (*sub_s)(const Tensor&, const Scalar&, const Scalar&) = nullptr;
  Tensor (*mul)(const Tensor&, const Tensor&) = nullptr;
  Tensor (*mul_s)(const Tensor&, const Scalar&) = nullptr;
  Tensor (*div)(const Tensor&, const Tensor&, const std::string&) = nullptr;
  Tensor (*div_s)(const Tensor&, const Scalar&, const std::string&) = nullptr;
  Tensor (*maximum)(const Tensor&, const Tensor&) = nullptr;
  Tensor (*minimum)(const Tensor&, const Tensor&) = nullptr;
  Tensor (*pow)(const Tensor&, const Tensor&) = nullptr;
  Tensor (*pow_s)(const Tensor&, const Scalar&) = nullptr;
  Tensor (*eq)(const Tensor&, const Tensor&) = nullptr;
  Tensor (*ne)(const Tensor&, const Tensor&) = nullptr;
  Tensor (*lt)(const Tensor&, const Tensor&) = nullptr;
  Tensor (*le)(const Tensor&, const Tensor&) = nullptr;
  Tensor (*gt)(const Tensor&, const Tensor&) = nullptr;
  Tensor (*ge)(const Tensor&, const Tensor&) = nullptr;
  Tensor (*eq_s)(const Tensor&, const Scalar&) = nullptr;
  Tensor (*ne_s)(const Tensor&, const Scalar&) = nullptr;
  Tensor (*lt_s)(const Tensor&, const Scalar&) = nullptr;
  Tensor (*le_s)(const Tensor&, const Scalar&) = nullptr;
  Tensor (*gt_s)(const Tensor&, const Scalar&) = nullptr;
  Tensor (*ge_s)(const Tensor&, const Scalar&) = nullptr;
  Tensor (*where)(const Tensor&, const Tensor&, const Tensor&) = nullptr;
  Tensor (*masked_fill)(const Tensor&, const Tensor&, const Scalar&) = nullptr;
  Tensor (*neg)(const Tensor&) = nullptr;
  Tensor (*abs)(const Tensor&) = nullptr;
  Tensor (*relu)(const Tensor&) = nullptr;
  Tensor (*exp)(const Tensor&) = nullptr;
  Tensor (*log)(const Tensor&) = nullptr;
  Tensor (*sqrt)(const Tensor&) = nullptr;
  Tensor (*rsqrt)(const Tensor&) = nullptr;
  Tensor (*tanh)(const Tensor&) = nullptr;
  Tensor (*sigmoid)(const Tensor&) = nullptr;
  Tensor (*silu)(const Tensor&) = nullptr;
  Tensor (*gelu)(const Tensor&, const std::string&) = nullptr;
  // Reductions.
  Tensor (*sum)(const Tensor&, const Dims&, bool) = nullptr;
  Tensor (*prod)(const Tensor&, const Dims&, bool) = nullptr;
  Tensor (*mean)(const Tensor&, const Dims&, bool) = nullptr;
  Tensor (*amax)(const Tensor&, const Dims&, bool) = nullptr;
  Tensor (*amin)(const Tensor&, const Dims&, bool) = nullptr;
  Tensor (*var)(const Tensor&, const Dims&, double, bool) = nullptr;
  Tensor (*std)(const Tensor&, const Dims&, double, bool) = nullptr;
  Tensor (*logsumexp)(const Tensor&, const Dims&, bool) = nullptr;
  // Softmax, norms, embedding, losses.
  Tensor (*softmax)(const Tensor&, int64_t) = nullptr;
  Tensor (*log_softmax)(const Tensor&, int64_t) = nullptr;
  Tensor (*layer_norm)(const Tensor&, const Shape&, const std::optional<Tensor>&,
                       const std::optional<Tensor>&, double) = nullptr;
  Tensor (*rms_norm)(const Tensor&, const Shape&, const std::optional<Tensor>&,
                     std::optional<double>) = nullptr;
  Tensor (*embedding)(const Tensor&, const Tensor&) = nullptr;
  Tensor (*embedding_masked)(const Tensor&, const Tensor&, int64_t, int64_t) = nullptr;
  Tensor (*nll_loss)(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                     const std::string&, int64_t) = nullptr;
  Tensor (*cross_entropy)(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                          const std::string&, int64_t, double) = nullptr;
  // Scans.
  Tensor (*cumsum)(const Tensor&, int64_t) = nullptr;
  Tensor (*cumprod)(const Tensor&, int64_t) = nullptr;
  Tensor (*logcumsumexp)(const Tensor&, int64_t) = nullptr;
  std::pair<Tensor, Tensor> (*cummax)(const Tensor&, int64_t) = nullptr;
  std::pair<Tensor, Tensor> (*cummin)(const Tensor&, int64_t) = nullptr;
  // Value-selecting reductions.
  std::pair<Tensor, Tensor> (*max_dim)(const Tensor&, int64_t, bool) = nullptr;
  std::pair<Tensor, Tensor> (*min_dim)(const Tensor&, int64_t, bool) = nullptr;
  Tensor (*argmax)(const Tensor&, std::optional<int64_t>, bool) = nullptr;
  Tensor (*argmin)(const Tensor&, std::optional<int64_t>, bool) = nullptr;
  Tensor (*median)(const Tensor&) = nullptr;
  std::pair<Tensor, Tensor> (*median_dim)(const Tensor&, int64_t, bool) = nullptr;
  Tensor (*nanmedian)(const Tensor&) = nullptr;
  std::pair<Tensor, Tensor> (*nanmedian_dim)(const Tensor&, int64_t, bool) = nullptr;
  std::pair<Tensor, Tensor> (*kthvalue)(const Tensor&, int64_t, int64_t, bool) = nullptr;
  // Pooling.
  Tensor (*avg_pool)(const Tensor&, int, std::vector<int64_t>, std::vector<int64_t>,
                     std::vector<int64_t>, bool, bool, std::optional<int64_t>,
                     const std::vector<PoolSlab>&) = nullptr;
  Tensor (*avg_pool_backward)(const Tensor&, const Tensor&, int, std::vector<int64_t>,
                              std::vector<int64_t>, std::vector<int64_t>, bool, bool,
                              std::optional<int64_t>, const std::vector<PoolSlab>&) = nullptr;
  std::pair<Tensor, Tensor> (*max_pool_with_indices)(const Tensor&, int, std::vector<int64_t>,
                                                     std::vector<int64_t>, std::vector<int64_t>,
                                                     std::vector<int64_t>, bool,
                                                     const std::vector<PoolSlab>&) = nullptr;
  Tensor (*max_pool_backward)(const Tensor&, const Tensor&, const Shape&, int,
                              const std::vector<PoolSlab>&) = nullptr;
  // Matrix products and attention.
  Tensor (*mm)(const Tensor&, const Tensor&) = nullptr;
  Tensor (*bmm)(const Tensor&, const Tensor&) = nullptr;
  Tensor (*addmm)(const Tensor&, const Tensor&, const Tensor&, double, double) = nullptr;
  Tensor (*linear)(const Tensor&, const Tensor&, const std::optional<Tensor>&) = nullptr;
  Tensor (*matmul)(const Tensor&, const Tensor&) = nullptr;
  Tensor (*scaled_dot_product_attention)(const Tensor&, const Tensor&, const Tensor&,
                                         const std::optional<Tensor>&, bool,
                                         std::optional<double>, int64_t) = nullptr;
  AttentionGrads (*scaled_dot_product_attention_backward)(
      const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool,
      std::optional<double>, const std::optional<Tensor>&, int64_t) = nullptr;
  // Backward kernels and shape ops.
  Tensor (*gelu_backward)(const Tensor&, const Tensor&, const std::string&) = nullptr;
  Tensor (*embedding_dense_backward)(const Tensor&, const Tensor&, int64_t, int64_t, int64_t,
                                     int64_t) = nullptr;
  Tensor (*nll_loss_backward)(const Tensor&, const Shape&, DType, const Tensor&,
                              const std::optional<Tensor>&, const std::string&, int64_t,
                              std::optional<double>, int64_t, int64_t) = nullptr;
  Tensor (*stack)(const std::vector<Tensor>&, int64_t) = nullptr;
  Tensor (*index_select)(const Tensor&, int64_t, const Tensor&) = nullptr;
};

// The CUDA implementations (all null until //kernels/cuda is linked). Written only at static
// initialization, read afterwards.
DeviceKernels& cuda_kernels();

// Kernel functions (and distributed steps, "<op> (distributed step)") that ran on host copies of
// device tensors: name -> calls, sorted by name. Thread-safe.
std::vector<std::pair<std::string, int64_t>> host_fallback_counts();
void reset_host_fallback_counts();
void note_host_fallback(const std::string& name);

namespace device_detail {

inline bool on_device(const Tensor& t) { return t.defined() && !t.device().is_cpu(); }
inline bool on_device(const std::optional<Tensor>& t) { return t && on_device(*t); }
inline bool on_device(const std::vector<Tensor>& v) {
  for (const Tensor& t : v)
    if (on_device(t)) return true;
  return false;
}
template <typename T>
bool on_device(const T&) {
  return false;
}
template <typename... A>
bool any_on_device(const A&... a) {
  return (on_device(a) || ...);
}

inline void find_device(Device* d, const Tensor& t) {
  if (d->is_cpu() && on_device(t)) *d = t.device();
}
inline void find_device(Device* d, const std::optional<Tensor>& t) {
  if (t) find_device(d, *t);
}
inline void find_device(Device* d, const std::vector<Tensor>& v) {
  for (const Tensor& t : v) find_device(d, t);
}
template <typename T>
void find_device(Device*, const T&) {}

inline Tensor to_host(const Tensor& t) { return t.defined() ? t.to(cpu()) : t; }
inline std::optional<Tensor> to_host(const std::optional<Tensor>& t) {
  if (!t) return t;
  return to_host(*t);
}
inline std::vector<Tensor> to_host(const std::vector<Tensor>& v) {
  std::vector<Tensor> out;
  out.reserve(v.size());
  for (const Tensor& t : v) out.push_back(to_host(t));
  return out;
}
template <typename T>
const T& to_host(const T& v) {
  return v;
}
template <typename T>
T to_dev(T v, Device) {  // numbers
  return v;
}

inline Tensor to_dev(Tensor t, Device d) { return t.defined() ? t.to(d) : t; }
inline std::pair<Tensor, Tensor> to_dev(std::pair<Tensor, Tensor> p, Device d) {
  return {to_dev(std::move(p.first), d), to_dev(std::move(p.second), d)};
}
inline std::vector<Tensor> to_dev(std::vector<Tensor> v, Device d) {
  for (Tensor& t : v) t = to_dev(std::move(t), d);
  return v;
}
AttentionGrads to_dev(AttentionGrads g, Device d);  // attention.cc

// The device implementation when registered, else `host` on host copies, results moved back.
// (`slot` is nullptr for a function without device implementations.)
template <typename Slot, typename Host, typename... A>
auto call(const char* name, Slot slot, Host host, const A&... a) {
  if constexpr (!std::is_same_v<Slot, std::nullptr_t>) {
    if (slot) return slot(a...);
  }
  note_host_fallback(name);
  Device d = cpu();
  (find_device(&d, a), ...);
  return to_dev(host(to_host(a)...), d);
}

}  // namespace device_detail
}  // namespace dtensor::kernels

// First statement of a kernel function: DT_KERNEL_ON_DEVICE(slot, function, every argument...).
#define DT_KERNEL_ON_DEVICE(slot, fn, ...)                                                  \
  do {                                                                                      \
    if (::dtensor::kernels::device_detail::any_on_device(__VA_ARGS__))                      \
      return ::dtensor::kernels::device_detail::call(                                       \
          #fn, ::dtensor::kernels::cuda_kernels().slot,                                     \
          [](const auto&... host_args) { return fn(host_args...); }, __VA_ARGS__);         \
  } while (0)

// The same for a function without a device implementation (always the host fallback).
#define DT_KERNEL_HOST_ONLY(fn, ...)                                                        \
  do {                                                                                      \
    if (::dtensor::kernels::device_detail::any_on_device(__VA_ARGS__))                      \
      return ::dtensor::kernels::device_detail::call(                                       \
          #fn, nullptr,                                                                     \
          [](const auto&... host_args) { return fn(host_args...); }, __VA_ARGS__);         \
  } while (0)

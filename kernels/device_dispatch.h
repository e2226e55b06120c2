// Device routing of the kernels (ATen's dispatcher, reduced to one device type). It sits in
// kernels/, beside the kernel list, because it belongs to neither implementation: the cpu kernels
// call into it and the CUDA kernels register with it. Every kernel function of kernels/cpu begins
// with DT_KERNEL_ON_DEVICE (or DT_KERNEL_HOST_ONLY): when one of its tensor arguments is on a device
// (CUDA), it calls the implementation registered in that function's slot of cuda_kernels() (filled
// in by //kernels/cuda at static initialization, kernels/cuda/register.cc), or, when there is none,
// the cpu kernel on host copies of the tensors with the results copied back to the device (correct,
// not fast; counted per function in host_fallback_counts()). With every tensor on the cpu nothing
// changes. So op kernels, autograd formulas and the optimizer are device-generic.
//
// The slots are generated from kernels/kernel_list.h; a slot holds a function of the list entry's
// type, which receives device tensors (all on one device unless a caller mixed them: the CUDA
// kernels then throw naming the devices).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtensor/core/tensor.h"
#include "kernels/kernel_list.h"

namespace dtensor::kernels {

// One function pointer per kernel of the list, named by its slot.
struct DeviceKernels {
#define DT_DEVICE_SLOT(slot, function, type) std::add_pointer_t<type> slot = nullptr;
  DT_KERNEL_LIST(DT_DEVICE_SLOT)
#undef DT_DEVICE_SLOT
};

// The name a slot's host fallbacks are counted under: its function's (add_s counts as "add").
struct KernelNames {
#define DT_KERNEL_NAME(slot, function, type) static constexpr const char* slot = #function;
  DT_KERNEL_LIST(DT_KERNEL_NAME)
#undef DT_KERNEL_NAME
};

// The CUDA implementations (all null until //kernels/cuda is linked). Written only at static
// initialization, read afterwards.
DeviceKernels& cuda_kernels();
// The cpu kernels in the same slots, which the host fallback runs (defined by //kernels/cpu,
// kernels/cpu/host_kernels.cc; DT_KERNEL_ON_DEVICE is only used there).
const DeviceKernels& host_kernels();

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
AttentionGrads to_dev(AttentionGrads g, Device d);  // kernels/cpu/host_kernels.cc
AttentionWithLse to_dev(AttentionWithLse a, Device d);  // kernels/cpu/host_kernels.cc

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

// First statement of a kernel function of the list: DT_KERNEL_ON_DEVICE(slot, every parameter...).
#define DT_KERNEL_ON_DEVICE(slot, ...)                                                      \
  do {                                                                                      \
    if (::dtensor::kernels::device_detail::any_on_device(__VA_ARGS__))                      \
      return ::dtensor::kernels::device_detail::call(                                       \
          ::dtensor::kernels::KernelNames::slot, ::dtensor::kernels::cuda_kernels().slot,   \
          ::dtensor::kernels::host_kernels().slot, __VA_ARGS__);                            \
  } while (0)

// The same for a function without a slot: DT_KERNEL_HOST_ONLY(function, every parameter...) always
// runs it on host copies.
#define DT_KERNEL_HOST_ONLY(fn, ...)                                                        \
  do {                                                                                      \
    if (::dtensor::kernels::device_detail::any_on_device(__VA_ARGS__))                      \
      return ::dtensor::kernels::device_detail::call(                                       \
          #fn, nullptr,                                                                     \
          [](const auto&... host_args) { return fn(host_args...); }, __VA_ARGS__);         \
  } while (0)

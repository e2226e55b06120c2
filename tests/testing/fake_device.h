// A stand-in for CUDA memory on machines without a GPU, for tests of the device plumbing (device
// copies, the kernels' host fallback, redistribution and collectives on device tensors, autograd
// and training on a device). It installs a kCUDA allocator whose memory is host memory holding every
// byte inverted (~b), and the kCUDA device copy that encodes and decodes it. So a code path that
// reads or writes "device" memory directly instead of going through Tensor::copy_ (a cpu kernel
// that skipped its DT_KERNEL_ON_DEVICE check, a raw memcpy in a collective) sees garbage and the
// test comparing against the cpu result fails. No GPU kernel is exercised here: the test binaries
// using it must not link //kernels/cuda (the CUDA dispatch table stays empty, every kernel falls
// back to the host).
#pragma once

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "dtensor/core/storage.h"
#include "dtensor/core/tensor.h"

namespace dtensor::testing {

namespace fake_device_detail {

inline std::mutex& write_mutex() {
  static std::mutex m;
  return m;
}

inline void invert(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  auto* s = static_cast<const unsigned char*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<unsigned char>(~s[i]);
}

// A cpu tensor with t's view over a decoded copy of t's whole storage.
inline Tensor decoded(const Tensor& t) {
  auto host = Storage::allocate(t.storage()->nbytes());
  invert(host->data(), t.storage()->data(), t.storage()->nbytes());
  return Tensor::from_storage(host, t.storage_offset(), t.sizes(), t.strides(), t.dtype());
}

inline void fake_copy(Tensor& dst, const Tensor& src) {
  Tensor s = src.device().is_cpu() ? src : decoded(src);
  if (dst.device().is_cpu()) {
    dst.copy_(s);
    return;
  }
  std::lock_guard<std::mutex> l(write_mutex());
  Tensor d = decoded(dst);
  d.copy_(s);
  invert(dst.storage()->data(), d.storage()->data(), dst.storage()->nbytes());
}

}  // namespace fake_device_detail

// Installs the fake kCUDA allocator and copy (idempotent).
inline void install_fake_cuda() {
  static std::once_flag once;
  std::call_once(once, [] {
    Storage::register_allocator(DeviceType::kCUDA, [](size_t nbytes, Device device) {
      const size_t rounded = (nbytes + 63) / 64 * 64 + 64;
      void* p = std::aligned_alloc(64, rounded);
      DT_CHECK(p != nullptr, "fake cuda: out of memory");
      std::memset(p, 0x5a, rounded);  // uninitialized device memory: not zeros
      return Storage::borrow(p, nbytes, device, [p] { std::free(p); });
    });
    register_device_copy(DeviceType::kCUDA, fake_device_detail::fake_copy);
  });
}

inline Device fake_cuda(int index = 0) { return Device{DeviceType::kCUDA, index}; }

}  // namespace dtensor::testing

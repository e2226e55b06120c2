// The local strided tensor: a view (sizes, strides, offset, dtype) over a reference-counted Storage.
// Views share storage; contiguous()/clone()/to() copy. All sizes and strides are in elements.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/core/device.h"
#include "dtensor/core/dtype.h"
#include "dtensor/core/error.h"
#include "dtensor/core/shape.h"
#include "dtensor/core/storage.h"

namespace dtensor {

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false

  // New contiguous tensors. Throws dtensor::Error on a negative size.
  static Tensor empty(const Shape& sizes, DType dtype = DType::kFloat32, Device device = cpu());
  static Tensor zeros(const Shape& sizes, DType dtype = DType::kFloat32, Device device = cpu());
  static Tensor full(const Shape& sizes, double value, DType dtype = DType::kFloat32,
                     Device device = cpu());
  // 0, 1, ..., n-1 as a 1-d tensor.
  static Tensor arange(int64_t n, DType dtype = DType::kFloat32);
  // Copies `values` (numel(sizes) of them, else Error) into a new contiguous tensor of T's dtype.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& sizes);
  // A view over existing storage; checks that the view stays inside the storage.
  static Tensor from_storage(std::shared_ptr<Storage> storage, int64_t offset, Shape sizes,
                             Shape strides, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& sizes() const { return sizes_; }
  int64_t size(int64_t d) const;
  const Shape& strides() const { return strides_; }
  int64_t stride(int64_t d) const;
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t numel() const { return dtensor::numel(sizes_); }
  DType dtype() const { return dtype_; }
  size_t element_size() const { return itemsize(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  Device device() const { return storage_ ? storage_->device() : cpu(); }
  int64_t storage_offset() const { return offset_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool is_contiguous() const;

  void* data_ptr() const;
  // Typed pointer to the first element; throws if T does not match dtype().
  template <typename T>
  T* data() const;

  // ---- Views (share storage). Dims may be negative (counted from the end).
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor movedim(int64_t src, int64_t dst) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  // View with a new shape (one -1 inferred). Throws if the strides cannot express it; use reshape.
  Tensor view(const Shape& sizes) const;
  // view() when possible, else a contiguous copy.
  Tensor reshape(const Shape& sizes) const;
  // Broadcast size-1 dims (stride 0) and prepend new leading dims; -1 keeps a size.
  Tensor expand(const Shape& sizes) const;

  // ---- Copies.
  Tensor contiguous() const;  // this, when already contiguous
  Tensor clone() const;
  Tensor to(DType dtype) const;  // this, when dtype matches
  // A contiguous copy on `device` (this, when already there): cpu <-> cuda needs the device's copy
  // function (register_device_copy); throws dtensor::Error naming both devices when none is.
  Tensor to(Device device) const;
  // Copies src into this (same shape; src dtype is cast; any devices: a non-cpu side goes through
  // the registered device copy, see register_device_copy). Returns *this.
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double value);

  // ---- Values, for tests and printing (a device tensor is first copied to the host).
  double item() const;  // a one-element tensor's value as double
  template <typename T>
  std::vector<T> to_vector() const;  // all values in row-major order, cast to T
  std::string str() const;  // e.g. "Tensor[float32, [2, 3], cpu]"

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  Shape sizes_;
  Shape strides_;
  DType dtype_ = DType::kFloat32;
};

// Concatenates along dim; all tensors share dtype and the other sizes (else Error).
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
// True when a and b have the same shape, dtype and bit-identical values (NaNs with equal bits match).
bool equal(const Tensor& a, const Tensor& b);
// Largest |a - b| over all elements (computed in double); NaN where exactly one side is NaN.
// Throws if shapes differ. Complex (either side): over the real and imaginary parts separately.
double max_abs_diff(const Tensor& a, const Tensor& b);
// |a - b| <= atol + rtol * |b| everywhere, NaN matching NaN (complex: per real and imaginary part).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

// ---- Copies that involve a non-cpu device. The device library (//kernels/cuda for kCUDA) installs
// one function per device type; Tensor::copy_ calls the one of dst's device type, or of src's when
// dst is on the cpu. It gets same-shaped tensors, at least one on that device type, any strides,
// any dtypes (cast like copy_strided), and returns once dst may be read from the host (for a cpu
// dst) or in stream order (for a device dst).
using DeviceCopyFn = std::function<void(Tensor& dst, const Tensor& src)>;
// Installs (an empty function removes) the copy of `type`; returns the previous one. Thread-safe.
// Throws dtensor::Error for DeviceType::kCPU.
DeviceCopyFn register_device_copy(DeviceType type, DeviceCopyFn fn);

// ---- Low-level strided copy with dtype cast; used by copy_/contiguous and the collectives.
void copy_strided(void* dst, const Shape& dst_strides, DType dst_dtype, const void* src,
                  const Shape& src_strides, DType src_dtype, const Shape& sizes);

template <typename T>
T* Tensor::data() const {
  DT_CHECK(DTypeOf<T>::value == dtype_, "Tensor::data<", dtype_name(DTypeOf<T>::value),
           ">: tensor has dtype ", dtype_name(dtype_));
  return static_cast<T*>(data_ptr());
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& sizes) {
  DT_CHECK(static_cast<int64_t>(values.size()) == dtensor::numel(sizes),
           "Tensor::from_vector: ", values.size(), " values for shape ", shape_str(sizes));
  Tensor t = empty(sizes, DTypeOf<T>::value);
  T* p = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = to(dtensor::cpu()).to(DTypeOf<T>::value).contiguous();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}

}  // namespace dtensor

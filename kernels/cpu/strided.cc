#include "kernels/cpu/strided.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "dtensor/core/error.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels {

Tensor as_strided_positions(const Shape& size, const Shape& stride, int64_t offset, int64_t storage) {
  DT_CHECK(size.size() == stride.size(), "as_strided: size ", shape_str(size), " and stride ", shape_str(stride),
           " differ in length; accepted: one stride per dim");
  DT_CHECK(offset >= 0, "as_strided: storage_offset ", offset, "; accepted: >= 0");
  int64_t last = offset;
  for (size_t d = 0; d < size.size(); ++d) {
    DT_CHECK(size[d] >= 0 && stride[d] >= 0, "as_strided: size ", shape_str(size), ", stride ", shape_str(stride),
             "; accepted: sizes and strides >= 0");
    if (size[d] > 0) last += (size[d] - 1) * stride[d];
  }
  const int64_t n = numel(size);
  DT_CHECK(n == 0 || last < storage, "as_strided: size ", shape_str(size), ", stride ", shape_str(stride),
           ", storage_offset ", offset, " reach element ", last, " of a tensor of ", storage,
           " elements; accepted: positions inside the tensor (its storage when contiguous)");
  Tensor pos = Tensor::empty(size, DType::kInt64);
  int64_t* p = pos.data<int64_t>();
  Shape idx(size.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t at = offset;
    for (size_t d = 0; d < size.size(); ++d) at += idx[d] * stride[d];
    p[i] = at;
    for (size_t d = size.size(); d-- > 0;) {
      if (++idx[d] < size[d]) break;
      idx[d] = 0;
    }
  }
  return pos;
}

Tensor as_strided(const Tensor& self, const Shape& size, const Shape& stride, int64_t offset) {
  DT_KERNEL_HOST_ONLY(as_strided, self, size, stride, offset);
  const Tensor pos = as_strided_positions(size, stride, offset, self.numel());
  const Tensor x = self.contiguous();
  Tensor out = Tensor::empty(size, self.dtype());
  const size_t bytes = out.element_size();
  const char* xp = static_cast<const char*>(x.data_ptr());
  char* op = static_cast<char*>(out.data_ptr());
  const int64_t* p = pos.data<int64_t>();
  for (int64_t i = 0; i < out.numel(); ++i) std::memcpy(op + i * bytes, xp + p[i] * bytes, bytes);
  return out;
}

Tensor resize(const Tensor& self, const Shape& size) {
  DT_KERNEL_HOST_ONLY(resize, self, size);
  for (int64_t s : size) DT_CHECK(s >= 0, "resize_: size ", shape_str(size), "; accepted: sizes >= 0");
  Tensor out = Tensor::zeros(size, self.dtype());
  const Tensor x = self.contiguous();
  const int64_t kept = std::min(out.numel(), x.numel());
  if (kept > 0) std::memcpy(out.data_ptr(), x.data_ptr(), static_cast<size_t>(kept) * out.element_size());
  return out;
}

}  // namespace dtensor::kernels

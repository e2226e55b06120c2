#include "kernels/cpu/view.h"
#include "kernels/device_dispatch.h"

#include <algorithm>

namespace dtensor::kernels {

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  DT_KERNEL_ON_DEVICE(stack, tensors, dim);
  DT_CHECK(!tensors.empty(), "stack: expects a non-empty list of tensors");
  const Tensor& first = tensors[0];
  dim = wrap_dim(dim, first.dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors) {
    DT_CHECK(t.sizes() == first.sizes() && t.dtype() == first.dtype(), "stack: tensor ", t.str(),
             " does not match ", first.str(), " (accepted: equal shapes and dtypes)");
    parts.push_back(t.unsqueeze(dim));
  }
  return cat(parts, dim);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  DT_KERNEL_HOST_ONLY(split, x, split_size, dim);
  dim = wrap_dim(dim, x.dim(), "split");
  DT_CHECK(x.dim() >= 1, "split: cannot split a 0-d tensor");
  const int64_t n = x.size(dim);
  DT_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: split_size ", split_size,
           " is invalid for dim ", dim, " of ", shape_str(x.sizes()),
           " (accepted: > 0, or 0 when the dim has size 0)");
  std::vector<Tensor> out;
  int64_t at = 0;
  do {
    const int64_t len = std::min(split_size, n - at);
    out.push_back(x.narrow(dim, at, len));
    at += len;
  } while (at < n);
  return out;
}

std::vector<Tensor> split_with_sizes(const Tensor& x, const std::vector<int64_t>& sizes,
                                     int64_t dim) {
  DT_KERNEL_HOST_ONLY(split_with_sizes, x, sizes, dim);
  dim = wrap_dim(dim, x.dim(), "split_with_sizes");
  DT_CHECK(x.dim() >= 1, "split_with_sizes: cannot split a 0-d tensor");
  int64_t total = 0;
  for (int64_t s : sizes) {
    DT_CHECK(s >= 0, "split_with_sizes: negative size ", s);
    total += s;
  }
  DT_CHECK(total == x.size(dim), "split_with_sizes: sizes [", absl::StrJoin(sizes, ", "),
           "] sum to ", total, ", not to dim ", dim, " of ", shape_str(x.sizes()), " (size ",
           x.size(dim), ")");
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(dim, at, s));
    at += s;
  }
  return out;
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  DT_KERNEL_ON_DEVICE(index_select, x, dim, index);
  DT_CHECK(x.dim() >= 1, "index_select: input must have at least 1 dim, got ",
           shape_str(x.sizes()));
  dim = wrap_dim(dim, x.dim(), "index_select");
  DT_CHECK((index.dtype() == DType::kInt64 || index.dtype() == DType::kInt32) && index.dim() <= 1,
           "index_select: index must be a 0-d or 1-d int64/int32 tensor, got ",
           dtype_name(index.dtype()), " ", shape_str(index.sizes()));
  const std::vector<int64_t> idx = index.to_vector<int64_t>();
  Shape shape = x.sizes();
  shape[dim] = static_cast<int64_t>(idx.size());
  Tensor out = Tensor::empty(shape, x.dtype());
  for (size_t i = 0; i < idx.size(); ++i) {
    DT_CHECK(idx[i] >= 0 && idx[i] < x.size(dim), "index_select: index ", idx[i],
             " out of range for dim ", dim, " of ", shape_str(x.sizes()), " (accepted: 0 to ",
             x.size(dim) - 1, ")");
    out.select(dim, static_cast<int64_t>(i)).copy_(x.select(dim, idx[i]));
  }
  return out;
}

}  // namespace dtensor::kernels

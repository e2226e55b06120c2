#include "kernels/cpu/gather_scatter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels {
namespace {

// The checks both ops share; returns the wrapped dim and the dim's full size.
std::pair<int64_t, int64_t> check_args(const char* op, const Tensor& self, int64_t dim, const Tensor& index,
                                       const Tensor* src, int64_t offset, int64_t full) {
  DT_CHECK(index.dtype() == DType::kInt64 || index.dtype() == DType::kInt32, op, ": index has dtype ",
           dtype_name(index.dtype()), " (accepted: int64, int32)");
  const int64_t rank = self.dim();
  DT_CHECK(index.dim() == rank || (rank == 0 && index.dim() <= 1 && index.numel() <= 1), op, ": index ",
           shape_str(index.sizes()), " and self ", shape_str(self.sizes()),
           " (accepted: the same number of dims)");
  dim = rank == 0 ? 0 : wrap_dim(dim, rank, op);
  for (int64_t d = 0; d < index.dim() && rank > 0; ++d) {
    DT_CHECK(d == dim || index.size(d) <= self.size(d), op, ": index ", shape_str(index.sizes()), " is larger than self ",
             shape_str(self.sizes()), " at dim ", d, " (accepted: index.size(d) <= self.size(d) for d != ", dim, ")");
    DT_CHECK(src == nullptr || index.size(d) <= src->size(d), op, ": index ", shape_str(index.sizes()),
             " is larger than src ", shape_str(src->sizes()), " at dim ", d);
  }
  if (src != nullptr)
    DT_CHECK((src->dim() == rank || (rank == 0 && src->dim() <= 1 && src->numel() <= 1)) &&
                 src->dtype() == self.dtype(),
             op, ": src ", src->str(), " for self ", self.str(), " (accepted: the same number of dims and dtype)");
  const int64_t n = rank == 0 ? 1 : self.size(dim);
  if (full < 0) full = n;
  DT_CHECK(offset >= 0 && offset + n <= full, op, ": a block of ", n, " rows at ", offset, " in a dim of ", full);
  return {dim, full};
}

// Calls f(index_pos, self_pos, src_pos) with the flat (contiguous) positions of every element of
// index, or of none when the index is empty; self_pos is -1 for an index outside the block.
template <typename F>
void for_each(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor* src,
              int64_t offset, int64_t full, F&& f) {
  const int64_t rank = self.dim(), count = index.numel();
  if (count == 0) return;
  const int64_t* ip = index.data<int64_t>();
  if (rank == 0) {
    for (int64_t p = 0; p < count; ++p) {
      DT_CHECK(ip[p] >= 0 && ip[p] < full, op, ": index ", ip[p], " is out of range for a dim of size ", full,
               " (accepted: indices in [0, ", full, "))");
      f(p, ip[p] - offset == 0 ? int64_t{0} : int64_t{-1}, p);
    }
    return;
  }
  // Row-major strides of contiguous self and src.
  std::vector<int64_t> ss(rank, 1), rs(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) {
    ss[d] = ss[d + 1] * self.size(d + 1);
    if (src != nullptr) rs[d] = rs[d + 1] * src->size(d + 1);
  }
  std::vector<int64_t> pos(rank, 0);
  const int64_t n = self.size(dim);
  for (int64_t p = 0; p < count; ++p) {
    const int64_t v = ip[p];
    DT_CHECK(v >= 0 && v < full, op, ": index ", v, " is out of range for a dim of size ", full,
             " (accepted: indices in [0, ", full, "))");
    int64_t s = 0, r = 0;
    for (int64_t d = 0; d < rank; ++d) {
      s += (d == dim ? v - offset : pos[d]) * ss[d];
      r += pos[d] * rs[d];
    }
    const bool held = v >= offset && v < offset + n;
    f(p, held ? s : int64_t{-1}, r);
    for (int64_t d = rank - 1; d >= 0; --d) {  // the next position of index
      if (++pos[d] < index.size(d)) break;
      pos[d] = 0;
    }
  }
}

}  // namespace

Tensor gather(const Tensor& self, int64_t dim, const Tensor& index, int64_t offset, int64_t full) {
  const char* op = "gather";
  std::tie(dim, full) = check_args(op, self, dim, index, nullptr, offset, full);
  DT_KERNEL_ON_DEVICE(gather, self, dim, index, offset, full);
  const Tensor s = self.contiguous(), i = index.contiguous().to(DType::kInt64);
  Tensor out = Tensor::zeros(index.sizes(), self.dtype());
  const size_t item = itemsize(self.dtype());
  const auto* sp = static_cast<const unsigned char*>(s.data_ptr());
  auto* op_ = static_cast<unsigned char*>(out.data_ptr());
  for_each(op, s, dim, i, nullptr, offset, full, [&](int64_t p, int64_t at, int64_t) {
    if (at >= 0) std::memcpy(op_ + p * item, sp + at * item, item);
  });
  return out;
}

namespace {

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  return false;
}

enum class Reduce { kSum, kProd, kMean, kMax, kMin };

// scatter_add (kSum with include_self) and scatter_reduce, after their argument checks.
Tensor reduce_at(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                 Reduce kind, bool include_self, int64_t offset, int64_t full) {
  const DType c = detail::compute_dtype(self.dtype());
  const Tensor i = index.contiguous().to(DType::kInt64), r = src.contiguous().to(c);
  Tensor acc = self.contiguous().to(c).clone();
  std::vector<int64_t> count(static_cast<size_t>(acc.numel()), include_self ? 1 : 0);
  detail::dispatch_compute(c, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* a = acc.data<T>();
    const T* rp = r.data<T>();
    for_each(op, self, dim, i, &src, offset, full, [&](int64_t, int64_t at, int64_t from) {
      if (at < 0) return;
      const T v = rp[from];
      T& x = a[at];
      if (count[at]++ == 0) {
        x = v;
        return;
      }
      switch (kind) {
        case Reduce::kSum:
        case Reduce::kMean:
          if constexpr (std::is_integral_v<T>) x = detail::wrap_add(x, v);
          else x += v;
          break;
        case Reduce::kProd:
          x = static_cast<T>(x * v);
          break;
        case Reduce::kMax:
          x = is_nan(x) || is_nan(v) ? (is_nan(x) ? x : v) : std::max(x, v);
          break;
        case Reduce::kMin:
          x = is_nan(x) || is_nan(v) ? (is_nan(x) ? x : v) : std::min(x, v);
          break;
      }
    });
    if (kind == Reduce::kMean)
      for (int64_t k = 0; k < acc.numel(); ++k) {
        if (count[k] <= 1) continue;
        if constexpr (std::is_integral_v<T>) {
          const T q = a[k] / count[k];
          a[k] = q * count[k] > a[k] ? q - 1 : q;  // floor
        } else {
          a[k] /= static_cast<T>(count[k]);
        }
      }
  });
  return acc.to(self.dtype());
}

}  // namespace

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, int64_t offset,
                   int64_t full) {
  const char* op = "scatter_add";
  std::tie(dim, full) = check_args(op, self, dim, index, &src, offset, full);
  DT_KERNEL_ON_DEVICE(scatter_add, self, dim, index, src, offset, full);
  return reduce_at(op, self, dim, index, src, Reduce::kSum, true, offset, full);
}

Tensor scatter_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                      bool include_self, int64_t offset, int64_t full) {
  DT_KERNEL_HOST_ONLY(scatter_reduce, self, dim, index, src, reduce, include_self, offset, full);
  const char* op = "scatter_reduce";
  Reduce kind;
  if (reduce == "sum") kind = Reduce::kSum;
  else if (reduce == "prod") kind = Reduce::kProd;
  else if (reduce == "mean") kind = Reduce::kMean;
  else if (reduce == "amax") kind = Reduce::kMax;
  else if (reduce == "amin") kind = Reduce::kMin;
  else DT_FAIL(op, ": reduce '", reduce, "'; accepted: sum, prod, mean, amax, amin");
  std::tie(dim, full) = check_args(op, self, dim, index, &src, offset, full);
  return reduce_at(op, self, dim, index, src, kind, include_self, offset, full);
}

Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, int64_t offset,
               int64_t full) {
  DT_KERNEL_HOST_ONLY(scatter, self, dim, index, src, offset, full);
  const char* op = "scatter";
  std::tie(dim, full) = check_args(op, self, dim, index, &src, offset, full);
  const Tensor i = index.contiguous().to(DType::kInt64), r = src.contiguous();
  Tensor out = self.contiguous().clone();
  const size_t item = itemsize(self.dtype());
  const auto* rp = static_cast<const unsigned char*>(r.data_ptr());
  auto* op_ = static_cast<unsigned char*>(out.data_ptr());
  for_each(op, self, dim, i, &src, offset, full, [&](int64_t, int64_t at, int64_t from) {
    if (at >= 0) std::memcpy(op_ + at * item, rp + from * item, item);
  });
  return out;
}

}  // namespace dtensor::kernels

#include "kernels/cpu/advanced_index.h"

#include <cstring>
#include <string>

#include "kernels/cpu/loops.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels {

AdvancedIndexLayout advanced_index_layout(const char* op, const Shape& self,
                                          const std::vector<std::optional<Shape>>& indices) {
  const int64_t rank = static_cast<int64_t>(self.size());
  DT_CHECK(static_cast<int64_t>(indices.size()) <= rank, op, ": ", indices.size(), " indices for self ",
           shape_str(self), "; accepted: at most ", rank, " (one per dim)");
  AdvancedIndexLayout l;
  bool any = false;
  for (size_t d = 0; d < indices.size(); ++d) {
    if (!indices[d]) continue;
    l.broadcast = any ? detail::broadcast_op(op, l.broadcast, *indices[d]) : *indices[d];
    any = true;
    l.indexed.push_back(static_cast<int64_t>(d));
  }
  DT_CHECK(any, op, ": no index tensor among the ", indices.size(), " indices for self ", shape_str(self),
           "; accepted: at least one that is not None");
  const bool adjacent = l.indexed.back() - l.indexed.front() + 1 == static_cast<int64_t>(l.indexed.size());
  l.first = adjacent ? l.indexed.front() : 0;
  const int64_t nb = static_cast<int64_t>(l.broadcast.size());
  l.result_dim.assign(rank, -1);
  std::vector<int64_t> rest;
  for (int64_t d = 0; d < rank; ++d)
    if (d >= static_cast<int64_t>(indices.size()) || !indices[d]) rest.push_back(d);
  for (size_t k = 0; k < rest.size(); ++k) {
    const int64_t d = rest[k];
    l.result_dim[d] = adjacent ? (d < l.first ? d : d - static_cast<int64_t>(l.indexed.size()) + nb)
                               : nb + static_cast<int64_t>(k);
  }
  l.result.assign(static_cast<size_t>(nb + static_cast<int64_t>(rest.size())), 0);
  for (int64_t j = 0; j < nb; ++j) l.result[l.first + j] = l.broadcast[j];
  for (int64_t d : rest) l.result[l.result_dim[d]] = self[d];
  return l;
}

namespace {

// Flat offsets (in contiguous `sizes`) of every position over `dims`, in row-major order of dims.
std::vector<int64_t> offsets_over(const std::vector<int64_t>& dims, const Shape& sizes, const Shape& strides) {
  std::vector<int64_t> out{0};
  for (int64_t d : dims) {
    std::vector<int64_t> next;
    next.reserve(out.size() * static_cast<size_t>(sizes[d]));
    for (int64_t base : out)
      for (int64_t k = 0; k < sizes[d]; ++k) next.push_back(base + k * strides[d]);
    out = std::move(next);
  }
  return out;
}

// An index call on one block: result element ((o * |B| + b) * |inner| + i) is self's flat element
// outer[o] + at[b] + inner[i] (at[b] = -1: not in this block).
struct Walk {
  AdvancedIndexLayout layout;  // over the block's sizes
  std::vector<int64_t> outer, at, inner;
};

Walk walk(const char* op, const Tensor& self, const std::vector<Tensor>& indices, Shape offset,
          Shape full) {
  const Shape& s = self.sizes();
  const int64_t rank = self.dim();
  if (offset.empty()) offset.assign(rank, 0);
  if (full.empty()) full = s;
  DT_CHECK(static_cast<int64_t>(offset.size()) == rank && static_cast<int64_t>(full.size()) == rank, op,
           ": block offsets ", shape_str(offset), " and sizes ", shape_str(full), " for self ", shape_str(s));
  std::vector<std::optional<Shape>> shapes;
  for (size_t d = 0; d < indices.size(); ++d) {
    const Tensor& t = indices[d];
    if (!t.defined()) {
      shapes.push_back(std::nullopt);
      continue;
    }
    DT_CHECK(t.dtype() == DType::kInt64 || t.dtype() == DType::kInt32, op, ": index ", d, " has dtype ",
             dtype_name(t.dtype()), "; accepted: int64, int32 (a bool mask expanded to its nonzero positions first)");
    shapes.push_back(t.sizes());
  }
  Walk w;
  w.layout = advanced_index_layout(op, s, shapes);
  const AdvancedIndexLayout& l = w.layout;
  Shape strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) strides[d] = strides[d + 1] * s[d + 1];
  std::vector<int64_t> outer, inner;
  for (int64_t d = 0; d < rank; ++d) {
    if (l.result_dim[d] < 0) continue;
    (l.result_dim[d] < l.first ? outer : inner).push_back(d);
  }
  w.outer = offsets_over(outer, s, strides);
  w.inner = offsets_over(inner, s, strides);
  const int64_t nb = numel(l.broadcast);
  w.at.assign(static_cast<size_t>(nb), 0);
  for (int64_t d : l.indexed) {
    Shape padded(l.broadcast.size() - indices[d].dim(), 1);
    padded.insert(padded.end(), indices[d].sizes().begin(), indices[d].sizes().end());
    const Tensor v = indices[d].to(DType::kInt64).contiguous().reshape(padded).expand(l.broadcast).contiguous();
    const int64_t* vp = v.data<int64_t>();
    const int64_t n = full[d], lo = offset[d], hi = offset[d] + s[d];
    for (int64_t b = 0; b < nb; ++b) {
      int64_t x = vp[b];
      DT_CHECK(x >= -n && x < n, op, ": index ", x, " is out of range for dim ", d, " of size ", n,
               " (accepted: indices in [", -n, ", ", n, "))");
      if (x < 0) x += n;
      if (w.at[b] < 0) continue;
      w.at[b] = x >= lo && x < hi ? w.at[b] + (x - lo) * strides[d] : -1;
    }
  }
  return w;
}

// f(result_pos, self_pos) for every result element whose source the block holds.
template <typename F>
void for_each(const Walk& w, F&& f) {
  const int64_t nb = static_cast<int64_t>(w.at.size()), ni = static_cast<int64_t>(w.inner.size());
  int64_t p = 0;
  for (int64_t o : w.outer)
    for (int64_t b = 0; b < nb; ++b) {
      if (w.at[b] < 0) {
        p += ni;
        continue;
      }
      const int64_t base = o + w.at[b];
      for (int64_t i = 0; i < ni; ++i, ++p) f(p, base + w.inner[i]);
    }
}

}  // namespace

Tensor index(const Tensor& self, const std::vector<Tensor>& indices, const Shape& offset,
             const Shape& full) {
  DT_KERNEL_HOST_ONLY(index, self, indices, offset, full);
  const Walk w = walk("index", self, indices, offset, full);
  const Tensor s = self.contiguous();
  Tensor out = Tensor::zeros(w.layout.result, self.dtype());
  const size_t item = itemsize(self.dtype());
  const auto* sp = static_cast<const unsigned char*>(s.data_ptr());
  auto* op = static_cast<unsigned char*>(out.data_ptr());
  for_each(w, [&](int64_t p, int64_t at) { std::memcpy(op + p * item, sp + at * item, item); });
  return out;
}

Tensor index_put(const Tensor& self, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate,
                 const Shape& offset, const Shape& full) {
  DT_KERNEL_HOST_ONLY(index_put, self, indices, values, accumulate, offset, full);
  const char* op = "index_put";
  DT_CHECK(values.dtype() == self.dtype(), op, ": values have dtype ", dtype_name(values.dtype()), ", self ",
           dtype_name(self.dtype()), "; accepted: the same dtype");
  const Walk w = walk(op, self, indices, offset, full);
  const Shape& r = w.layout.result;
  DT_CHECK(values.dim() <= static_cast<int64_t>(r.size()), op, ": values ", shape_str(values.sizes()),
           " do not broadcast to self[indices] ", shape_str(r));
  Shape padded(r.size() - values.dim(), 1);
  padded.insert(padded.end(), values.sizes().begin(), values.sizes().end());
  DT_CHECK(detail::broadcast_op(op, padded, r) == r, op, ": values ", shape_str(values.sizes()),
           " do not broadcast to self[indices] ", shape_str(r), "; accepted: sizes equal or 1, from the right");
  if (!accumulate) {
    const Tensor v = values.contiguous().reshape(padded).expand(r).contiguous();
    Tensor out = self.contiguous().clone();
    const size_t item = itemsize(self.dtype());
    const auto* vp = static_cast<const unsigned char*>(v.data_ptr());
    auto* op_ = static_cast<unsigned char*>(out.data_ptr());
    for_each(w, [&](int64_t p, int64_t at) { std::memcpy(op_ + at * item, vp + p * item, item); });
    return out;
  }
  const DType c = detail::compute_dtype(self.dtype());
  const Tensor v = values.to(c).contiguous().reshape(padded).expand(r).contiguous();
  Tensor acc = self.to(c).contiguous().clone();
  detail::dispatch_compute(c, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* a = acc.data<T>();
    const T* vp = v.data<T>();
    for_each(w, [&](int64_t p, int64_t at) {
      if constexpr (std::is_integral_v<T>) a[at] = detail::wrap_add(a[at], vp[p]);
      else a[at] += vp[p];
    });
  });
  return acc.to(self.dtype());
}

}  // namespace dtensor::kernels

#include "kernels/cpu/sort.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/gather_scatter.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels {
namespace {

// The int64 positions of the first `k` elements of each row along `dim` in the order above.
template <typename K>
Tensor order_rows(const Tensor& keys, int64_t n, int64_t k, bool descending) {
  const K* key = keys.data<K>();
  const int64_t rows = n == 0 ? 0 : keys.numel() / n;
  Tensor out = Tensor::empty({rows, k}, DType::kInt64);
  int64_t* o = out.data<int64_t>();
  std::vector<int64_t> idx(n);
  for (int64_t r = 0; r < rows; ++r) {
    const K* row = key + r * n;
    std::iota(idx.begin(), idx.end(), int64_t{0});
    // NaN is the largest: it sorts last ascending, first descending.
    auto before = [&](int64_t a, int64_t b) {
      const K va = row[a], vb = row[b];
      const bool na = va != va, nb = vb != vb;
      if (na || nb) return descending ? (na && !nb) : (!na && nb);
      return descending ? va > vb : va < vb;
    };
    if (k < n) {
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) {
        return before(a, b) || (!before(b, a) && a < b);  // ties: the lower index first
      });
    } else {
      std::stable_sort(idx.begin(), idx.end(), before);
    }
    std::copy(idx.begin(), idx.begin() + k, o + r * k);
  }
  return out;
}

std::pair<Tensor, Tensor> first_k(const Tensor& x, int64_t k, int64_t dim, bool descending) {
  if (x.dim() == 0) return {x.contiguous().clone(), Tensor::zeros({}, DType::kInt64)};
  const Tensor moved = x.movedim(dim, -1).contiguous();
  const int64_t n = moved.sizes().back();
  // Keys in a type that orders them exactly: double for the floating dtypes, int64 for the others.
  const bool floating = is_floating(x.dtype());
  const Tensor keys = moved.to(floating ? DType::kFloat64 : DType::kInt64).contiguous();
  const Tensor rows = floating ? order_rows<double>(keys, n, k, descending) : order_rows<int64_t>(keys, n, k, descending);
  Shape shape = moved.sizes();
  shape.back() = k;
  const Tensor indices = rows.reshape(shape).movedim(-1, dim).contiguous();
  return {gather(x, dim, indices), indices};
}

}  // namespace

std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  DT_KERNEL_HOST_ONLY(sort, x, dim, descending);
  dim = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "dim");
  return first_k(x, x.dim() == 0 ? 1 : x.sizes()[dim], dim, descending);
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  DT_KERNEL_HOST_ONLY(topk, x, k, dim, largest);
  dim = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "dim");
  const int64_t n = x.dim() == 0 ? 1 : x.sizes()[dim];
  DT_CHECK(k >= 0 && k <= n, "topk: k = ", k, " is outside [0, ", n, "], the size of dim ", dim, " of ",
           shape_str(x.sizes()));
  return first_k(x, k, dim, largest);
}

}  // namespace dtensor::kernels

// Internal to //kernels/cpu: the generic strided loops every kernel family is built on.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels::detail {

// The type pointwise ops compute in: float for float32/bfloat16/float16, double for float64,
// int64 for the integer types and bool (results are cast back to the output dtype); complex throws.
inline DType compute_dtype(DType t) {
  // Complex would otherwise fall into the integer branch: ops taking complex use their own kernels.
  if (is_complex(t)) dispatch_unsupported("pointwise kernel (compute_dtype)", t, "real and bool dtypes");
  if (t == DType::kFloat64) return DType::kFloat64;
  return is_floating(t) ? DType::kFloat32 : DType::kInt64;
}

// Broadcast shape of a and b; throws naming `op` and both shapes.
inline Shape broadcast_op(const char* op, const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    // Align from the right; missing leading dims count as 1.
    int64_t da = i + a.size() >= n ? a[i + a.size() - n] : 1;
    int64_t db = i + b.size() >= n ? b[i + b.size() - n] : 1;
    DT_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
             " do not broadcast (dim ", i, " of the result: ", da, " vs ", db,
             "; accepted: equal sizes or 1)");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

template <typename T>
struct Tag {
  using type = T;
};

// f(Tag<T>{}) for T = the C++ type of a compute dtype (float, double or int64_t).
template <typename F>
decltype(auto) dispatch_compute(DType c, F&& f) {
  switch (c) {
    case DType::kFloat32:
      return f(Tag<float>{});
    case DType::kFloat64:
      return f(Tag<double>{});
    case DType::kInt64:
      return f(Tag<int64_t>{});
    default:
      DT_FAIL("internal: ", dtype_name(c), " is not a compute dtype");
  }
}

// Same, for the floating compute dtypes only.
template <typename F>
decltype(auto) dispatch_float(DType c, F&& f) {
  switch (c) {
    case DType::kFloat32:
      return f(Tag<float>{});
    case DType::kFloat64:
      return f(Tag<double>{});
    default:
      DT_FAIL("internal: ", dtype_name(c), " is not a floating compute dtype");
  }
}

// Visits every index of `sizes` in row-major order, calling f(offsets) where offsets[k] is the
// element offset of that index under strides[k].
template <size_t N, typename F>
void for_each_offset(const Shape& sizes, const std::array<const Shape*, N>& strides, F&& f) {
  const int nd = static_cast<int>(sizes.size());
  if (numel(sizes) == 0) return;
  std::array<int64_t, N> base{};
  if (nd == 0) {
    f(base);
    return;
  }
  const int64_t inner = sizes[nd - 1];
  std::array<int64_t, N> step;
  for (size_t k = 0; k < N; ++k) step[k] = (*strides[k])[nd - 1];
  Shape idx(nd, 0);
  for (int64_t o = numel(sizes) / inner; o > 0; --o) {
    std::array<int64_t, N> off = base;
    for (int64_t i = 0; i < inner; ++i) {
      f(off);
      for (size_t k = 0; k < N; ++k) off[k] += step[k];
    }
    for (int d = nd - 2; d >= 0; --d) {  // odometer over the outer dims
      for (size_t k = 0; k < N; ++k) base[k] += (*strides[k])[d];
      if (++idx[d] < sizes[d]) break;
      for (size_t k = 0; k < N; ++k) base[k] -= (*strides[k])[d] * sizes[d];
      idx[d] = 0;
    }
  }
}

// out[i] = f(in[0][i], ..., in[N-1][i]) over out's shape. The inputs are T tensors already
// broadcast (expanded) to out's shape, with any strides; out is a new contiguous R tensor.
template <typename R, typename T, size_t N, typename F>
void map(const Tensor& out, const std::array<Tensor, N>& in, F&& f) {
  std::array<const T*, N> p;
  std::array<const Shape*, N> st;
  for (size_t k = 0; k < N; ++k) {
    p[k] = in[k].template data<T>();
    st[k] = &in[k].strides();
  }
  R* o = out.data<R>();
  // Inputs laid out like out (the common case: no broadcast, no transpose) take one flat loop; the
  // odometer's per-element offset updates cost more than add/mul themselves. Same order, same values.
  bool flat = true;
  for (size_t k = 0; k < N; ++k) flat = flat && in[k].strides() == out.strides();
  if (flat) {
    const int64_t n = out.numel();
#pragma GCC ivdep
    for (int64_t i = 0; i < n; ++i)
      o[i] = [&]<size_t... K>(std::index_sequence<K...>) {
        return static_cast<R>(f(p[K][i]...));
      }(std::make_index_sequence<N>{});
    return;
  }
  for_each_offset<N>(out.sizes(), st, [&](const std::array<int64_t, N>& off) {
    *o++ = [&]<size_t... K>(std::index_sequence<K...>) {
      return static_cast<R>(f(p[K][off[K]]...));
    }
    (std::make_index_sequence<N>{});
  });
}

// x as a contiguous float64 tensor whose last dim holds the rows an op works on: `dim` is moved
// last. A 0-d tensor counts as one row of one element.
inline Tensor rows_f64(const Tensor& x, int64_t dim) {
  Tensor t = x.dim() == 0 ? x.reshape({1}) : x.movedim(dim, -1);
  return t.to(DType::kFloat64).contiguous();
}

// Undoes rows_f64 on a result of the same shape and casts it to `dtype`; returns a contiguous
// tensor.
inline Tensor unrows(const Tensor& r, const Tensor& like, int64_t dim, DType dtype) {
  Tensor t = like.dim() == 0 ? r.reshape({}) : r.movedim(-1, dim);
  return t.to(dtype).contiguous();
}

// The length-n rows of a tensor (row r: elements [r n, (r + 1) n) in row-major order) read as
// float64: a contiguous float32 tensor's rows are widened one at a time into a buffer (row()'s
// pointer is valid until the next call), anything else is converted to one float64 copy up front.
class RowReader {
 public:
  RowReader(const Tensor& rows, int64_t n) : n_(n) {
    if (rows.dtype() == DType::kFloat32 && rows.is_contiguous()) {
      keep_ = rows;
      f_ = rows.data<float>();
      buf_.resize(static_cast<size_t>(n));
    } else {
      keep_ = rows.to(DType::kFloat64).contiguous();
      d_ = keep_.data<double>();
    }
  }
  const double* row(int64_t r) {
    if (d_) return d_ + r * n_;
    std::copy(f_ + r * n_, f_ + (r + 1) * n_, buf_.begin());
    return buf_.data();
  }

 private:
  int64_t n_;
  Tensor keep_;
  const float* f_ = nullptr;
  const double* d_ = nullptr;
  std::vector<double> buf_;
};

// Calls f(in_row, out_row, n) for every row of the [.., n] float64 rows of x (see rows_f64) and
// returns the results in x's layout and the given dtype.
template <typename F>
Tensor map_rows(const Tensor& x, int64_t dim, DType dtype, F&& f) {
  if (x.dtype() == DType::kFloat32 && dtype == DType::kFloat32 && x.dim() > 0 &&
      (dim == -1 || dim == x.dim() - 1) && x.is_contiguous()) {
    // Contiguous float32 rows: each row is widened into a buffer and its result rounded once into
    // the output, without the two whole-tensor copies below (the same values).
    Tensor out = Tensor::empty(x.sizes(), DType::kFloat32);
    const int64_t n = x.size(-1);
    const int64_t rows = n == 0 ? 0 : x.numel() / n;
    RowReader in(x, n);
    std::vector<double> ob(static_cast<size_t>(n));
    float* op = out.data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      f(in.row(r), ob.data(), n);
      std::transform(ob.begin(), ob.end(), op + r * n, [](double v) { return static_cast<float>(v); });
    }
    return out;
  }
  Tensor in = rows_f64(x, dim);
  Tensor out = Tensor::empty(in.sizes(), DType::kFloat64);
  const int64_t n = in.dim() == 0 ? 1 : in.size(-1);
  const int64_t rows = n == 0 ? 0 : in.numel() / n;
  const double* ip = in.data<double>();
  double* op = out.data<double>();
  for (int64_t r = 0; r < rows; ++r) f(ip + r * n, op + r * n, n);
  return unrows(out, x, dim, dtype);
}

// Integer arithmetic that wraps modulo 2^64 instead of overflowing (torch's integer ops wrap).
inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrap_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
inline int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// Dims of a reduction: wrapped, deduplicated check, sorted membership mask. Empty = all dims.
inline std::vector<bool> reduction_mask(const char* op, const Shape& sizes,
                                        const std::vector<int64_t>& dims) {
  const int64_t nd = static_cast<int64_t>(sizes.size());
  std::vector<bool> mask(nd, dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, nd, op);
    if (nd == 0) continue;  // dim 0 / -1 of a 0-d tensor: nothing to reduce
    DT_CHECK(!mask[w], op, ": dim ", w, " appears more than once in the dims of a ",
             shape_str(sizes), " tensor (accepted: distinct dims)");
    mask[w] = true;
  }
  return mask;
}

}  // namespace dtensor::kernels::detail

#include "kernels/cpu/fft.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <string>

#include <unsupported/Eigen/FFT>

#include "absl/strings/str_join.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels {
namespace {

std::string dims_str(const std::vector<int64_t>& d) { return "[" + absl::StrJoin(d, ", ") + "]"; }

// `dim` normalized against x's rank; throws naming the op on a bad, repeated or empty-sized dim.
std::vector<int64_t> checked_dims(const char* op, const Tensor& x, const std::vector<int64_t>& dim,
                                  int64_t normalization) {
  const int64_t rank = static_cast<int64_t>(x.sizes().size());
  DT_CHECK(!dim.empty(), op, ": dim is empty for ", x.str(), "; accepted: at least one dim");
  DT_CHECK(normalization >= 0 && normalization <= 2, op, ": normalization ", normalization,
           " for ", x.str(), "; accepted: 0 (none), 1 (1/sqrt(n)), 2 (1/n)");
  std::vector<int64_t> out;
  for (int64_t d : dim) {
    DT_CHECK(d >= -rank && d < rank, op, ": dim ", dims_str(dim), " out of range for ", x.str(),
             "; accepted: dims in [", -rank, ", ", rank, ")");
    const int64_t nd = d < 0 ? d + rank : d;
    DT_CHECK(std::find(out.begin(), out.end(), nd) == out.end(), op, ": dim ", dims_str(dim),
             " repeats dim ", nd, " of ", x.str(), "; accepted: distinct dims");
    out.push_back(nd);
  }
  return out;
}

// In place on a contiguous complex buffer of shape `sizes`: the 1-D transform along `d`, unscaled.
template <typename R>
void transform_dim(std::complex<R>* data, const Shape& sizes, int64_t d, bool forward) {
  const int64_t n = sizes[d];
  if (n <= 1) return;  // the transform of one element is itself
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= sizes[i];
  for (size_t i = d + 1; i < sizes.size(); ++i) inner *= sizes[i];
  Eigen::FFT<R> fft;
  fft.SetFlag(Eigen::FFT<R>::Unscaled);
  std::vector<std::complex<R>> in(n), out(n);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      std::complex<R>* line = data + o * n * inner + i;
      for (int64_t k = 0; k < n; ++k) in[k] = line[k * inner];
      if (forward) {
        fft.fwd(out.data(), in.data(), n);
      } else {
        fft.inv(out.data(), in.data(), n);
      }
      for (int64_t k = 0; k < n; ++k) line[k * inner] = out[k];
    }
  }
}

// Multiplies every element by the normalization factor for signal size n.
template <typename R>
void normalize(std::complex<R>* data, int64_t numel, int64_t normalization, double n) {
  if (normalization == 0 || n == 0) return;
  const R f = static_cast<R>(normalization == 1 ? 1.0 / std::sqrt(n) : 1.0 / n);
  for (int64_t i = 0; i < numel; ++i) data[i] *= f;
}

// The c2c transform of a contiguous complex tensor t (modified in place) over dims `dims`.
void c2c_in_place(Tensor& t, const std::vector<int64_t>& dims, int64_t normalization, bool forward, double n) {
  DT_DISPATCH_COMPLEX(t.dtype(), {
    scalar_t* p = t.data<scalar_t>();
    for (int64_t d : dims) transform_dim(p, t.sizes(), d, forward);
    normalize(p, t.numel(), normalization, n);
  });
}

double signal_size(const Shape& sizes, const std::vector<int64_t>& dims) {
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(sizes[d]);
  return n;
}

}  // namespace

Tensor fft_c2c(const Tensor& x, const std::vector<int64_t>& dim, int64_t normalization, bool forward) {
  DT_KERNEL_HOST_ONLY(fft_c2c, x, dim, normalization, forward);
  DT_CHECK(is_complex(x.dtype()), "_fft_c2c: input ", x.str(), " is ", dtype_name(x.dtype()),
           "; accepted: complex64, complex128");
  const std::vector<int64_t> dims = checked_dims("_fft_c2c", x, dim, normalization);
  Tensor t = x.contiguous().clone();
  c2c_in_place(t, dims, normalization, forward, signal_size(x.sizes(), dims));
  return t;
}

Tensor fft_r2c(const Tensor& x, const std::vector<int64_t>& dim, int64_t normalization, bool onesided) {
  DT_KERNEL_HOST_ONLY(fft_r2c, x, dim, normalization, onesided);
  DT_CHECK(x.dtype() == DType::kFloat32 || x.dtype() == DType::kFloat64, "_fft_r2c: input ", x.str(), " is ",
           dtype_name(x.dtype()), "; accepted: float32, float64");
  const std::vector<int64_t> dims = checked_dims("_fft_r2c", x, dim, normalization);
  Tensor t = x.to(complex_of(x.dtype())).contiguous();  // a new tensor (the dtype changes)
  c2c_in_place(t, dims, normalization, /*forward=*/true, signal_size(x.sizes(), dims));
  if (!onesided) return t;
  const int64_t last = dims.back();
  return t.slice(last, 0, x.sizes()[last] / 2 + 1, 1).contiguous();
}

Tensor fft_c2r(const Tensor& x, const std::vector<int64_t>& dim, int64_t normalization, int64_t last_dim_size) {
  DT_KERNEL_HOST_ONLY(fft_c2r, x, dim, normalization, last_dim_size);
  DT_CHECK(is_complex(x.dtype()), "_fft_c2r: input ", x.str(), " is ", dtype_name(x.dtype()),
           "; accepted: complex64, complex128");
  const std::vector<int64_t> dims = checked_dims("_fft_c2r", x, dim, normalization);
  const int64_t last = dims.back();
  const int64_t n = last_dim_size, half = n / 2 + 1;
  DT_CHECK(n >= 1, "_fft_c2r: last_dim_size ", n, " for ", x.str(), "; accepted: >= 1");
  DT_CHECK(x.sizes()[last] >= half, "_fft_c2r: input ", x.str(), " has ", x.sizes()[last], " entries along dim ",
           last, "; last_dim_size ", n, " reads ", half, " (last_dim_size / 2 + 1)");
  // First the inverse over the other dims, on the half spectrum: each line along `last` is then the
  // half spectrum of one real signal. Then that line in full, X[k] for k <= n/2 from the input and
  // X[n-k] = conj(X[k]) above, whose inverse c2c has a real part equal to the c2r result (the
  // imaginary parts of X[0] and X[n/2] reach only the imaginary part of the output).
  Tensor h = x.slice(last, 0, half, 1).contiguous().clone();
  Shape full = x.sizes();
  full[last] = n;
  Tensor t = Tensor::zeros(full, x.dtype());
  DT_DISPATCH_COMPLEX(x.dtype(), {
    scalar_t* hp = h.data<scalar_t>();
    for (int64_t d : dims)
      if (d != last) transform_dim(hp, h.sizes(), d, /*forward=*/false);
    t.slice(last, 0, half, 1).copy_(h);
    scalar_t* p = t.data<scalar_t>();
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < last; ++i) outer *= full[i];
    for (size_t i = last + 1; i < full.size(); ++i) inner *= full[i];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = half; k < n; ++k)
        for (int64_t i = 0; i < inner; ++i)
          p[(o * n + k) * inner + i] = std::conj(p[(o * n + (n - k)) * inner + i]);
    transform_dim(p, full, last, /*forward=*/false);
    normalize(p, t.numel(), normalization, signal_size(full, dims));
  });
  Tensor out = Tensor::empty(full, real_of_complex(x.dtype()));
  out.copy_(t);  // complex to real keeps the real part (copy_strided)
  return out;
}

Tensor fft_r2c_backward(const Tensor& grad, const std::vector<int64_t>& dim, int64_t normalization, bool onesided,
                        int64_t last_dim_size) {
  DT_KERNEL_HOST_ONLY(fft_r2c_backward, grad, dim, normalization, onesided, last_dim_size);
  DT_CHECK(is_complex(grad.dtype()), "_fft_r2c_backward: grad ", grad.str(), " is ", dtype_name(grad.dtype()),
           "; accepted: complex64, complex128");
  const std::vector<int64_t> dims = checked_dims("_fft_r2c_backward", grad, dim, normalization);
  const int64_t last = dims.back();
  Shape full = grad.sizes();
  full[last] = last_dim_size;
  DT_CHECK(grad.sizes()[last] <= last_dim_size, "_fft_r2c_backward: grad ", grad.str(), " has more than ",
           last_dim_size, " (last_dim_size) entries along dim ", last);
  Tensor padded = Tensor::zeros(full, grad.dtype());
  padded.slice(last, 0, grad.sizes()[last], 1).copy_(grad);
  Tensor r = Tensor::empty(full, real_of_complex(grad.dtype()));
  r.copy_(fft_c2c(padded, dims, normalization, /*forward=*/false));  // complex to real keeps the real part
  return r;
}

Tensor fft_c2r_backward(const Tensor& grad, const std::vector<int64_t>& dim, int64_t normalization) {
  DT_KERNEL_HOST_ONLY(fft_c2r_backward, grad, dim, normalization);
  const std::vector<int64_t> dims = checked_dims("_fft_c2r_backward", grad, dim, normalization);
  Tensor r = fft_r2c(grad, dims, normalization, /*onesided=*/true);
  const int64_t last = dims.back(), n = grad.sizes()[last], half = r.sizes()[last];
  const int64_t doubled = n - half;
  DT_DISPATCH_COMPLEX(r.dtype(), {
    scalar_t* p = r.data<scalar_t>();  // contiguous (fft_r2c's result)
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < last; ++i) outer *= r.sizes()[i];
    for (size_t i = last + 1; i < r.sizes().size(); ++i) inner *= r.sizes()[i];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 1; k <= doubled; ++k)
        for (int64_t i = 0; i < inner; ++i) p[(o * half + k) * inner + i] *= typename scalar_t::value_type(2);
  });
  return r;
}

}  // namespace dtensor::kernels

#include "kernels/cpu/matrix.h"
#include "kernels/device_dispatch.h"

#include <cblas.h>

#include <climits>
#include <complex>

#include "kernels/cpu/loops.h"

namespace dtensor::kernels {
namespace {

std::string desc(const Tensor& t) {
  return absl::StrCat(dtype_name(t.dtype()), " ", shape_str(t.sizes()));
}

void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  DT_CHECK(a.dtype() == b.dtype() && is_floating(a.dtype()), op, ": operands ", desc(a), " and ",
           desc(b),
           " must share one floating dtype (accepted: float32, float64, bfloat16, float16)");
}

// mm and bmm also take complex (OpDef::complex): BLAS's cgemm/zgemm.
void check_operands_or_complex(const char* op, const Tensor& a, const Tensor& b) {
  if (a.dtype() == b.dtype() && is_complex(a.dtype())) return;
  DT_CHECK(a.dtype() == b.dtype() && is_floating(a.dtype()), op, ": operands ", desc(a), " and ",
           desc(b),
           " must share one floating or complex dtype (accepted: float32, float64, bfloat16, float16, "
           "complex64, complex128)");
}

// How a [rows, cols] matrix with strides (rs, cs) is passed to row-major BLAS without a copy.
struct Layout {
  CBLAS_TRANSPOSE trans;
  int64_t ld;
};
std::optional<Layout> blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= std::max<int64_t>(cols, 1)))
    return Layout{CblasNoTrans, rows == 1 ? std::max<int64_t>(cols, 1) : rs};
  if ((rows == 1 || rs == 1) && (cols == 1 || cs >= std::max<int64_t>(rows, 1)))
    return Layout{CblasTrans, cols == 1 ? std::max<int64_t>(rows, 1) : cs};
  return std::nullopt;
}

// x in dtype c with BLAS-compatible last two dims, copying only when needed.
Tensor blas_ready(const Tensor& x, DType c) {
  Tensor t = x.to(c);
  if (blas_layout(t.size(-2), t.size(-1), t.stride(-2), t.stride(-1))) return t;
  return t.contiguous();
}

void gemm(const float* a, Layout la, const float* b, Layout lb, float* c, int n, int m, int k,
          double alpha, double beta) {
  cblas_sgemm(CblasRowMajor, la.trans, lb.trans, n, m, k, static_cast<float>(alpha), a,
              static_cast<int>(la.ld), b, static_cast<int>(lb.ld), static_cast<float>(beta), c,
              std::max(m, 1));
}
void gemm(const double* a, Layout la, const double* b, Layout lb, double* c, int n, int m, int k,
          double alpha, double beta) {
  cblas_dgemm(CblasRowMajor, la.trans, lb.trans, n, m, k, alpha, a, static_cast<int>(la.ld), b,
              static_cast<int>(lb.ld), beta, c, std::max(m, 1));
}

// Complex (std::complex<T> is layout-compatible with T[2], BLAS's complex element).
void gemm(const std::complex<float>* a, Layout la, const std::complex<float>* b, Layout lb,
          std::complex<float>* c, int n, int m, int k, double alpha, double beta) {
  const std::complex<float> al(static_cast<float>(alpha)), be(static_cast<float>(beta));
  cblas_cgemm(CblasRowMajor, la.trans, lb.trans, n, m, k, &al, a, static_cast<int>(la.ld), b,
              static_cast<int>(lb.ld), &be, c, std::max(m, 1));
}
void gemm(const std::complex<double>* a, Layout la, const std::complex<double>* b, Layout lb,
          std::complex<double>* c, int n, int m, int k, double alpha, double beta) {
  const std::complex<double> al(alpha), be(beta);
  cblas_zgemm(CblasRowMajor, la.trans, lb.trans, n, m, k, &al, a, static_cast<int>(la.ld), b,
              static_cast<int>(lb.ld), &be, c, std::max(m, 1));
}

// dispatch_float, and complex64 / complex128 as std::complex.
template <typename F>
void dispatch_gemm(DType c, F&& f) {
  if (c == DType::kComplex64) return f(detail::Tag<std::complex<float>>{});
  if (c == DType::kComplex128) return f(detail::Tag<std::complex<double>>{});
  detail::dispatch_float(c, f);
}

// out[*batch, n, m] = alpha * a @ b + beta * out, where a [*ba, n, k] and b [*bb, k, m] broadcast
// over `batch` and out is contiguous [*batch, n, m] in the compute dtype. Returns out in `dtype`.
Tensor gemm_batched(const char* op, const Tensor& a0, const Tensor& b0, const Shape& batch,
                    Tensor out, double alpha, double beta, DType dtype) {
  const DType c = out.dtype();
  const int64_t n = a0.size(-2), k = a0.size(-1), m = b0.size(-1);
  for (int64_t v : {n, m, k, a0.stride(-2), a0.stride(-1), b0.stride(-2), b0.stride(-1)})
    DT_CHECK(v < INT_MAX, op, ": ", desc(a0), " @ ", desc(b0), " exceeds BLAS's 32-bit sizes");
  if (out.numel() == 0) return out.to(dtype);
  if (k == 0) {  // an empty sum: out = beta * out
    dispatch_gemm(c, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = out.data<T>();
      for (int64_t i = 0; i < out.numel(); ++i)
        p[i] = beta == 0 ? T(0) : static_cast<T>(beta) * p[i];
    });
    return out.to(dtype);
  }
  Tensor a = blas_ready(a0, c), b = blas_ready(b0, c);
  Shape a_shape = batch, b_shape = batch;
  a_shape.insert(a_shape.end(), {n, k});
  b_shape.insert(b_shape.end(), {k, m});
  a = a.expand(a_shape);
  b = b.expand(b_shape);
  const Layout la = *blas_layout(n, k, a.stride(-2), a.stride(-1));
  const Layout lb = *blas_layout(k, m, b.stride(-2), b.stride(-1));
  Shape a_bst(a.strides().begin(), a.strides().end() - 2);
  Shape b_bst(b.strides().begin(), b.strides().end() - 2);
  dispatch_gemm(c, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    T* op = out.data<T>();
    detail::for_each_offset<2>(batch, {&a_bst, &b_bst}, [&](const std::array<int64_t, 2>& off) {
      gemm(ap + off[0], la, bp + off[1], lb, op, static_cast<int>(n), static_cast<int>(m),
           static_cast<int>(k), alpha, beta);
      op += n * m;
    });
  });
  return out.to(dtype);
}

// Batched product with no accumulation into an existing tensor.
Tensor product(const char* op, const Tensor& a, const Tensor& b, const Shape& batch) {
  Shape out_shape = batch;
  out_shape.insert(out_shape.end(), {a.size(-2), b.size(-1)});
  DType c = is_complex(a.dtype()) ? a.dtype() : detail::compute_dtype(a.dtype());
  return gemm_batched(op, a, b, batch, Tensor::empty(out_shape, c), 1, 0, a.dtype());
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  if (is_complex(a.dtype()))
    DT_KERNEL_HOST_ONLY(mm, a, b);  // the device kernels are real
  else
    DT_KERNEL_ON_DEVICE(mm, a, b);
  check_operands_or_complex("mm", a, b);
  DT_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "mm: cannot multiply ",
           shape_str(a.sizes()), " by ", shape_str(b.sizes()), " (accepted: [n, k] @ [k, m])");
  return product("mm", a, b, {});
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (is_complex(a.dtype()))
    DT_KERNEL_HOST_ONLY(bmm, a, b);  // the device kernels are real
  else
    DT_KERNEL_ON_DEVICE(bmm, a, b);
  check_operands_or_complex("bmm", a, b);
  DT_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) && a.size(2) == b.size(1),
           "bmm: cannot multiply ", shape_str(a.sizes()), " by ", shape_str(b.sizes()),
           " (accepted: [B, n, k] @ [B, k, m])");
  return product("bmm", a, b, {a.size(0)});
}

Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, double beta, double alpha) {
  DT_KERNEL_ON_DEVICE(addmm, self, a, b, beta, alpha);
  check_operands("addmm", a, b);
  check_operands("addmm", self, a);
  DT_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "addmm: cannot multiply ",
           shape_str(a.sizes()), " by ", shape_str(b.sizes()), " (accepted: [n, k] @ [k, m])");
  const Shape nm{a.size(0), b.size(1)};
  DT_CHECK(detail::broadcast_op("addmm", self.sizes(), nm) == nm, "addmm: self ",
           shape_str(self.sizes()), " does not broadcast to the product's shape ", shape_str(nm));
  const DType c = detail::compute_dtype(a.dtype());
  Tensor out = beta == 0 ? Tensor::zeros(nm, c) : Tensor::empty(nm, c).copy_(self.expand(nm));
  return gemm_batched("addmm", a, b, {}, out, alpha, beta, a.dtype());
}

Tensor linear(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias) {
  DT_KERNEL_ON_DEVICE(linear, x, w, bias);
  check_operands("linear", x, w);
  DT_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1), "linear: input ",
           shape_str(x.sizes()), " and weight ", shape_str(w.sizes()),
           " do not match (accepted: input [..., in], weight [out, in])");
  const int64_t in = w.size(1), out_f = w.size(0);
  Shape lead(x.sizes().begin(), x.sizes().end() - 1);
  Tensor x2 = x.reshape({numel(lead), in});
  Tensor y;
  if (bias.has_value()) {
    check_operands("linear", *bias, w);
    DT_CHECK(bias->dim() == 1 && bias->size(0) == out_f, "linear: bias ", shape_str(bias->sizes()),
             " does not match weight ", shape_str(w.sizes()), " (accepted: [", out_f, "])");
    y = addmm(*bias, x2, w.transpose(0, 1));
  } else {
    y = mm(x2, w.transpose(0, 1));
  }
  lead.push_back(out_f);
  return y.view(lead);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  DT_KERNEL_ON_DEVICE(matmul, a, b);
  check_operands("matmul", a, b);
  DT_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dim, got ",
           shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  DT_CHECK(a2.size(-1) == b2.size(-2), "matmul: ", shape_str(a.sizes()), " and ",
           shape_str(b.sizes()), " cannot be multiplied (", a2.size(-1), " != ", b2.size(-2),
           "; accepted: a[..., n, k] @ b[..., k, m], 1-d operands as [1, k] / [k, 1])");
  Shape ba(a2.sizes().begin(), a2.sizes().end() - 2);
  Shape bb(b2.sizes().begin(), b2.sizes().end() - 2);
  Tensor out = product("matmul", a2, b2, detail::broadcast_op("matmul batch dims", ba, bb));
  if (a.dim() == 1) out = out.squeeze(-2);  // the n = 1 dim
  if (b.dim() == 1) out = out.squeeze(-1);  // the m = 1 dim
  return out;
}

}  // namespace dtensor::kernels

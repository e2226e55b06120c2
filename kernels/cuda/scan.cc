// Scans along a dim (host side; kernels in scan_kernels.cu). The scanned dim is moved last and
// the rows converted to the compute type (float for float32/16-bit floats, double, int64), scanned,
// and moved back.
#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using namespace detail;  // NOLINT
using ::dtensor::cuda::DeviceGuard;

namespace {

struct Scanned {
  Tensor values;   // out_dtype, x's shape
  Tensor indices;  // int64 (cummax / cummin)
};

Scanned scan(const char* op, ScanKind kind, const Tensor& x, int64_t dim, DType out_dtype) {
  check_cuda(op, x);
  dim = wrap_dim(dim, x.dim(), op);
  DeviceGuard guard(x.device().index);
  const Compute c = compute_of(out_dtype);
  const Tensor moved = x.dim() == 0 ? x.view({1}) : x.movedim(dim, -1);
  const Tensor rows = contiguous(to(moved, dtype_of(c)));
  const int64_t n = rows.size(-1), count = rows.numel();
  const int64_t nrows = n == 0 ? 0 : count / n;
  const bool pairs = kind == ScanKind::kMax || kind == ScanKind::kMin;
  Tensor out = Tensor::empty(rows.sizes(), dtype_of(c), x.device());
  Tensor idx = pairs ? Tensor::empty(rows.sizes(), DType::kInt64, x.device()) : Tensor();
  if (count > 0) {
    const size_t bytes = scan_workspace_bytes(kind, c, nrows, n);
    Tensor ws = workspace(bytes, x.device());
    launch_scan(kind, c, rows.data_ptr(), out.data_ptr(),
                pairs ? static_cast<int64_t*>(idx.data_ptr()) : nullptr, nrows, n, ws.data_ptr(),
                bytes, stream_of(x));
    check_launch(op);
  }
  auto back = [&](const Tensor& t, DType dtype) {
    Tensor r = x.dim() == 0 ? t.view({}) : t.movedim(-1, dim);
    return contiguous(to(r, dtype));
  };
  Scanned s;
  s.values = back(out, out_dtype);
  if (pairs) s.indices = back(idx, DType::kInt64);
  return s;
}

void check_floating_scan(const char* op, const Tensor& x) { check_floating(op, x, "input"); }

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) {
  check_cuda("cumsum", x);
  return scan("cumsum", ScanKind::kSum, x, dim, is_floating(x.dtype()) ? x.dtype() : DType::kInt64)
      .values;
}

Tensor cumprod(const Tensor& x, int64_t dim) {
  check_cuda("cumprod", x);
  return scan("cumprod", ScanKind::kProd, x, dim,
              is_floating(x.dtype()) ? x.dtype() : DType::kInt64)
      .values;
}

Tensor logcumsumexp(const Tensor& x, int64_t dim) {
  check_cuda("logcumsumexp", x);
  check_floating_scan("logcumsumexp", x);
  return scan("logcumsumexp", ScanKind::kLogSumExp, x, dim, x.dtype()).values;
}

std::pair<Tensor, Tensor> cummax(const Tensor& x, int64_t dim) {
  Scanned s = scan("cummax", ScanKind::kMax, x, dim, x.dtype());
  return {s.values, s.indices};
}

std::pair<Tensor, Tensor> cummin(const Tensor& x, int64_t dim) {
  Scanned s = scan("cummin", ScanKind::kMin, x, dim, x.dtype());
  return {s.values, s.indices};
}

}  // namespace dtensor::kernels::cuda

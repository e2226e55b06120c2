// Matrix products through cuBLASLt (host code). Row-major operands are described to cuBLAS's
// column-major convention as transposes: C = A @ B is computed as C^T = B^T @ A^T, and an operand
// whose rows or columns are contiguous is passed as it is, with the matching transpose flag;
// others are copied to contiguous first (as the CPU kernels do for BLAS).
#include <atomic>
#include <map>

#include "kernels/cuda/common.h"
#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using namespace detail;  // NOLINT
using ::dtensor::cuda::DeviceGuard;

namespace {

std::atomic<bool> g_allow_tf32{false};
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

#define DT_CUBLAS_CHECK(expr, ...)                                                               \
  do {                                                                                           \
    cublasStatus_t dt_st_ = (expr);                                                              \
    if (dt_st_ != CUBLAS_STATUS_SUCCESS)                                                         \
      DT_FAIL(__VA_ARGS__, ": ", #expr, " failed: ", cublaslt().cublasLtGetStatusString(dt_st_), \
              " (", cublaslt().cublasLtGetStatusName(dt_st_), ")");                              \
  } while (0)

cublasLtHandle_t lt_handle(int device) {
  thread_local std::map<int, cublasLtHandle_t> handles;
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasLtHandle_t h;
  DT_CUBLAS_CHECK(cublaslt().cublasLtCreate(&h), "cuBLASLt handle for cuda:", device);
  handles[device] = h;
  return h;
}

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::kFloat64:
      return CUDA_R_64F;
    case DType::kBFloat16:
      return CUDA_R_16BF;
    case DType::kFloat16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

// A row-major [r, c] matrix (or a batch of them) as cuBLAS sees it: the stored column-major
// matrix X with op(X) = M^T.
struct ColMajor {
  const void* ptr = nullptr;
  cublasOperation_t op = CUBLAS_OP_N;
  uint64_t rows = 0, cols = 0;  // of X
  int64_t ld = 1;
  int64_t batch_stride = 0;
};

// M = the last two dims of t. False when neither its rows nor its columns are contiguous.
bool describe(const Tensor& t, ColMajor* out) {
  const int64_t r = t.size(-2), c = t.size(-1);
  int64_t s0 = t.stride(-2), s1 = t.stride(-1);
  if (r == 1) s0 = s1 == 1 ? std::max<int64_t>(c, 1) : 1;
  if (c == 1) s1 = 1;
  out->ptr = t.data_ptr();
  out->batch_stride = t.dim() == 3 ? t.stride(0) : 0;
  if (s1 == 1 && s0 >= std::max<int64_t>(c, 1)) {  // rows contiguous: X = M^T, [c, r]
    out->op = CUBLAS_OP_N;
    out->rows = c, out->cols = r, out->ld = s0;
    return true;
  }
  if (s0 == 1 && s1 >= std::max<int64_t>(r, 1)) {  // columns contiguous: X = M, [r, c]
    out->op = CUBLAS_OP_T;
    out->rows = r, out->cols = c, out->ld = s1;
    return true;
  }
  return false;
}

struct LtLayout {
  cublasLtMatrixLayout_t l = nullptr;
  LtLayout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld, int64_t batch,
           int64_t stride) {
    const CublasLt& lt = cublaslt();
    DT_CUBLAS_CHECK(lt.cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld), "matmul layout");
    if (batch > 1) {
      int32_t b = static_cast<int32_t>(batch);
      DT_CUBLAS_CHECK(
          lt.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof(b)),
          "matmul layout");
      DT_CUBLAS_CHECK(lt.cublasLtMatrixLayoutSetAttribute(
                          l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
                      "matmul layout");
    }
  }
  ~LtLayout() {
    if (l) cublaslt().cublasLtMatrixLayoutDestroy(l);
  }
};

// out[batch, n, m] (contiguous) = alpha * a[batch, n, k] @ b[batch, k, m] + beta * out, with a
// and b 2-d (batch 1) or 3-d views. out holds C when beta != 0.
void gemm(const char* op, const Tensor& a_in, const Tensor& b_in, Tensor& out, int64_t batch,
          double alpha, double beta) {
  const int64_t n = a_in.size(-2), k = a_in.size(-1), m = b_in.size(-1);
  const DType dtype = a_in.dtype();
  DeviceGuard guard(out.device().index);
  ColMajor A, B;
  Tensor a = a_in, b = b_in;
  if (!describe(a, &A)) a = contiguous(a), describe(a, &A);
  if (!describe(b, &B)) b = contiguous(b), describe(b, &B);
  for (int64_t v : {n, k, m, batch})
    DT_CHECK(v < INT32_MAX, op, ": ", shape_str(a_in.sizes()), " @ ", shape_str(b_in.sizes()),
             " exceeds cuBLAS's 32-bit sizes");

  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale_type = CUDA_R_32F;
  if (dtype == DType::kFloat64) {
    compute = CUBLAS_COMPUTE_64F;
    scale_type = CUDA_R_64F;
  } else if (dtype == DType::kFloat32 && g_allow_tf32.load()) {
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  const CublasLt& lt = cublaslt();
  cublasLtMatmulDesc_t desc;
  DT_CUBLAS_CHECK(lt.cublasLtMatmulDescCreate(&desc, compute, scale_type), op);
  struct DescGuard {
    cublasLtMatmulDesc_t d;
    ~DescGuard() { cublaslt().cublasLtMatmulDescDestroy(d); }
  } desc_guard{desc};
  // cuBLAS's first operand is B^T (stored as B's X), its second A^T.
  DT_CUBLAS_CHECK(
      lt.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &B.op, sizeof(B.op)),
      op);
  DT_CUBLAS_CHECK(
      lt.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &A.op, sizeof(A.op)),
      op);
  const cudaDataType_t type = data_type(dtype);
  LtLayout lb(type, B.rows, B.cols, B.ld, batch, B.batch_stride);
  LtLayout la(type, A.rows, A.cols, A.ld, batch, A.batch_stride);
  LtLayout lc(type, m, n, m, batch, n * m);

  cublasLtHandle_t h = lt_handle(out.device().index);
  cublasLtMatmulPreference_t pref;
  DT_CUBLAS_CHECK(lt.cublasLtMatmulPreferenceCreate(&pref), op);
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublaslt().cublasLtMatmulPreferenceDestroy(p); }
  } pref_guard{pref};
  size_t ws_bytes = kWorkspaceBytes;
  DT_CUBLAS_CHECK(lt.cublasLtMatmulPreferenceSetAttribute(
                      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)),
                  op);
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  DT_CUBLAS_CHECK(
      lt.cublasLtMatmulAlgoGetHeuristic(h, desc, lb.l, la.l, lc.l, lc.l, pref, 1, &heur, &found),
      op);
  DT_CHECK(found > 0, op, ": cuBLASLt has no algorithm for ", dtype_name(dtype), " ",
           shape_str(a_in.sizes()), " @ ", shape_str(b_in.sizes()));
  Tensor ws = workspace(std::max<size_t>(heur.workspaceSize, 1), out.device());
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const void* alpha_p = scale_type == CUDA_R_64F ? static_cast<const void*>(&alpha)
                                                 : static_cast<const void*>(&alpha_f);
  const void* beta_p = scale_type == CUDA_R_64F ? static_cast<const void*>(&beta)
                                                : static_cast<const void*>(&beta_f);
  DT_CUBLAS_CHECK(lt.cublasLtMatmul(h, desc, alpha_p, B.ptr, lb.l, A.ptr, la.l, beta_p,
                                    out.data_ptr(), lc.l, out.data_ptr(), lc.l, &heur.algo,
                                    ws.data_ptr(), heur.workspaceSize, stream_of(out)),
                  op, " (", dtype_name(dtype), " ", shape_str(a_in.sizes()), " @ ",
                  shape_str(b_in.sizes()), ")");
}

void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  check_cuda(op, a, "self");
  check_same_device(op, a, b, "other");
  auto desc = [](const Tensor& t) {
    return absl::StrCat(dtype_name(t.dtype()), " ", shape_str(t.sizes()));
  };
  DT_CHECK(a.dtype() == b.dtype() && is_floating(a.dtype()), op, ": operands ", desc(a), " and ",
           desc(b),
           " must share one floating dtype (accepted: float32, float64, bfloat16, float16)");
}

// a[*batch, n, k] @ b[*batch, k, m] with the batch dims broadcast to `batch`.
Tensor product(const char* op, const Tensor& a, const Tensor& b, const Shape& batch) {
  check_operands(op, a, b);
  const int64_t n = a.size(-2), k = a.size(-1), m = b.size(-1);
  Shape out_shape = batch;
  out_shape.push_back(n);
  out_shape.push_back(m);
  DeviceGuard guard(a.device().index);
  if (numel(out_shape) == 0) return Tensor::empty(out_shape, a.dtype(), a.device());
  if (k == 0) return zeros(out_shape, a.dtype(), a.device());
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  const int64_t nb = numel(batch);
  if (batch.empty()) {
    gemm(op, a, b, out, 1, 1, 0);
    return out;
  }
  auto flat = [&](const Tensor& t, int64_t r, int64_t c) {
    Shape s = batch;
    s.push_back(r);
    s.push_back(c);
    return reshape(t.expand(s), {nb, r, c});
  };
  Tensor out3 = out.view({nb, n, m});
  gemm(op, flat(a, n, k), flat(b, k, m), out3, nb, 1, 0);
  return out;
}

}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }

Tensor mm(const Tensor& a, const Tensor& b) {
  DT_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "mm: cannot multiply ",
           shape_str(a.sizes()), " by ", shape_str(b.sizes()), " (accepted: [n, k] @ [k, m])");
  return product("mm", a, b, {});
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  DT_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) && a.size(2) == b.size(1),
           "bmm: cannot multiply ", shape_str(a.sizes()), " by ", shape_str(b.sizes()),
           " (accepted: [B, n, k] @ [B, k, m])");
  return product("bmm", a, b, {a.size(0)});
}

Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, double beta, double alpha) {
  check_operands("addmm", a, b);
  check_same_device("addmm", a, self, "self");
  DT_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "addmm: cannot multiply ",
           shape_str(a.sizes()), " by ", shape_str(b.sizes()), " (accepted: [n, k] @ [k, m])");
  const Shape nm{a.size(0), b.size(1)};
  DT_CHECK(broadcast_shapes(self.sizes(), nm) == nm, "addmm: self ", shape_str(self.sizes()),
           " does not broadcast to the product's shape ", shape_str(nm));
  DeviceGuard guard(a.device().index);
  Tensor out = beta == 0 ? zeros(nm, a.dtype(), a.device()) : empty(nm, a.dtype(), a.device());
  if (beta != 0) copy_(out, self.expand(nm));
  if (out.numel() == 0) return out;
  if (a.size(1) == 0) {  // an empty product: beta * self
    return beta == 1 ? out : kernels::cuda::mul(out, Scalar(beta));
  }
  gemm("addmm", a, b, out, 1, alpha, beta);
  return out;
}

Tensor linear(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias) {
  check_operands("linear", x, w);
  DT_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1), "linear: input ",
           shape_str(x.sizes()), " and weight ", shape_str(w.sizes()),
           " do not match (accepted: input [..., in], weight [out, in])");
  const int64_t in = w.size(1), out_f = w.size(0);
  Tensor x2 = reshape(x, {x.numel() / std::max<int64_t>(in, 1), in});
  if (in == 0) x2 = x.view({numel(Shape(x.sizes().begin(), x.sizes().end() - 1)), 0});
  Tensor y;
  if (bias.has_value()) {
    DT_CHECK(bias->dim() == 1 && bias->size(0) == out_f, "linear: bias ", shape_str(bias->sizes()),
             " does not match weight ", shape_str(w.sizes()), " (accepted: [", out_f, "])");
    y = addmm(*bias, x2, w.transpose(0, 1), 1, 1);
  } else {
    y = mm(x2, w.transpose(0, 1));
  }
  Shape s(x.sizes().begin(), x.sizes().end() - 1);
  s.push_back(out_f);
  return y.view(s);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  DT_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dim, got ",
           shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  DT_CHECK(a2.size(-1) == b2.size(-2), "matmul: ", shape_str(a.sizes()), " and ",
           shape_str(b.sizes()), " cannot be multiplied (", a2.size(-1), " != ", b2.size(-2),
           "; accepted: a[..., n, k] @ b[..., k, m], 1-d operands as [1, k] / [k, 1])");
  Shape ba(a2.sizes().begin(), a2.sizes().end() - 2);
  Shape bb(b2.sizes().begin(), b2.sizes().end() - 2);
  Tensor out = product("matmul", a2, b2, broadcast_shapes(ba, bb));
  if (a.dim() == 1) out = out.squeeze(-2);
  if (b.dim() == 1) out = out.squeeze(-1);
  return out;
}

}  // namespace dtensor::kernels::cuda

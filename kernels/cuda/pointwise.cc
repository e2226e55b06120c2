// Device tensor helpers and the pointwise ops (host side; kernels in pointwise_kernels.cu).
#include <cstring>

#include "dtensor/core/cuda/cuda_storage.h"
#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using namespace detail;  // NOLINT: the launchers and helpers of this library
using ::dtensor::cuda::DeviceGuard;

namespace {

bool int_like(DType t) { return !is_floating(t); }

std::string dtypes_str(const Tensor& a, const Tensor& b) {
  return absl::StrCat(dtype_name(a.dtype()), " ", shape_str(a.sizes()), " and ",
                      dtype_name(b.dtype()), " ", shape_str(b.sizes()));
}

// out = op(in) elementwise over out's shape (in broadcast to it).
void unary_into(const char* op_name, UnaryOp op, Compute c, const Tensor& out, const Tensor& in) {
  DeviceGuard guard(out.device().index);
  LoopShape l = loop_shape(op_name, out.sizes(), {&out, &in});
  Operand o = operand(out, out.sizes());
  launch_unary(op, c, l, o, operand(in, out.sizes()), stream_of(out));
  check_launch(op_name);
}

// A binary op: b is a tensor, or a scalar when b_tensor is null.
Tensor binary(const char* op_name, BinaryOp op, const Tensor& a, const Tensor* b_tensor,
              const Scalar* b_scalar, DType compute_dtype_of, DType out_dtype, double alpha_d = 1,
              int64_t alpha_i = 1) {
  check_cuda(op_name, a, "self");
  if (b_tensor != nullptr) check_same_device(op_name, a, *b_tensor, "other");
  const Shape shape = b_tensor ? broadcast_op(op_name, a.sizes(), b_tensor->sizes()) : a.sizes();
  const Compute c = compute_of(compute_dtype_of);
  DeviceGuard guard(a.device().index);
  Tensor out = Tensor::empty(shape, out_dtype, a.device());
  std::vector<const Tensor*> ts{&out, &a};
  if (b_tensor) ts.push_back(b_tensor);
  LoopShape l = loop_shape(op_name, shape, ts);
  Operand b = b_tensor
                  ? operand(*b_tensor, shape)
                  : scalar_operand(b_scalar->to_double(), b_scalar->to_int(), b_scalar->dtype());
  const bool int_div = c == Compute::kInt64 && (op == BinaryOp::kDiv || op == BinaryOp::kDivTrunc ||
                                                op == BinaryOp::kDivFloor);
  Tensor flag;
  if (int_div) flag = zeros({2}, DType::kInt64, a.device());
  launch_binary(op, c, l, operand(out, shape), operand(a, shape), b, alpha_d, alpha_i,
                int_div ? static_cast<int*>(flag.data_ptr()) : nullptr, stream_of(a));
  check_launch(op_name);
  if (int_div) {
    DT_CHECK(read_error_record(flag).first == 0, "div: integer division by zero (",
             dtype_name(a.dtype()), " ", shape_str(a.sizes()), " and ",
             b_tensor
                 ? absl::StrCat(dtype_name(b_tensor->dtype()), " ", shape_str(b_tensor->sizes()))
                 : std::string("a scalar"),
             ")");
  }
  return out;
}

Tensor add_impl(const char* op, const Tensor& a, const Tensor* bt, const Scalar* bs, DType common,
                const Scalar& alpha, bool subtract) {
  const std::string what =
      bt ? dtypes_str(a, *bt)
         : absl::StrCat(dtype_name(a.dtype()), " ", shape_str(a.sizes()), " and a scalar");
  DT_CHECK(!(subtract && common == DType::kBool), op,
           ": subtracting bool tensors is not supported (", what, "; accepted: numeric dtypes)");
  DT_CHECK(is_floating(common) || !alpha.is_floating(), op, ": alpha ", alpha.to_double(),
           " must be an integer for a ", dtype_name(common), " result (", what, ")");
  return binary(op, subtract ? BinaryOp::kSub : BinaryOp::kAdd, a, bt, bs, common, common,
                alpha.to_double(), alpha.is_floating() ? 0 : alpha.to_int());
}

Tensor div_impl(const Tensor& a, const Tensor* bt, const Scalar* bs, DType common,
                const std::string& mode) {
  if (mode.empty()) {
    DType out = is_floating(common) ? common : DType::kFloat32;
    return binary("div", BinaryOp::kDiv, a, bt, bs, out, out);
  }
  DT_CHECK(mode == "trunc" || mode == "floor", "div: unknown rounding_mode '", mode,
           "' (accepted: \"\" for true division, \"trunc\", \"floor\")");
  DT_CHECK(common != DType::kBool, "div: rounding_mode '", mode, "' is not supported for bool");
  return binary("div", mode == "floor" ? BinaryOp::kDivFloor : BinaryOp::kDivTrunc, a, bt, bs,
                common, common);
}

Tensor unary(const char* op_name, UnaryOp op, const Tensor& x, DType out_dtype) {
  check_cuda(op_name, x);
  DeviceGuard guard(x.device().index);
  Tensor out = Tensor::empty(x.sizes(), out_dtype, x.device());
  unary_into(op_name, op, compute_of(out_dtype), out, x);
  return out;
}

// exp, log, ...: integer and bool inputs give float32 (like torch); gelu/silu need floats.
Tensor unary_float(const char* op_name, UnaryOp op, const Tensor& x, bool ints_ok) {
  DT_CHECK(ints_ok || is_floating(x.dtype()), op_name, ": expected a floating tensor, got ",
           dtype_name(x.dtype()), " ", shape_str(x.sizes()),
           " (accepted: float32, float64, bfloat16, float16)");
  return unary(op_name, op, x, is_floating(x.dtype()) ? x.dtype() : DType::kFloat32);
}

Tensor unary_keep(const char* op_name, UnaryOp op, const Tensor& x, const char* what) {
  DT_CHECK(x.dtype() != DType::kBool, op_name, ": ", what, " bool tensor ", shape_str(x.sizes()),
           " is not supported (accepted: numeric dtypes)");
  return unary(op_name, op, x, x.dtype());
}

// A scalar as a launcher operand, converted like Scalar::to_tensor().to(dtype) on the CPU.
Operand scalar_as(const Scalar& v, DType dtype) {
  const Tensor t = v.to_tensor().to(dtype);
  return scalar_operand(t.item(), t.to(DType::kInt64).to_vector<int64_t>()[0], dtype);
}

// cond ? a : b over `shape` in the compute type of `common`; a / b are tensors or scalars (null
// tensor pointer).
Tensor where_impl(const char* op, const Tensor& cond, const Shape& shape, DType common,
                  const Tensor* a, const Operand& a_scalar, const Tensor* b,
                  const Operand& b_scalar) {
  DeviceGuard guard(cond.device().index);
  Tensor out = Tensor::empty(shape, common, cond.device());
  std::vector<const Tensor*> ts{&out, &cond};
  if (a) ts.push_back(a);
  if (b) ts.push_back(b);
  LoopShape l = loop_shape(op, shape, ts);
  launch_where(compute_of(common), l, operand(out, shape), operand(cond, shape),
               a ? operand(*a, shape) : a_scalar, b ? operand(*b, shape) : b_scalar,
               stream_of(cond));
  check_launch(op);
  return out;
}

}  // namespace

// ---- Device tensors.

Tensor empty(const Shape& sizes, DType dtype, Device device) {
  ::dtensor::cuda::check_device(device, "kernels::cuda::empty");
  ::dtensor::cuda::register_storage_allocator();
  DeviceGuard guard(device.index);
  return Tensor::empty(sizes, dtype, device);
}

Tensor zeros(const Shape& sizes, DType dtype, Device device) {
  Tensor t = empty(sizes, dtype, device);
  if (t.nbytes() > 0) {
    DeviceGuard guard(device.index);
    DT_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), stream_of(t)), "zeros");
  }
  return t;
}

Tensor full(const Shape& sizes, double value, DType dtype, Device device) {
  Tensor t = empty(sizes, dtype, device);
  const Compute c = int_like(dtype) ? Compute::kInt64 : Compute::kDouble;
  DeviceGuard guard(device.index);
  LoopShape l = loop_shape("full", sizes, {&t});
  launch_unary(UnaryOp::kCopy, c, l, operand(t, sizes),
               scalar_operand(value, static_cast<int64_t>(value), DType::kFloat64), stream_of(t));
  check_launch("full");
  return t;
}

Tensor& copy_(Tensor& dst, const Tensor& src) {
  check_cuda("copy_", dst, "destination");
  check_same_device("copy_", dst, src, "source");
  DT_CHECK(dst.sizes() == src.sizes(), "copy_: destination ", shape_str(dst.sizes()),
           " and source ", shape_str(src.sizes()), " differ in shape");
  const Compute c =
      int_like(dst.dtype()) && int_like(src.dtype()) ? Compute::kInt64 : Compute::kDouble;
  unary_into("copy_", UnaryOp::kCopy, c, dst, src);
  return dst;
}

Tensor contiguous(const Tensor& x) {
  check_cuda("contiguous", x);
  if (x.is_contiguous()) return x;
  return clone(x);
}

Tensor clone(const Tensor& x) {
  check_cuda("clone", x);
  Tensor out = empty(x.sizes(), x.dtype(), x.device());
  return copy_(out, x);
}

Tensor to(const Tensor& x, DType dtype) {
  check_cuda("to", x);
  if (x.dtype() == dtype) return x;
  Tensor out = empty(x.sizes(), dtype, x.device());
  return copy_(out, x);
}

Tensor reshape(const Tensor& x, const Shape& sizes) {
  check_cuda("reshape", x);
  try {
    return x.view(sizes);
  } catch (const Error&) {
    return contiguous(x).view(sizes);
  }
}

// ---- Pointwise.

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  return add_impl("add", a, &b, nullptr, result_type(a, b), alpha, false);
}
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha) {
  return add_impl("add", a, nullptr, &b, result_type(a, b), alpha, false);
}
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  return add_impl("sub", a, &b, nullptr, result_type(a, b), alpha, true);
}
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha) {
  return add_impl("sub", a, nullptr, &b, result_type(a, b), alpha, true);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  DType c = result_type(a, b);
  return binary("mul", BinaryOp::kMul, a, &b, nullptr, c, c);
}
Tensor mul(const Tensor& a, const Scalar& b) {
  DType c = result_type(a, b);
  return binary("mul", BinaryOp::kMul, a, nullptr, &b, c, c);
}
Tensor div(const Tensor& a, const Tensor& b, const std::string& rounding_mode) {
  return div_impl(a, &b, nullptr, result_type(a, b), rounding_mode);
}
Tensor div(const Tensor& a, const Scalar& b, const std::string& rounding_mode) {
  return div_impl(a, nullptr, &b, result_type(a, b), rounding_mode);
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  DType c = result_type(a, b);
  return binary("maximum", BinaryOp::kMaximum, a, &b, nullptr, c, c);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  DType c = result_type(a, b);
  return binary("minimum", BinaryOp::kMinimum, a, &b, nullptr, c, c);
}

Tensor pow(const Tensor& a, const Tensor& b) {
  DType c = result_type(a, b);
  return binary("pow", BinaryOp::kPow, a, &b, nullptr, c, c);
}
Tensor pow(const Tensor& a, const Scalar& exponent) {
  const DType c = result_type(a, exponent);
  DT_CHECK(is_floating(c) || exponent.to_int() >= 0,
           "pow: integers to negative integer powers are not allowed (", dtype_name(a.dtype()), " ",
           shape_str(a.sizes()), " ** ", exponent.to_int(),
           "; accepted: exponent >= 0 or a floating tensor/exponent)");
  return binary("pow", BinaryOp::kPow, a, nullptr, &exponent, c, c);
}

#define DTK_CUDA_COMPARISON(name, kind)                                          \
  Tensor name(const Tensor& a, const Tensor& b) {                                \
    return binary(#name, kind, a, &b, nullptr, result_type(a, b), DType::kBool); \
  }                                                                              \
  Tensor name(const Tensor& a, const Scalar& b) {                                \
    return binary(#name, kind, a, nullptr, &b, result_type(a, b), DType::kBool); \
  }
DTK_CUDA_COMPARISON(eq, BinaryOp::kEq)
DTK_CUDA_COMPARISON(ne, BinaryOp::kNe)
DTK_CUDA_COMPARISON(lt, BinaryOp::kLt)
DTK_CUDA_COMPARISON(le, BinaryOp::kLe)
DTK_CUDA_COMPARISON(gt, BinaryOp::kGt)
DTK_CUDA_COMPARISON(ge, BinaryOp::kGe)
#undef DTK_CUDA_COMPARISON

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_cuda("where", cond, "condition");
  check_same_device("where", cond, a, "self");
  check_same_device("where", cond, b, "other");
  DT_CHECK(cond.dtype() == DType::kBool, "where: condition must be bool, got ",
           dtype_name(cond.dtype()), " ", shape_str(cond.sizes()));
  const Shape shape =
      broadcast_op("where", cond.sizes(), broadcast_op("where", a.sizes(), b.sizes()));
  return where_impl("where", cond, shape, result_type(a, b), &a, Operand{}, &b, Operand{});
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  check_cuda("masked_fill", x);
  check_same_device("masked_fill", x, mask, "mask");
  DT_CHECK(mask.dtype() == DType::kBool, "masked_fill: mask must be bool, got ",
           dtype_name(mask.dtype()), " ", shape_str(mask.sizes()));
  DT_CHECK(broadcast_op("masked_fill", x.sizes(), mask.sizes()) == x.sizes(), "masked_fill: mask ",
           shape_str(mask.sizes()), " does not broadcast to the input's shape ",
           shape_str(x.sizes()));
  return where_impl("masked_fill", mask, x.sizes(), x.dtype(), nullptr, scalar_as(value, x.dtype()),
                    &x, Operand{});
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate) {
  const char* op = "gelu_backward";
  DT_CHECK(approximate == "none" || approximate == "tanh", op, ": unknown approximate '",
           approximate, "' (accepted: \"none\", \"tanh\")");
  check_cuda(op, grad, "grad");
  check_same_device(op, grad, x, "self");
  DT_CHECK(is_floating(grad.dtype()) && is_floating(x.dtype()), op,
           ": grad and self must be floating, got ", dtype_name(grad.dtype()), " ",
           shape_str(grad.sizes()), " and ", dtype_name(x.dtype()), " ", shape_str(x.sizes()));
  const DType out = promote_types(grad.dtype(), x.dtype());
  return binary(op, approximate == "tanh" ? BinaryOp::kGeluTanhBackward : BinaryOp::kGeluBackward,
                grad, &x, nullptr, out, out);
}

Tensor neg(const Tensor& x) { return unary_keep("neg", UnaryOp::kNeg, x, "negating a"); }
Tensor abs(const Tensor& x) { return unary_keep("abs", UnaryOp::kAbs, x, "a"); }
Tensor relu(const Tensor& x) { return unary_keep("relu", UnaryOp::kRelu, x, "a"); }
Tensor exp(const Tensor& x) { return unary_float("exp", UnaryOp::kExp, x, true); }
Tensor log(const Tensor& x) { return unary_float("log", UnaryOp::kLog, x, true); }
Tensor sqrt(const Tensor& x) { return unary_float("sqrt", UnaryOp::kSqrt, x, true); }
Tensor rsqrt(const Tensor& x) { return unary_float("rsqrt", UnaryOp::kRsqrt, x, true); }
Tensor tanh(const Tensor& x) { return unary_float("tanh", UnaryOp::kTanh, x, true); }
Tensor sigmoid(const Tensor& x) { return unary_float("sigmoid", UnaryOp::kSigmoid, x, true); }
Tensor silu(const Tensor& x) { return unary_float("silu", UnaryOp::kSilu, x, false); }
Tensor gelu(const Tensor& x, const std::string& approximate) {
  DT_CHECK(approximate == "none" || approximate == "tanh", "gelu: unknown approximate '",
           approximate, "' (accepted: \"none\", \"tanh\")");
  return unary_float("gelu", approximate == "tanh" ? UnaryOp::kGeluTanh : UnaryOp::kGelu, x, false);
}

}  // namespace dtensor::kernels::cuda

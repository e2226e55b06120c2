#include "kernels/cpu/pointwise_rows.h"

#include <array>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/pointwise.h"
#include "kernels/device_dispatch.h"
#include "kernels/scalar_math.h"

namespace dtensor::kernels {
namespace {

using detail::compute_dtype;

std::string described(DType d, const Shape& s) { return absl::StrCat(dtype_name(d), " ", shape_str(s)); }

// The dtype rule shared by both tables: `common` is the input's dtype (unary) or the promoted one.
DType apply_rule(const char* op, RowDTypes rule, DType common, const std::string& inputs) {
  switch (rule) {
    case RowDTypes::kFloat:
      return is_floating(common) ? common : DType::kFloat32;
    case RowDTypes::kFloatOnly:
      DT_CHECK(is_floating(common), op, ": expected floating inputs, got ", inputs,
               " (accepted: float32, float64, bfloat16, float16)");
      return common;
    case RowDTypes::kKeep:
    case RowDTypes::kPromote:
      DT_CHECK(common != DType::kBool, op, ": bool inputs are not supported (", inputs,
               "; accepted: numeric dtypes)");
      return common;
    case RowDTypes::kToBool:
      return DType::kBool;
    case RowDTypes::kIntegral:
      DT_CHECK(!is_floating(common), op, ": expected integer or bool inputs, got ", inputs,
               " (accepted: int32, int64, bool)");
      return common;
  }
  DT_FAIL("internal: unknown dtype rule of ", op);
}

// The type f computes in: the output's compute type, except for bool results (the inputs').
DType compute_of(RowDTypes rule, DType common, DType out) {
  return compute_dtype(rule == RowDTypes::kToBool ? common : out);
}

// out = f(in...) over `shape`, f computed in c; bool results of an integral row keep the low bit
// (bitwise_not of a bool is its logical not).
template <RowDTypes kRule, size_t N, typename F>
Tensor map_row(const Shape& shape, const std::array<Tensor, N>& in, DType c, DType out, F f) {
  return detail::dispatch_compute(c, [&](auto tag) -> Tensor {
    using T = typename decltype(tag)::type;
    constexpr bool kFloatRow = kRule == RowDTypes::kFloat || kRule == RowDTypes::kFloatOnly;
    if constexpr (kFloatRow && std::is_integral_v<T>) {
      DT_FAIL("internal: a floating row computing in int64");
    } else if constexpr (kRule == RowDTypes::kIntegral && !std::is_integral_v<T>) {
      DT_FAIL("internal: an integral row computing in a floating type");
    } else {
      constexpr bool kBoolOut = kRule == RowDTypes::kToBool;
      using R = std::conditional_t<kBoolOut, bool, T>;
      std::array<Tensor, N> cast;
      for (size_t k = 0; k < N; ++k) cast[k] = in[k].to(c).expand(shape);
      Tensor o = Tensor::empty(shape, kBoolOut ? DType::kBool : c);
      if constexpr (kRule == RowDTypes::kIntegral) {
        const bool low_bit = out == DType::kBool;
        detail::map<R, T>(o, cast, [&](auto... v) {
          const T r = static_cast<T>(f(v...));
          return low_bit ? static_cast<T>(r & 1) : r;
        });
      } else {
        detail::map<R, T>(o, cast, f);
      }
      return kBoolOut ? o : o.to(out);
    }
  });
}

// Integer rows that divide: a 0 divisor is an error, as torch's ZeroDivisionError.
void check_divisor(const char* op, const Tensor& b, DType c, const std::string& inputs) {
  if (c != DType::kInt64) return;
  const Tensor v = b.to(DType::kInt64).contiguous();
  const int64_t* p = v.data<int64_t>();
  for (int64_t i = 0; i < v.numel(); ++i)
    DT_CHECK(p[i] != 0, op, ": integer division by zero (", inputs, ")");
}

}  // namespace

DType row_dtype(UnaryRow row, DType x, const Shape& shape) {
  const UnaryRowInfo& r = row_info(row);
  return apply_rule(r.name, r.dtypes, x, described(x, shape));
}

DType row_dtype(BinaryRow row, DType a, const Shape& a_shape, DType b, const Shape& b_shape) {
  const BinaryRowInfo& r = row_info(row);
  const DType common = result_type(a, static_cast<int64_t>(a_shape.size()), b, static_cast<int64_t>(b_shape.size()));
  return apply_rule(r.name, r.dtypes, common, absl::StrCat(described(a, a_shape), " and ", described(b, b_shape)));
}

DType row_dtype(ParamRow row, DType x, const Shape& shape, const RowParams& p) {
  const ParamRowInfo& r = row_info(row);
  const std::string input = described(x, shape);
  // The row's parameters, checked before the dtype: NaN is None only where the schema says Scalar?.
  [[maybe_unused]] const double p0 = p.p[0], p1 = p.p[1], p2 = p.p[2];
  bool ok = true;
  switch (row) {
#define DT_ROW_VALID(name, params, dtypes, cost, order, sample, valid, f, grad) \
  case ParamRow::name:                                                          \
    ok = (valid);                                                               \
    break;
    DT_POINTWISE_PARAM_ROWS(DT_ROW_VALID)
#undef DT_ROW_VALID
  }
  DT_CHECK(ok, r.name, "(", input, "): parameters (p0, p1, p2) = (", p0, ", ", p1, ", ", p2, ") of (", r.params,
           ") fail the condition `", r.valid, "`");
  if (r.dtypes != RowDTypes::kPromote || is_floating(x)) return apply_rule(r.name, r.dtypes, x, input);
  // torch.result_type with Python numbers: a float raises an integer or bool tensor to float32, an
  // int raises bool to int64.
  bool any_float = false;
  for (bool f : p.floating) any_float = any_float || f;
  if (any_float) return DType::kFloat32;
  return x == DType::kBool ? DType::kInt64 : x;
}

Tensor pointwise_param_row(ParamRow row, const Tensor& x, const RowParams& p) {
  DT_KERNEL_ON_DEVICE(pointwise_param_row, row, x, p);
  const ParamRowInfo& info = row_info(row);
  const DType out = row_dtype(row, x.dtype(), x.sizes(), p);
  const DType c = compute_of(info.dtypes, x.dtype(), out);
  const std::array<Tensor, 1> in{x};
  [[maybe_unused]] const double p0 = p.p[0], p1 = p.p[1], p2 = p.p[2];
  switch (row) {
#define DT_ROW_CASE(name, params, dtypes, cost, order, sample, valid, f, grad)              \
  case ParamRow::name:                                                                    \
    return map_row<RowDTypes::dtypes>(x.sizes(), in, c, out, [=](auto x) {                \
      using T [[maybe_unused]] = decltype(x);                                             \
      return static_cast<T>(f);                                                           \
    });
    DT_POINTWISE_PARAM_ROWS(DT_ROW_CASE)
#undef DT_ROW_CASE
  }
  DT_FAIL("internal: unknown parameter row ", static_cast<int>(row));
}

Tensor pointwise_unary_row(UnaryRow row, const Tensor& x) {
  DT_KERNEL_ON_DEVICE(pointwise_unary_row, row, x);
  const UnaryRowInfo& info = row_info(row);
  const DType out = row_dtype(row, x.dtype(), x.sizes());
  const DType c = compute_of(info.dtypes, x.dtype(), out);
  const std::array<Tensor, 1> in{x};
  switch (row) {
#define DT_ROW_CASE(name, onnx, dtypes, cost, domain, order, f, grad)                                 \
  case UnaryRow::name:                                                                          \
    return map_row<RowDTypes::dtypes>(x.sizes(), in, c, out, [](auto x) {                       \
      using T [[maybe_unused]] = decltype(x);                                                   \
      return f;                                                                                 \
    });
    DT_POINTWISE_UNARY_ROWS(DT_ROW_CASE)
#undef DT_ROW_CASE
  }
  DT_FAIL("internal: unknown unary row ", static_cast<int>(row));
}

Tensor pointwise_binary_row(BinaryRow row, const Tensor& a, const Tensor& b) {
  DT_KERNEL_ON_DEVICE(pointwise_binary_row, row, a, b);
  const BinaryRowInfo& info = row_info(row);
  const Shape shape = detail::broadcast_op(info.name, a.sizes(), b.sizes());
  const DType out = row_dtype(row, a.dtype(), a.sizes(), b.dtype(), b.sizes());
  const DType c = compute_of(info.dtypes, result_type(a, b), out);
  if (info.divides())
    check_divisor(info.name, b, c, absl::StrCat(described(a.dtype(), a.sizes()), " and ", described(b.dtype(), b.sizes())));
  const std::array<Tensor, 2> in{a, b};
  switch (row) {
#define DT_ROW_CASE(name, onnx, dtypes, cost, other, f, grad_a, grad_b)                             \
  case BinaryRow::name:                                                                         \
    return map_row<RowDTypes::dtypes>(shape, in, c, out, [](auto a, auto b) {                   \
      using T [[maybe_unused]] = decltype(a);                                                   \
      return f;                                                                                 \
    });
    DT_POINTWISE_BINARY_ROWS(DT_ROW_CASE)
#undef DT_ROW_CASE
  }
  DT_FAIL("internal: unknown binary row ", static_cast<int>(row));
}

}  // namespace dtensor::kernels

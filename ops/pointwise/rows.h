// The pointwise ops written as rows: one row is the whole op. Each layer expands the tables with its
// own X macro and reads the columns it needs, so adding an op is one row here plus its test row
// (tests/python/opinfo_oracle.py); no other file changes:
//   kernels/cpu/pointwise_rows.cc     the CPU kernel (f over the compute type)
//   kernels/cuda/pointwise_rows*.cc/.cu  the CUDA kernel (the same f, compiled by nvcc)
//   ops/pointwise/rows_defs.cc        the OpDef: schema, dtype rule, samples, cost
//   ops/pointwise/rows_rules.cc      the sharding rules (shards, and Partial from `order`)
//   ops/pointwise/rows_backward.cc  the backward (from the grad column)
// This header holds data only (macros and enums): it depends on nothing, so every layer may read it.
//
// Unary rows: X(name, onnx, dtypes, cost, domain, order, f, grad)
//   name    the ATen name (schema "name(Tensor self) -> Tensor"), the kernel's name and the enum's.
//   onnx    the ONNX operator it imports from (planner/onnx_import.cc), "" for none (default
//           attributes: IsInf detects both signs; Mod is remainder, with fmod=1 fmod).
//   dtypes  RowDTypes: kFloat (integer and bool inputs give float32, as torch's float ops),
//           kFloatOnly (floating inputs only), kKeep (the input's dtype; bool rejected),
//           kToBool (bool result), kIntegral (integer and bool inputs only, same dtype).
//   cost    the planner's CostClass without its k: Elementwise or Transcendental.
//   domain  RowDomain, where the sample inputs of the validator and gradcheck lie: kReal,
//           kPositive (0.25..2.25), kUnit (-0.9..0.9), kAboveOne (1.1..3); kNonzero is for
//           divisors (binary rows).
//   order   RowOrder: kIncreasing or kDecreasing when f is monotone on every real (a Partial(max)
//           input gives a Partial(max) output, or Partial(min) when decreasing), else kNone. An op
//           monotone only on its domain is kNone: a Partial piece may lie outside the domain.
//   f       an expression in `x` of compute type T (float, double; and int64_t unless the dtypes
//           are kFloat or kFloatOnly), for host and device: std:: math or kernels/scalar_math.h (sm::).
//   grad    the input's gradient, an expression over DTensors: g (the output's gradient), x (the
//           input), y (the output); arithmetic operators, sqrt, exp, op("aten_name", ...) and the
//           constants kPi, kLn2, kLn10 (ops/pointwise/rows_backward.cc); no_grad for ops
//           whose output is not differentiable.
//
// Binary rows: X(name, onnx, dtypes, cost, other, f, grad_a, grad_b)
//   name    schema "name(Tensor self, Tensor other) -> Tensor"; the inputs broadcast.
//   dtypes  RowDTypes: kPromote (torch.result_type), kFloat (promoted, integers to float32),
//           kFloatOnly, kToBool (compares in the promoted type, bool result), kIntegral.
//   other   RowDomain of the second input's samples: kReal, kPositive (xlogy's log), or kNonzero
//           for the rows that divide (an integer b of 0 is a division by zero: an error, as torch's).
//   f       an expression in `a`, `b` of compute type T.
//   grad_a, grad_b  as grad, over g, a, b, y; summed back over broadcast dims by the backward.
//
// Rows with Scalar parameters: X(name, params, dtypes, cost, order, sample, valid, f, grad)
//   name    the ATen name; the schema is "name(Tensor self, <params>) -> Tensor".
//   params  ATen's arguments after self, up to 3, each `Scalar` with its default or `Scalar?`
//           (default None); a None reaches f and grad as NaN (an explicit NaN there is refused).
//   dtypes  kPromote (torch.result_type of the input and the parameters as Python numbers: a
//           float parameter on an integer tensor gives float32, an int on bool int64), kKeep (the
//           input's dtype; integer parameters truncated, as torch casts them; bool rejected) or
//           kFloatOnly.
//   order   as above, but it must hold for every parameter value `valid` accepts.
//   sample  the parameter values of the validator's and gradcheck's samples, in parentheses.
//   valid   a condition on the parameters (doubles p0, p1, p2 in schema order), as torch checks
//           them; a call failing it is an error that names the parameters and prints this text.
//   f       an expression in `x` (compute type T) and the parameters p0, p1, p2 (double).
//   grad    as the unary grad column, with p0, p1, p2 and the comparisons gt, ge, lt, le of a
//           DTensor with a number, both/either (logical and/or) and where.
// The f and grad of each row follow torch's CPU kernels and derivatives.yaml, NaN inputs included.
#pragma once

#include <cstdint>

// clang-format off
#define DT_POINTWISE_UNARY_ROWS(X)                                                                          \
  X(acos, "Acos", kFloat, Transcendental, kUnit, kNone, std::acos(x), -g / sqrt(1.0 - x * x))                     \
  X(asin, "Asin", kFloat, Transcendental, kUnit, kNone, std::asin(x), g / sqrt(1.0 - x * x))                      \
  X(atan, "Atan", kFloat, Transcendental, kReal, kIncreasing, std::atan(x), g / (x * x + 1.0))                    \
  X(sin, "Sin", kFloat, Transcendental, kReal, kNone, std::sin(x), g * op("cos", x))                             \
  X(cos, "Cos", kFloat, Transcendental, kReal, kNone, std::cos(x), -g * op("sin", x))                            \
  X(tan, "Tan", kFloat, Transcendental, kUnit, kNone, std::tan(x), g * (y * y + 1.0))                            \
  X(sinh, "Sinh", kFloat, Transcendental, kReal, kIncreasing, std::sinh(x), g * op("cosh", x))                    \
  X(cosh, "Cosh", kFloat, Transcendental, kReal, kNone, std::cosh(x), g * op("sinh", x))                          \
  X(asinh, "Asinh", kFloat, Transcendental, kReal, kIncreasing, std::asinh(x), g / sqrt(x * x + 1.0))              \
  X(acosh, "Acosh", kFloat, Transcendental, kAboveOne, kNone, std::acosh(x), g / sqrt(x * x - 1.0))                \
  X(atanh, "Atanh", kFloat, Transcendental, kUnit, kNone, std::atanh(x), g / (1.0 - x * x))                        \
  X(log1p, "", kFloat, Transcendental, kPositive, kNone, std::log1p(x), g / (x + 1.0))                        \
  X(expm1, "", kFloat, Transcendental, kReal, kIncreasing, std::expm1(x), g * (y + 1.0))                      \
  X(exp2, "", kFloat, Transcendental, kReal, kIncreasing, std::exp2(x), g * y * kLn2)                         \
  X(log2, "", kFloat, Transcendental, kPositive, kNone, std::log2(x), g / (x * kLn2))                         \
  X(log10, "", kFloat, Transcendental, kPositive, kNone, std::log10(x), g / (x * kLn10))                      \
  X(erf, "Erf", kFloat, Transcendental, kReal, kIncreasing, std::erf(x), g * exp(-x * x) * (2.0 / sqrt(kPi)))    \
  X(erfc, "", kFloat, Transcendental, kReal, kDecreasing, std::erfc(x), -g * exp(-x * x) * (2.0 / sqrt(kPi))) \
  X(erfinv, "", kFloat, Transcendental, kUnit, kNone, sm::erfinv(x), g * exp(y * y) * (sqrt(kPi) / 2.0))      \
  X(reciprocal, "Reciprocal", kFloat, Elementwise, kPositive, kNone, T(1) / x, -g * y * y)                               \
  X(rad2deg, "", kFloat, Elementwise, kReal, kIncreasing, x * T(180.0 / 3.14159265358979323846), g * (180.0 / kPi)) \
  X(deg2rad, "", kFloat, Elementwise, kReal, kIncreasing, x * T(3.14159265358979323846 / 180.0), g * (kPi / 180.0)) \
  X(ceil, "Ceil", kKeep, Elementwise, kReal, kIncreasing, sm::ceil(x), g * 0.0)                                   \
  X(floor, "Floor", kKeep, Elementwise, kReal, kIncreasing, sm::floor(x), g * 0.0)                                 \
  X(round, "Round", kKeep, Elementwise, kReal, kIncreasing, sm::round(x), g * 0.0)                                 \
  X(trunc, "", kKeep, Elementwise, kReal, kIncreasing, sm::trunc(x), g * 0.0)                                 \
  X(sign, "Sign", kKeep, Elementwise, kReal, kIncreasing, sm::sign(x), g * 0.0)                                   \
  X(frac, "", kFloatOnly, Elementwise, kReal, kNone, sm::frac(x), g)                                          \
  X(positive, "", kKeep, Elementwise, kReal, kIncreasing, x, g)                                          \
  X(signbit, "", kToBool, Elementwise, kReal, kNone, sm::signbit(x), no_grad)                             \
  X(isnan, "IsNaN", kToBool, Elementwise, kReal, kNone, sm::isnan(x), no_grad)                                     \
  X(isinf, "IsInf", kToBool, Elementwise, kReal, kNone, sm::isinf(x), no_grad)                                     \
  X(logical_not, "Not", kToBool, Elementwise, kReal, kNone, x == T(0), no_grad)                                  \
  X(bitwise_not, "BitwiseNot", kIntegral, Elementwise, kReal, kNone, ~x, no_grad)

#define DT_POINTWISE_BINARY_ROWS(X)                                                                       \
  X(atan2, "", kFloat, Transcendental, kReal, std::atan2(a, b),                                               \
    g * b / (a * a + b * b), -g * a / (a * a + b * b))                                                    \
  X(hypot, "", kFloatOnly, Transcendental, kReal, std::hypot(a, b), g * a / y, g * b / y)                     \
  X(copysign, "", kFloat, Elementwise, kReal, std::copysign(a, b),                                            \
    g * op("sign", a) * op("copysign", ones_like(a), b), g * 0.0)                                          \
  X(fmod, "", kPromote, Elementwise, kNonzero, sm::fmod(a, b), g, -g * op("trunc", a / b))                        \
  X(remainder, "Mod", kPromote, Elementwise, kNonzero, sm::remainder(a, b), g, -g * op("floor", a / b))               \
  X(nextafter, "", kFloatOnly, Elementwise, kReal, std::nextafter(a, b), g, g * 0.0)                          \
  X(logical_and, "And", kToBool, Elementwise, kReal, a != T(0) && b != T(0), no_grad, no_grad)                   \
  X(logical_or, "Or", kToBool, Elementwise, kReal, a != T(0) || b != T(0), no_grad, no_grad)                    \
  X(logical_xor, "Xor", kToBool, Elementwise, kReal, (a != T(0)) != (b != T(0)), no_grad, no_grad)               \
  X(bitwise_and, "BitwiseAnd", kIntegral, Elementwise, kReal, a & b, no_grad, no_grad)                                  \
  X(bitwise_or, "BitwiseOr", kIntegral, Elementwise, kReal, a | b, no_grad, no_grad)                                   \
  X(bitwise_xor, "BitwiseXor", kIntegral, Elementwise, kReal, a ^ b, no_grad, no_grad)                                  \
  X(logaddexp, "", kFloatOnly, Transcendental, kReal, sm::logaddexp(a, b), g * exp(a - y), g * exp(b - y)) \
  X(logaddexp2, "", kFloatOnly, Transcendental, kReal, sm::logaddexp2(a, b),                               \
    g * op("exp2", a - y), g * op("exp2", b - y))                                                          \
  X(fmax, "", kPromote, Elementwise, kReal, sm::fmax(a, b),                                                \
    keep(g, op("logical_or", op("ge", a, b), op("isnan", b))),                                             \
    g - keep(g, op("logical_or", op("ge", a, b), op("isnan", b))))                                         \
  X(fmin, "", kPromote, Elementwise, kReal, sm::fmin(a, b),                                                \
    keep(g, op("logical_or", op("le", a, b), op("isnan", b))),                                             \
    g - keep(g, op("logical_or", op("le", a, b), op("isnan", b))))                                         \
  X(xlogy, "", kFloat, Transcendental, kPositive, sm::xlogy(a, b),                                             \
    keep(g * log(b), op("ne", a, a * 0.0)), g * a / b)                                                     \
  X(heaviside, "", kPromote, Elementwise, kReal, sm::heaviside(a, b), g * 0.0, g * 0.0)                    \
  X(floor_divide, "", kPromote, Elementwise, kNonzero, sm::div_floor(a, b), g * 0.0, g * 0.0)                  \
  X(gcd, "", kIntegral, Elementwise, kReal, sm::gcd(a, b), no_grad, no_grad)                               \
  X(lcm, "", kIntegral, Elementwise, kReal, sm::lcm(a, b), no_grad, no_grad)                               \
  X(bitwise_left_shift, "", kIntegral, Elementwise, kReal, sm::shift_left(a, b), no_grad, no_grad) \
  X(bitwise_right_shift, "", kIntegral, Elementwise, kReal, sm::shift_right(a, b), no_grad, no_grad)

#define DT_POINTWISE_PARAM_ROWS(X)                                                                        \
  X(clamp, "Scalar? min=None, Scalar? max=None", kPromote, Elementwise, kIncreasing, (-0.5, 0.8),              \
    !(std::isnan(p0) && std::isnan(p1)), sm::clamp_opt(x, p0, p1),                                       \
    keep(g, std::isnan(p0) ? le(x, p1) : std::isnan(p1) ? ge(x, p0) : both(ge(x, p0), le(x, p1))))         \
  X(hardtanh, "Scalar min_val=-1, Scalar max_val=1", kKeep, Elementwise, kIncreasing, (-0.5, 0.8),          \
    p0 <= p1, sm::clamp_opt(x, p0, p1), where(either(le(x, p0), ge(x, p1)), g * 0.0, g))                   \
  X(leaky_relu, "Scalar negative_slope=0.01", kFloatOnly, Elementwise, kNone, (0.2), true,                   \
    x > T(0) ? x : x * T(p0), where(gt(x, 0.0), g, g * p0))                                               \
  X(elu, "Scalar alpha=1, Scalar scale=1, Scalar input_scale=1", kFloatOnly, Transcendental, kNone,          \
    (1.5, 1.2, 0.7), true, x <= T(0) ? T(p0 * p1) * (std::exp(x * T(p2)) - T(1)) : x * T(p1),               \
    where(le(x, 0.0), g * (p2 * p1 * p0) * exp(x * p2), g * p1))                                          \
  X(celu, "Scalar alpha=1.", kFloatOnly, Transcendental, kNone, (1.5), p0 != 0.0,                            \
    x <= T(0) ? T(p0) * (std::exp(x / T(p0)) - T(1)) : x, where(le(x, 0.0), g * exp(x / p0), g))           \
  X(softplus, "Scalar beta=1, Scalar threshold=20", kFloatOnly, Transcendental, kNone, (2.0, 1.5), true,     \
    x * T(p0) > T(p1) ? x : T(std::log1p(std::exp(x * T(p0))) / T(p0)),                                 \
    where(gt(x * p0, p1), g, g * exp(x * p0) / (exp(x * p0) + 1.0)))                                      \
  X(hardshrink, "Scalar lambd=0.5", kFloatOnly, Elementwise, kNone, (0.5), true,                             \
    (x >= T(-p0) && x <= T(p0)) ? T(0) : x, where(both(ge(x, -p0), le(x, p0)), g * 0.0, g))                \
  X(softshrink, "Scalar lambd=0.5", kFloatOnly, Elementwise, kIncreasing, (0.5), p0 >= 0.0,                 \
    x > T(p0) ? x - T(p0) : (x < T(-p0) ? x + T(p0) : x * T(0)),                                          \
    where(both(ge(x, -p0), le(x, p0)), g * 0.0, g))
// clang-format on

namespace dtensor {

enum class RowDTypes : int32_t { kFloat, kFloatOnly, kKeep, kToBool, kIntegral, kPromote };
enum class RowDomain : int32_t { kReal, kPositive, kUnit, kAboveOne, kNonzero };
enum class RowOrder : int32_t { kNone, kIncreasing, kDecreasing };

// One enumerator per row, by name: UnaryRow::acos, BinaryRow::atan2.
enum class UnaryRow : int32_t {
#define DT_ROW_ENUMERATOR(name, ...) name,
  DT_POINTWISE_UNARY_ROWS(DT_ROW_ENUMERATOR)
};
enum class BinaryRow : int32_t { DT_POINTWISE_BINARY_ROWS(DT_ROW_ENUMERATOR) };
enum class ParamRow : int32_t { DT_POINTWISE_PARAM_ROWS(DT_ROW_ENUMERATOR) };
#undef DT_ROW_ENUMERATOR

// The row's facts as values (for the code that does not compile f or grad).
struct UnaryRowInfo {
  const char* name;
  const char* onnx;  // "" for none
  RowDTypes dtypes;
  RowDomain domain;
  RowOrder order;
};
struct BinaryRowInfo {
  const char* name;
  const char* onnx;  // "" for none
  RowDTypes dtypes;
  RowDomain other;
  bool divides() const { return other == RowDomain::kNonzero; }
};

struct ParamRowInfo {
  const char* name;
  const char* params;  // ATen's arguments after self
  RowDTypes dtypes;
  RowOrder order;
  const char* valid;  // the condition on p0, p1, p2, as written in the row
};

// A call's parameter values, in schema order (NaN: None), and whether each was given as a Python
// float (torch.result_type's category; an int or a default written without a point is not).
struct RowParams {
  double p[3] = {0.0, 0.0, 0.0};
  bool floating[3] = {false, false, false};
};

inline constexpr UnaryRowInfo kUnaryRows[] = {
#define DT_ROW_INFO(name, onnx, dtypes, cost, domain, order, f, grad) \
  {#name, onnx, RowDTypes::dtypes, RowDomain::domain, RowOrder::order},
    DT_POINTWISE_UNARY_ROWS(DT_ROW_INFO)
#undef DT_ROW_INFO
};
inline constexpr BinaryRowInfo kBinaryRows[] = {
#define DT_ROW_INFO(name, onnx, dtypes, cost, other, f, grad_a, grad_b) \
  {#name, onnx, RowDTypes::dtypes, RowDomain::other},
    DT_POINTWISE_BINARY_ROWS(DT_ROW_INFO)
#undef DT_ROW_INFO
};

inline constexpr ParamRowInfo kParamRows[] = {
#define DT_ROW_INFO(name, params, dtypes, cost, order, sample, valid, f, grad) \
  {#name, params, RowDTypes::dtypes, RowOrder::order, #valid},
    DT_POINTWISE_PARAM_ROWS(DT_ROW_INFO)
#undef DT_ROW_INFO
};

inline const UnaryRowInfo& row_info(UnaryRow r) { return kUnaryRows[static_cast<int32_t>(r)]; }
inline const BinaryRowInfo& row_info(BinaryRow r) { return kBinaryRows[static_cast<int32_t>(r)]; }
inline const ParamRowInfo& row_info(ParamRow r) { return kParamRows[static_cast<int32_t>(r)]; }

}  // namespace dtensor

// Element types of dtensor tensors and the 16-bit float formats.
#pragma once

#include <complex>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace dtensor {

// kComplex64 / kComplex128: std::complex<float> / std::complex<double> (real part first, as torch,
// NumPy and DLPack's kDLComplex lay them out). Only ops that declare complex take them (OpDef::complex);
// every other op and kernel refuses them with an error naming the op and the dtype.
// kUInt8 / kInt8 / kInt16: torch's byte, char and short. Kernels compute integers in int64 and cast
// the result back, which wraps modulo 2^bits as torch's narrow integer arithmetic does. Appended last
// so that the values of the older dtypes stay what they were.
enum class DType : uint8_t {
  kFloat32, kFloat64, kBFloat16, kFloat16, kInt64, kInt32, kBool, kComplex64, kComplex128,
  kUInt8, kInt8, kInt16
};

// Size of one element in bytes.
size_t itemsize(DType t);
// PyTorch spelling: "float32", "float64", "bfloat16", "float16", "int64", "int32", "int16", "int8",
// "uint8", "bool", "complex64", "complex128".
const char* dtype_name(DType t);
// Inverse of dtype_name; also accepts "float", "double", "half", "long", "int", "short", "char",
// "byte", "cfloat", "cdouble" (torch's aliases).
// Throws dtensor::Error naming the accepted spellings.
DType dtype_from_name(const std::string& name);
bool is_floating(DType t);  // real floating types only (complex is not floating, as in torch)
bool is_complex(DType t);
// The integer types and bool (torch's is_integral(includeBool=true)).
bool is_integral(DType t);
// The complex type whose parts are `t` (float32 -> complex64, float64 -> complex128; bfloat16 and
// float16 -> complex64), and the real type of a complex one's parts; others throw naming the dtype.
DType complex_of(DType t);
DType real_of_complex(DType t);
// Throws dtensor::Error "<where>: no kernel for dtype <t> (accepted: <accepted>)": the default case
// of the DT_DISPATCH_* macros, so that a switch over a dtype it lacks never silently does nothing.
[[noreturn]] void dispatch_unsupported(const char* where, DType t, const char* accepted);

// bfloat16: the upper 16 bits of an IEEE float32; conversion rounds to nearest even, NaN stays NaN.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) {  // NOLINT: implicit like the builtin float types
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    } else {
      uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
      bits = static_cast<uint16_t>((u + rounding) >> 16);
    }
  }
  operator float() const {  // NOLINT
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// IEEE 754 binary16; conversion rounds to nearest even, handles subnormals, inf and NaN.
struct Float16 {
  uint16_t bits = 0;
  Float16() = default;
  Float16(float f);   // NOLINT
  operator float() const;  // NOLINT
};

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBFloat16; };
template <> struct DTypeOf<Float16> { static constexpr DType value = DType::kFloat16; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::kInt16; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kInt8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };
template <> struct DTypeOf<std::complex<float>> { static constexpr DType value = DType::kComplex64; };
template <> struct DTypeOf<std::complex<double>> { static constexpr DType value = DType::kComplex128; };

}  // namespace dtensor

// DT_DISPATCH_ALL(dtype, body): runs body with scalar_t bound to the C++ type of dtype, for the real
// and bool dtypes; a complex dtype throws naming the enclosing function (dispatch_unsupported).
// DT_DISPATCH_COMPLEX: the complex dtypes only (std::complex<float> / <double>).
// DT_DISPATCH_ALL_AND_COMPLEX: all of them.
#define DT_DISPATCH_CASE(enumv, type, ...) \
  case ::dtensor::DType::enumv: {          \
    using scalar_t = type;                 \
    __VA_ARGS__;                           \
    break;                                 \
  }

#define DT_DISPATCH_REAL_CASES(...)                               \
  DT_DISPATCH_CASE(kFloat32, float, __VA_ARGS__)                  \
  DT_DISPATCH_CASE(kFloat64, double, __VA_ARGS__)                 \
  DT_DISPATCH_CASE(kBFloat16, ::dtensor::BFloat16, __VA_ARGS__)   \
  DT_DISPATCH_CASE(kFloat16, ::dtensor::Float16, __VA_ARGS__)     \
  DT_DISPATCH_CASE(kInt64, int64_t, __VA_ARGS__)                  \
  DT_DISPATCH_CASE(kInt32, int32_t, __VA_ARGS__)                  \
  DT_DISPATCH_CASE(kInt16, int16_t, __VA_ARGS__)                  \
  DT_DISPATCH_CASE(kInt8, int8_t, __VA_ARGS__)                    \
  DT_DISPATCH_CASE(kUInt8, uint8_t, __VA_ARGS__)                  \
  DT_DISPATCH_CASE(kBool, bool, __VA_ARGS__)

#define DT_DISPATCH_COMPLEX_CASES(...)                                    \
  DT_DISPATCH_CASE(kComplex64, std::complex<float>, __VA_ARGS__)          \
  DT_DISPATCH_CASE(kComplex128, std::complex<double>, __VA_ARGS__)

#define DT_DISPATCH_ALL(dtype, ...)                                                            \
  switch (dtype) {                                                                             \
    DT_DISPATCH_REAL_CASES(__VA_ARGS__)                                                        \
    default:                                                                                   \
      ::dtensor::dispatch_unsupported(__func__, dtype,                                         \
                                      "float32, float64, bfloat16, float16, int64, int32, int16, int8, uint8, bool"); \
  }

#define DT_DISPATCH_COMPLEX(dtype, ...)                                                  \
  switch (dtype) {                                                                       \
    DT_DISPATCH_COMPLEX_CASES(__VA_ARGS__)                                               \
    default:                                                                             \
      ::dtensor::dispatch_unsupported(__func__, dtype, "complex64, complex128");         \
  }

#define DT_DISPATCH_ALL_AND_COMPLEX(dtype, ...) \
  switch (dtype) {                              \
    DT_DISPATCH_REAL_CASES(__VA_ARGS__)         \
    DT_DISPATCH_COMPLEX_CASES(__VA_ARGS__)      \
  }

// Element types of dtensor tensors and the 16-bit float formats.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace dtensor {

enum class DType : uint8_t { kFloat32, kFloat64, kBFloat16, kFloat16, kInt64, kInt32, kBool };

// Size of one element in bytes.
size_t itemsize(DType t);
// PyTorch spelling: "float32", "float64", "bfloat16", "float16", "int64", "int32", "bool".
const char* dtype_name(DType t);
// Inverse of dtype_name; also accepts "float", "double", "half", "long", "int".
// Throws dtensor::Error naming the accepted spellings.
DType dtype_from_name(const std::string& name);
bool is_floating(DType t);

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
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };

}  // namespace dtensor

// DT_DISPATCH_ALL(dtype, scalar_t, body): runs body with scalar_t bound to the C++ type of dtype.
#define DT_DISPATCH_CASE(enumv, type, ...) \
  case ::dtensor::DType::enumv: {          \
    using scalar_t = type;                 \
    __VA_ARGS__;                           \
    break;                                 \
  }

#define DT_DISPATCH_ALL(dtype, ...)                                  \
  switch (dtype) {                                                   \
    DT_DISPATCH_CASE(kFloat32, float, __VA_ARGS__)                   \
    DT_DISPATCH_CASE(kFloat64, double, __VA_ARGS__)                  \
    DT_DISPATCH_CASE(kBFloat16, ::dtensor::BFloat16, __VA_ARGS__)    \
    DT_DISPATCH_CASE(kFloat16, ::dtensor::Float16, __VA_ARGS__)      \
    DT_DISPATCH_CASE(kInt64, int64_t, __VA_ARGS__)                   \
    DT_DISPATCH_CASE(kInt32, int32_t, __VA_ARGS__)                   \
    DT_DISPATCH_CASE(kBool, bool, __VA_ARGS__)                       \
  }

#include "dtensor/core/dtype.h"

#include "dtensor/core/error.h"

namespace dtensor {

size_t itemsize(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 2;
    case DType::kInt64: return 8;
    case DType::kInt32: return 4;
    case DType::kInt16: return 2;
    case DType::kInt8: return 1;
    case DType::kUInt8: return 1;
    case DType::kBool: return 1;
    case DType::kComplex64: return 8;
    case DType::kComplex128: return 16;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kInt64: return "int64";
    case DType::kInt32: return "int32";
    case DType::kInt16: return "int16";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kBool: return "bool";
    case DType::kComplex64: return "complex64";
    case DType::kComplex128: return "complex128";
  }
  return "?";
}

DType dtype_from_name(const std::string& n) {
  if (n == "float32" || n == "float") return DType::kFloat32;
  if (n == "float64" || n == "double") return DType::kFloat64;
  if (n == "bfloat16") return DType::kBFloat16;
  if (n == "float16" || n == "half") return DType::kFloat16;
  if (n == "int64" || n == "long") return DType::kInt64;
  if (n == "int32" || n == "int") return DType::kInt32;
  if (n == "int16" || n == "short") return DType::kInt16;
  if (n == "int8" || n == "char") return DType::kInt8;
  if (n == "uint8" || n == "byte") return DType::kUInt8;
  if (n == "bool") return DType::kBool;
  if (n == "complex64" || n == "cfloat") return DType::kComplex64;
  if (n == "complex128" || n == "cdouble") return DType::kComplex128;
  DT_FAIL("unknown dtype '", n,
          "'; accepted: float32, float64, bfloat16, float16, int64, int32, int16, int8, uint8, bool, complex64, "
          "complex128");
}

bool is_complex(DType t) { return t == DType::kComplex64 || t == DType::kComplex128; }

bool is_integral(DType t) { return !is_floating(t) && !is_complex(t); }

DType complex_of(DType t) {
  if (t == DType::kFloat64 || t == DType::kComplex128) return DType::kComplex128;
  if (is_floating(t) || t == DType::kComplex64) return DType::kComplex64;
  DT_FAIL("complex_of: ", dtype_name(t), " has no complex counterpart; accepted: floating or complex dtypes");
}

DType real_of_complex(DType t) {
  if (t == DType::kComplex64) return DType::kFloat32;
  if (t == DType::kComplex128) return DType::kFloat64;
  DT_FAIL("real_of_complex: ", dtype_name(t), " is not complex; accepted: complex64, complex128");
}

void dispatch_unsupported(const char* where, DType t, const char* accepted) {
  DT_FAIL(where, ": no kernel for dtype ", dtype_name(t), " (accepted: ", accepted, ")");
}

bool is_floating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16 ||
         t == DType::kFloat16;
}

Float16::Float16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) {  // NaN
    bits = static_cast<uint16_t>(sign | 0x7e00u);
    return;
  }
  if (absx >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    bits = static_cast<uint16_t>(sign | 0x7c00u);
    return;
  }
  if (absx < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (absx < 0x33000000u) {  // below half of the smallest subnormal (2^-25): zero
      bits = static_cast<uint16_t>(sign);
      return;
    }
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(absx >> 23);  // 14 + 113 - exp - 1 ... to 10-bit subnormal
    // value = mant * 2^(e-150); subnormal half unit = 2^-24, so result = mant >> (126 - e) .. rounded
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    bits = static_cast<uint16_t>(sign | q);
    return;
  }
  // Normal: rebias exponent (127 -> 15) and round the 23-bit mantissa to 10 bits.
  uint32_t h = absx - 0x38000000u;  // exponent - 112 in the float layout
  uint32_t rem = h & 0x1fffu;
  uint32_t q = h >> 13;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  bits = static_cast<uint16_t>(sign | q);
}

Float16::operator float() const {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      out = sign | (static_cast<uint32_t>(112 - e) << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

}  // namespace dtensor

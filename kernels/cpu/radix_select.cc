#include "kernels/cpu/radix_select.h"

#include <cstring>

#include "kernels/device_dispatch.h"

namespace dtensor::kernels {
namespace {

// Order-preserving key of IEEE bits `b` of width `w`, with -0 mapped to +0.
template <int kWidth>
uint64_t float_key(uint64_t b) {
  constexpr uint64_t sign = uint64_t{1} << (kWidth - 1);
  constexpr uint64_t mask = kWidth == 64 ? ~uint64_t{0} : (uint64_t{1} << kWidth) - 1;
  if (b == sign) b = 0;  // -0.0
  return (b & sign) ? (~b & mask) : (b | sign);
}

template <int kWidth>
uint64_t float_bits(uint64_t key) {
  constexpr uint64_t sign = uint64_t{1} << (kWidth - 1);
  constexpr uint64_t mask = kWidth == 64 ? ~uint64_t{0} : (uint64_t{1} << kWidth) - 1;
  return (key & sign) ? (key & ~sign) : (~key & mask);
}

// key_of(v, &key): false for NaN.
bool key_of(float v, uint64_t* k) {
  if (v != v) return false;
  uint32_t b;
  std::memcpy(&b, &v, 4);
  *k = float_key<32>(b);
  return true;
}
bool key_of(double v, uint64_t* k) {
  if (v != v) return false;
  uint64_t b;
  std::memcpy(&b, &v, 8);
  *k = float_key<64>(b);
  return true;
}
bool key_of(BFloat16 v, uint64_t* k) {
  if ((v.bits & 0x7fffu) > 0x7f80u) return false;
  *k = float_key<16>(v.bits);
  return true;
}
bool key_of(Float16 v, uint64_t* k) {
  if ((v.bits & 0x7fffu) > 0x7c00u) return false;
  *k = float_key<16>(v.bits);
  return true;
}
bool key_of(int16_t v, uint64_t* k) {
  *k = static_cast<uint16_t>(v) ^ 0x8000u;
  return true;
}
bool key_of(int8_t v, uint64_t* k) {
  *k = static_cast<uint8_t>(v) ^ 0x80u;
  return true;
}
bool key_of(uint8_t v, uint64_t* k) {
  *k = v;
  return true;
}
bool key_of(int32_t v, uint64_t* k) {
  *k = static_cast<uint32_t>(v) ^ 0x80000000u;
  return true;
}
bool key_of(int64_t v, uint64_t* k) {
  *k = static_cast<uint64_t>(v) ^ (uint64_t{1} << 63);
  return true;
}
bool key_of(bool v, uint64_t* k) {
  *k = v ? 1 : 0;
  return true;
}

template <typename T>
void histogram(const Tensor& x, int64_t outer, int64_t n, int64_t inner, const std::vector<uint64_t>& prefix,
               int shift, int bits, bool whole_key, int64_t* out) {
  const T* p = x.data<T>();
  const int64_t cols = (int64_t{1} << bits) + 1;
  const uint64_t digit_mask = (uint64_t{1} << bits) - 1;
  const int high = shift + bits;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < n; ++j) {
      const T* q = p + (o * n + j) * inner;
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t row = o * inner + i;
        int64_t* h = out + row * cols;
        uint64_t key;
        if (!key_of(q[i], &key)) {
          ++h[cols - 1];
          continue;
        }
        if (!whole_key && (key >> high) != prefix[row]) continue;
        ++h[(key >> shift) & digit_mask];
      }
    }
  }
}

}  // namespace

int radix_key_bits(DType t) {
  switch (t) {
    case DType::kBool:
    case DType::kUInt8:
    case DType::kInt8: return 8;
    case DType::kBFloat16:
    case DType::kFloat16:
    case DType::kInt16: return 16;
    case DType::kFloat32:
    case DType::kInt32: return 32;
    case DType::kFloat64:
    case DType::kInt64: return 64;
    case DType::kComplex64:
    case DType::kComplex128: dispatch_unsupported("radix select", t, "real and bool dtypes (complex has no order)");
  }
  return 64;
}

RadixValue radix_decode(uint64_t key, DType t) {
  switch (t) {
    case DType::kFloat32: {
      uint32_t b = static_cast<uint32_t>(float_bits<32>(key));
      float f;
      std::memcpy(&f, &b, 4);
      return {f, 0};
    }
    case DType::kFloat64: {
      uint64_t b = float_bits<64>(key);
      double d;
      std::memcpy(&d, &b, 8);
      return {d, 0};
    }
    case DType::kBFloat16: {
      BFloat16 h;
      h.bits = static_cast<uint16_t>(float_bits<16>(key));
      return {static_cast<float>(h), 0};
    }
    case DType::kFloat16: {
      Float16 h;
      h.bits = static_cast<uint16_t>(float_bits<16>(key));
      return {static_cast<float>(h), 0};
    }
    case DType::kInt32: {
      int32_t i = static_cast<int32_t>(static_cast<uint32_t>(key) ^ 0x80000000u);
      return {static_cast<double>(i), i};
    }
    case DType::kInt16: {
      int16_t i = static_cast<int16_t>(static_cast<uint16_t>(key) ^ 0x8000u);
      return {static_cast<double>(i), i};
    }
    case DType::kInt8: {
      int8_t i = static_cast<int8_t>(static_cast<uint8_t>(key) ^ 0x80u);
      return {static_cast<double>(i), i};
    }
    case DType::kUInt8: return {static_cast<double>(key), static_cast<int64_t>(key)};
    case DType::kInt64: {
      int64_t i = static_cast<int64_t>(key ^ (uint64_t{1} << 63));
      return {static_cast<double>(i), i};
    }
    case DType::kBool: return {static_cast<double>(key != 0), key != 0};
    case DType::kComplex64:
    case DType::kComplex128: dispatch_unsupported("radix_decode", t, "real and bool dtypes (complex has no order)");
  }
  return {};
}

Tensor radix_histogram(const Tensor& x, int64_t dim, const std::vector<uint64_t>& prefix, int shift,
                       int bits) {
  DT_KERNEL_ON_DEVICE(radix_histogram, x, dim, prefix, shift, bits);
  const int width = radix_key_bits(x.dtype());
  DT_CHECK(shift >= 0 && bits >= 1 && bits <= 16 && shift + bits <= width, "radix_histogram: digit of ", bits,
           " bits at bit ", shift, " does not fit the ", width, "-bit keys of ", dtype_name(x.dtype()),
           " (accepted: 1 to 16 bits, shift + bits <= ", width, ")");
  Tensor c = x.contiguous();
  int64_t outer = 1, n = 1, inner = 1;
  if (c.dim() > 0) {
    dim = wrap_dim(dim, c.dim(), "radix_histogram");
    n = c.size(dim);
    for (int64_t d = 0; d < dim; ++d) outer *= c.size(d);
    for (int64_t d = dim + 1; d < c.dim(); ++d) inner *= c.size(d);
  }
  const int64_t rows = outer * inner;
  DT_CHECK(static_cast<int64_t>(prefix.size()) == rows, "radix_histogram: ", prefix.size(),
           " prefixes for the ", rows, " rows of ", shape_str(x.sizes()), " along dim ", dim);
  const int64_t cols = (int64_t{1} << bits) + 1;
  Tensor out = Tensor::zeros({rows, cols}, DType::kInt64);
  int64_t* h = out.data<int64_t>();
  const bool whole = shift + bits == width;
  switch (c.dtype()) {
    case DType::kFloat32: histogram<float>(c, outer, n, inner, prefix, shift, bits, whole, h); break;
    case DType::kFloat64: histogram<double>(c, outer, n, inner, prefix, shift, bits, whole, h); break;
    case DType::kBFloat16: histogram<BFloat16>(c, outer, n, inner, prefix, shift, bits, whole, h); break;
    case DType::kFloat16: histogram<Float16>(c, outer, n, inner, prefix, shift, bits, whole, h); break;
    case DType::kInt32: histogram<int32_t>(c, outer, n, inner, prefix, shift, bits, whole, h); break;
    case DType::kInt64: histogram<int64_t>(c, outer, n, inner, prefix, shift, bits, whole, h); break;
    case DType::kInt16: histogram<int16_t>(c, outer, n, inner, prefix, shift, bits, whole, h); break;
    case DType::kInt8: histogram<int8_t>(c, outer, n, inner, prefix, shift, bits, whole, h); break;
    case DType::kUInt8: histogram<uint8_t>(c, outer, n, inner, prefix, shift, bits, whole, h); break;
    case DType::kBool: histogram<bool>(c, outer, n, inner, prefix, shift, bits, whole, h); break;
    case DType::kComplex64:
    case DType::kComplex128: dispatch_unsupported("radix_histogram", c.dtype(), "real and bool dtypes");
  }
  return out;
}

}  // namespace dtensor::kernels

// Shapes and strides: small inline vectors of int64 element counts.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_join.h"
#include "dtensor/core/error.h"

namespace dtensor {

using Shape = absl::InlinedVector<int64_t, 6>;

inline std::string shape_str(const Shape& s) { return "[" + absl::StrJoin(s, ", ") + "]"; }

// Element count. Throws Error for a negative size, or when the product of the sizes overflows int64
// (a shape with a 0 size has 0 elements whatever its other sizes).
inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  bool overflow = false, zero = false;
  for (int64_t d : s) {
    DT_CHECK(d >= 0, "shape ", shape_str(s), " has a negative size; sizes must be >= 0");
    zero |= d == 0;
    overflow |= __builtin_mul_overflow(n, d, &n);
  }
  if (zero) return 0;
  DT_CHECK(!overflow, "shape ", shape_str(s), " has more elements than int64 can count");
  return n;
}

// Row-major strides, in elements. Throws Error when a stride overflows int64 (possible only for
// shapes with a 0 size whose other sizes multiply past int64).
inline Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    DT_CHECK(!__builtin_mul_overflow(acc, s[i] > 0 ? s[i] : 1, &acc), "shape ", shape_str(s),
             ": its strides overflow int64");
  }
  return st;
}

// Normalizes a possibly negative dim against rank; throws dtensor::Error naming `what` if out of range.
int64_t wrap_dim(int64_t dim, int64_t rank, const char* what);

}  // namespace dtensor

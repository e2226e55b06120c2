// Shapes and strides: small inline vectors of int64 element counts.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_join.h"

namespace dtensor {

using Shape = absl::InlinedVector<int64_t, 6>;

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Row-major strides, in elements.
inline Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i] > 0 ? s[i] : 1;
  }
  return st;
}

inline std::string shape_str(const Shape& s) { return "[" + absl::StrJoin(s, ", ") + "]"; }

// Normalizes a possibly negative dim against rank; throws dtensor::Error naming `what` if out of range.
int64_t wrap_dim(int64_t dim, int64_t rank, const char* what);

}  // namespace dtensor

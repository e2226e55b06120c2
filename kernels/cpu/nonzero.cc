#include "kernels/cpu/nonzero.h"

#include <algorithm>
#include <complex>
#include <type_traits>
#include <vector>

#include "dtensor/core/error.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels {
namespace {

template <typename T>
bool is_nonzero(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v;
  } else if constexpr (std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>) {
    return v != T(0);  // either part (NaN parts too)
  } else {
    return static_cast<double>(v) != 0.0;  // NaN: nonzero; -0.0: zero
  }
}

}  // namespace

Tensor nonzero(const Tensor& x, const Shape& offset) {
  DT_KERNEL_HOST_ONLY(nonzero, x, offset);
  const int64_t r = x.dim();
  DT_CHECK(offset.empty() || static_cast<int64_t>(offset.size()) == r, "nonzero: offset ", shape_str(offset),
           " for a block of shape ", shape_str(x.sizes()), "; accepted: one entry per dim, or none");
  const Tensor c = x.contiguous();
  const int64_t n = c.numel();
  std::vector<int64_t> rows;  // r entries per nonzero element
  int64_t count = 0;          // rows (a 0-d x has rows of no entries)
  Shape idx(r, 0);
  DT_DISPATCH_ALL_AND_COMPLEX(c.dtype(), {
    const scalar_t* p = c.data<scalar_t>();
    for (int64_t i = 0; i < n; ++i) {
      if (is_nonzero(p[i])) {
        ++count;
        for (int64_t d = 0; d < r; ++d) rows.push_back(idx[d] + (offset.empty() ? 0 : offset[d]));
      }
      for (int64_t d = r; d-- > 0;) {  // the next row-major index
        if (++idx[d] < c.size(d)) break;
        idx[d] = 0;
      }
    }
  });
  Tensor out = Tensor::empty({count, r}, DType::kInt64);
  std::copy(rows.begin(), rows.end(), out.data<int64_t>());
  return out;
}

}  // namespace dtensor::kernels
